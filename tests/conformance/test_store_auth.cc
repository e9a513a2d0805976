// The TCP store's authentication: with a token, nobody without it reads or writes
// a key, a connection cannot be hijacked (every frame carries a MAC over a counter), and no
// message shows the secret; without a token the store works as before (the other tests).
// Also: the server binds only the address it is told (StoreBind).
// Attackers are played on raw sockets (test_store_wire.h).
#include "test_store_util.h"
#include "test_store_wire.h"

namespace {

const char kToken[] = "s3cret-Token_42";

// A store with a token, serving on 127.0.0.1 (ephemeral port).
struct Guarded {
  dlpg_store_t *s = nullptr;
  int port = 0;
  Guarded() {
    std::string url = std::string("tcp://127.0.0.1:0?serve=1&token=") + kToken;
    EXPECT_EQ(A()->store_open(url.c_str(), 10.0, &s), DLPG_OK) << A()->last_error();
    if (s) {
      EXPECT_EQ(A()->store_port(s, &port), DLPG_OK);
    }
  }
  ~Guarded() { A()->store_close(s); }
  std::string Url(const std::string &query = "") const {
    return "tcp://127.0.0.1:" + std::to_string(port) + query;
  }
};

// A refusal for authentication: its status, a message, and never the secret. (dlpg's
// sentence, "authentication failed", is checked in tests/unit/test_wording.cc.)
void ExpectAuthFailure(dlpg_status_t st, const char *what) {
  std::string msg = A()->last_error();
  EXPECT_TRUE(st == DLPG_ERR_INVALID_ARGUMENT || st == DLPG_ERR_REMOTE) << what << ": " << st;
  EXPECT_NE(msg, "") << what;
  EXPECT_EQ(msg.find(kToken), std::string::npos) << what << " leaks the token: " << msg;
}

}  // namespace

TEST(StoreAuth, ClientsWithTheTokenWork) {
  Guarded srv;
  ASSERT_EQ(A()->store_set(srv.s, "nccl/0/id", "ID", 2), DLPG_OK) << A()->last_error();
  dlpg_store_t *c = nullptr;
  std::string url = srv.Url(std::string("?token=") + kToken);
  ASSERT_EQ(A()->store_open(url.c_str(), 5.0, &c), DLPG_OK) << A()->last_error();
  EXPECT_EQ(Get(c, "nccl/0/id"), "ID");
  std::mt19937_64 rng(7);
  std::string big = RandomBytes(rng, 3 << 20);  // several frames' worth of MACed bytes
  ASSERT_EQ(A()->store_set(c, "big", big.data(), big.size()), DLPG_OK) << A()->last_error();
  EXPECT_EQ(Get(srv.s, "big"), big);
  int64_t r = 0;
  EXPECT_EQ(A()->store_add(c, "n", 5, &r), DLPG_OK);
  EXPECT_EQ(r, 5);
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(A()->store_set(srv.s, "later", "x", 1), DLPG_OK);
  });
  const char *k[] = {"later"};
  EXPECT_EQ(A()->store_wait(c, k, 1, 5.0), DLPG_OK) << A()->last_error();
  later.join();
  A()->store_close(c);
}

TEST(StoreAuth, GlooGroupRendezvousesThroughAnAuthenticatedStore) {
  Guarded srv;
  std::string url = srv.Url(std::string("?token=") + kToken);
  EXPECT_EQ(AllreduceThrough(4, [&](int) { return url; }, "auth-group"), 0);
}

TEST(StoreAuth, TokenFromTheEnvironment) {
  ScopedEnv env("DLPG_STORE_TOKEN", kToken);
  dlpg_store_t *s = nullptr, *c = nullptr;
  ASSERT_EQ(A()->store_open("tcp://127.0.0.1:0?serve=1", 5.0, &s), DLPG_OK) << A()->last_error();
  int port = 0;
  ASSERT_EQ(A()->store_port(s, &port), DLPG_OK);
  std::string url = "tcp://127.0.0.1:" + std::to_string(port);
  ASSERT_EQ(A()->store_open(url.c_str(), 5.0, &c), DLPG_OK) << A()->last_error();
  EXPECT_EQ(A()->store_set(c, "k", "v", 1), DLPG_OK) << A()->last_error();
  EXPECT_EQ(Get(s, "k"), "v");
  A()->store_close(c);
  // The server really requires it: a client with another token is refused.
  std::string wrong = url + "?token=other";
  EXPECT_NE(A()->store_open(wrong.c_str(), 2.0, &c), DLPG_OK);
  ExpectAuthFailure(DLPG_ERR_INVALID_ARGUMENT, "wrong token over an environment token");
  A()->store_close(s);
}

TEST(StoreAuth, ClientWithoutTokenIsRefusedWithoutAKey) {
  Guarded srv;
  ASSERT_EQ(A()->store_set(srv.s, "gloo/0", "ADDR", 4), DLPG_OK);
  dlpg_store_t *c = nullptr;
  std::string url = srv.Url();
  // Connecting is not yet asking; the first request is refused.
  if (A()->store_open(url.c_str(), 2.0, &c) == DLPG_OK) {
    char buf[16];
    size_t len = 0;
    ExpectAuthFailure(A()->store_get(c, "gloo/0", 1.0, buf, sizeof buf, &len), "get");
    ExpectAuthFailure(A()->store_set(c, "gloo/0", "EVIL", 4), "set");
    int deleted = 0;
    ExpectAuthFailure(A()->store_delete_key(c, "gloo/0", &deleted), "delete");
    A()->store_close(c);
  } else {
    ExpectAuthFailure(DLPG_ERR_INVALID_ARGUMENT, "open");
  }
  EXPECT_EQ(Get(srv.s, "gloo/0"), "ADDR");  // untouched
}

TEST(StoreAuth, WrongTokenFailsAtOpenAndNeverShowsEitherToken) {
  Guarded srv;
  dlpg_store_t *c = nullptr;
  std::string url = srv.Url("?token=Wr0ngToken");
  dlpg_status_t st = A()->store_open(url.c_str(), 2.0, &c);
  EXPECT_EQ(st, DLPG_ERR_INVALID_ARGUMENT);
  ExpectAuthFailure(st, "wrong token");
  EXPECT_EQ(std::string(A()->last_error()).find("Wr0ngToken"), std::string::npos)
      << A()->last_error();
}

TEST(StoreAuth, ClientTokenOnAServerWithoutOneIsRefused) {
  Served plain;
  dlpg_store_t *c = nullptr;
  std::string url = plain.Url() + "?token=" + kToken;
  dlpg_status_t st = A()->store_open(url.c_str(), 2.0, &c);
  EXPECT_EQ(st, DLPG_ERR_INVALID_ARGUMENT);
  ExpectAuthFailure(st, "token on the client only");
}

TEST(StoreAuth, UnreachableUrlDoesNotEchoTheToken) {
  dlpg_store_t *c = nullptr;
  // Port 1 on loopback: nothing listens; the error quotes the URL.
  EXPECT_NE(A()->store_open("tcp://127.0.0.1:1?token=TopSecret99", 0.3, &c), DLPG_OK);
  std::string msg = A()->last_error();
  EXPECT_EQ(msg.find("TopSecret99"), std::string::npos) << msg;
  EXPECT_NE(msg.find("127.0.0.1:1"), std::string::npos) << msg;  // the URL, its secret masked
  EXPECT_NE(A()->store_open("tcp://127.0.0.1:1?serve=2&token=TopSecret99", 0.3, &c), DLPG_OK);
  msg = A()->last_error();
  EXPECT_EQ(msg.find("TopSecret99"), std::string::npos) << msg;
}

TEST(StoreAuth, RawAttackerGetsNoKey) {
  Guarded srv;
  ASSERT_EQ(A()->store_set(srv.s, "nccl/1/id", "UNIQUEID", 8), DLPG_OK);
  // A plain GET before any handshake: refused and closed.
  int fd = RawConnect(srv.port);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(wire::SendAll(fd, wire::Frame(wire::GET, {"nccl/1/id"})));
  wire::Reply r;
  ASSERT_TRUE(wire::ReadReply(fd, &r));
  EXPECT_EQ(r.type, wire::AUTH_FAILED);
  ASSERT_EQ(r.fields.size(), 1u);
  EXPECT_NE(r.fields[0], "");
  EXPECT_EQ(r.raw.find("UNIQUEID"), std::string::npos);
  EXPECT_TRUE(ClosedByPeer(fd, 3.0));
  close(fd);
  // A handshake with the wrong token: the server's proof does not verify, and a forged
  // client proof is refused.
  wire::Session bad;
  std::string why;
  EXPECT_FALSE(bad.Open(srv.port, "not-the-token", &why));
  fd = RawConnect(srv.port);
  std::string cn(32, 'c');
  ASSERT_TRUE(wire::SendAll(fd, wire::Frame(wire::HELLO, {cn})));
  ASSERT_TRUE(wire::ReadReply(fd, &r));
  ASSERT_EQ(r.type, wire::OK);
  ASSERT_TRUE(wire::SendAll(fd, wire::Frame(wire::AUTH, {std::string(32, 'x')})));
  ASSERT_TRUE(wire::ReadReply(fd, &r));
  EXPECT_EQ(r.type, wire::AUTH_FAILED);
  EXPECT_TRUE(ClosedByPeer(fd, 3.0));
  close(fd);
  // A stranger cannot make the server buffer a large frame before authenticating.
  fd = RawConnect(srv.port);
  std::string huge;
  wire::PutU32(&huge, 60u << 20);
  ASSERT_TRUE(wire::SendAll(fd, huge));
  EXPECT_TRUE(ClosedByPeer(fd, 3.0));
  close(fd);
  EXPECT_EQ(Get(srv.s, "nccl/1/id"), "UNIQUEID");
}

TEST(StoreAuth, FramesCarryMacsSoAConnectionCannotBeHijacked) {
  Guarded srv;
  ASSERT_EQ(A()->store_set(srv.s, "k", "original", 8), DLPG_OK);
  wire::Session a;
  std::string why;
  ASSERT_TRUE(a.Open(srv.port, kToken, &why)) << why;
  // A correctly sealed request works (the test computes the MACs independently).
  std::string get = wire::Frame(wire::GET, {"k"});
  ASSERT_TRUE(wire::SendAll(a.fd, a.Seal(get)));
  wire::Reply r;
  ASSERT_TRUE(a.Read(&r));
  ASSERT_EQ(r.type, wire::OK);
  EXPECT_EQ(r.fields.at(0), "original");
  // Injected: a SET whose MAC is not made with the session key.
  std::string set = wire::Frame(wire::SET, {"k", "hijacked"});
  ASSERT_TRUE(wire::SendAll(a.fd, set + std::string(32, '\0')));
  EXPECT_TRUE(ClosedByPeer(a.fd, 3.0));
  // Replayed: a frame sealed for counter 0 sent again as the second frame.
  wire::Session b;
  ASSERT_TRUE(b.Open(srv.port, kToken, &why)) << why;
  std::string sealed = b.Seal(get);
  ASSERT_TRUE(wire::SendAll(b.fd, sealed));
  ASSERT_TRUE(b.Read(&r));
  ASSERT_TRUE(wire::SendAll(b.fd, sealed));
  EXPECT_TRUE(ClosedByPeer(b.fd, 3.0));
  // Altered: the right MAC over different bytes.
  wire::Session c;
  ASSERT_TRUE(c.Open(srv.port, kToken, &why)) << why;
  std::string ok = c.Seal(wire::Frame(wire::SET, {"k", "evil-one"}));
  ok[ok.size() - 40] ^= 1;  // a byte of the value
  ASSERT_TRUE(wire::SendAll(c.fd, ok));
  EXPECT_TRUE(ClosedByPeer(c.fd, 3.0));
  EXPECT_EQ(Get(srv.s, "k"), "original");
}

namespace {

// Whether something accepts TCP connections on addr:port (addr an IPv4 literal).
bool Accepts(const char *addr, int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, addr, &a.sin_addr);
  bool ok = connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

}  // namespace

// The server binds the address it is told, not every interface: 127.0.0.2 (another local
// address of the loopback network) is not served by a store bound to 127.0.0.1.
TEST(StoreBind, ServeBindsTheGivenHostOnly) {
  Served srv;
  EXPECT_TRUE(Accepts("127.0.0.1", srv.port));
  EXPECT_FALSE(Accepts("127.0.0.2", srv.port));
  dlpg_store_t *all = nullptr;
  ASSERT_EQ(A()->store_open("tcp://*:0?serve=1", 5.0, &all), DLPG_OK) << A()->last_error();
  int port = 0;
  ASSERT_EQ(A()->store_port(all, &port), DLPG_OK);
  EXPECT_TRUE(Accepts("127.0.0.2", port));  // '*' asks for every interface
  A()->store_close(all);
}

// env:// rank 0 binds MASTER_ADDR's address unless DLPG_STORE_BIND says otherwise (forked,
// so the launcher variables do not leak into other tests).
TEST(StoreBind, EnvRankZeroBindsMasterAddr) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("RANK", "0", 1);
    int code = 0;
    for (int round = 0; round < 2 && !code; ++round) {
      // env:// serves on the port it is told: ports at random until one is free (a taken
      // port is DLPG_ERR_SYSTEM), none picked by binding and releasing it.
      int port = 0;
      if (round == 1) setenv("DLPG_STORE_BIND", "*", 1);
      dlpg_store_t *s = nullptr;
      dlpg_status_t st = DLPG_ERR_SYSTEM;
      for (int attempt = 0; attempt < 20 && st == DLPG_ERR_SYSTEM; attempt++) {
        port = 20000 + static_cast<int>((static_cast<unsigned>(getpid()) * 7919u +
                                         static_cast<unsigned>(attempt) * 104729u) % 40000u);
        setenv("DLPG_STORE_PORT", std::to_string(port).c_str(), 1);
        st = A()->store_open("env://", 5, &s);
      }
      if (st != DLPG_OK) code = 10 + round;
      else if (!Accepts("127.0.0.1", port)) code = 20 + round;
      else if (Accepts("127.0.0.2", port) != (round == 1)) code = 30 + round;
      A()->store_close(s);
    }
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10/11: open failed, 20/21: not on MASTER_ADDR, "
                                       "30: bound the wildcard, 31: DLPG_STORE_BIND=* ignored";
}
