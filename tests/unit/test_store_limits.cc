// The TCP store server's bounded resources, each finding reproduced first: reply
// amplification, storage, key and value sizes, WAIT size and length, parked waiters that
// slowed every request, connection floods and descriptor exhaustion, stalled frames and idle
// connections. Limits are made small through the DLPG_STORE_* parameters, read when a server
// starts; each test checks that the offender gets a clear error (or is cut off) while every
// other client is still served.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <fstream>

#include "test_store_util.h"
#include "test_store_wire.h"

namespace {

// Resident set of this process (the servers under test run in it), in MiB.
double RssMiB() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

void ExpectRefusal(dlpg_status_t st, const char *limit) {
  std::string msg = A()->last_error();
  EXPECT_NE(st, DLPG_OK) << limit;
  EXPECT_NE(msg.find(limit), std::string::npos) << msg;
}

}  // namespace

TEST(StoreLimits, UnreadRepliesAreBoundedAndOthersServed) {
  ScopedEnv reply("DLPG_STORE_MAX_REPLY_BYTES", "65536");
  ScopedEnv queued("DLPG_STORE_MAX_QUEUED_BYTES", std::to_string(8 << 20));
  ScopedEnv stall("DLPG_STORE_FRAME_TIMEOUT_S", "2");
  Served srv(20.0);
  std::mt19937_64 rng(3);
  std::string big = RandomBytes(rng, 4 << 20);
  ASSERT_EQ(A()->store_set(srv.s, "big", big.data(), big.size()), DLPG_OK);
  double before = RssMiB();
  // 8 connections pipeline 64 GETs of the 4 MiB value each and never read a reply.
  std::vector<int> fds;
  std::string gets;
  for (int i = 0; i < 64; ++i) gets += wire::Frame(wire::GET, {"big"});
  for (int i = 0; i < 8; ++i) {
    int fd = RawConnect(srv.port);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(wire::SendAll(fd, gets));
    fds.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  double grown = RssMiB() - before;
  // Unbounded, each connection queued up to 64 MiB of replies (over 500 MiB here).
  EXPECT_LT(grown, 48.0) << "RSS grew by " << grown << " MiB";
  // Meanwhile small requests of another client are served at once.
  dlpg_store_t *c = nullptr;
  ASSERT_EQ(A()->store_open(srv.Url().c_str(), 5.0, &c), DLPG_OK);
  double t0 = Now();
  EXPECT_EQ(A()->store_set(c, "small", "v", 1), DLPG_OK) << A()->last_error();
  EXPECT_EQ(Get(c, "small"), "v");
  EXPECT_LT(Now() - t0, Scaled(3.0));  // milliseconds unloaded; the margin is for a busy CI machine
  // A large GET now finds the queue full: BUSY, retried until its deadline, then a clear
  // timeout naming the limit...
  std::vector<char> buf(big.size());
  size_t len = 0;
  dlpg_status_t st = A()->store_get(c, "big", 0.3, buf.data(), buf.size(), &len);
  if (st != DLPG_OK) {
    EXPECT_EQ(st, DLPG_ERR_TIMEOUT);
    EXPECT_NE(std::string(A()->last_error()).find("DLPG_STORE_MAX_QUEUED_BYTES"),
              std::string::npos) << A()->last_error();
  }
  // ...and succeeds once the queue drains (into the readers' kernel buffers, or because a
  // reader that stalls is cut off after DLPG_STORE_FRAME_TIMEOUT_S).
  ASSERT_EQ(A()->store_get(c, "big", 10.0, buf.data(), buf.size(), &len), DLPG_OK)
      << A()->last_error();
  EXPECT_EQ(std::string(buf.data(), len), big);
  for (int fd : fds) close(fd);
  A()->store_close(c);
}

TEST(StoreLimits, PipelinedRequestsResumeAsRepliesDrain) {
  ScopedEnv reply("DLPG_STORE_MAX_REPLY_BYTES", "64");
  Served srv;
  std::string v(1000, 'v');
  ASSERT_EQ(A()->store_set(srv.s, "k", v.data(), v.size()), DLPG_OK);
  int fd = RawConnect(srv.port);
  std::string reqs;
  for (int i = 0; i < 200; ++i) reqs += wire::Frame(wire::GET, {"k"});
  ASSERT_TRUE(wire::SendAll(fd, reqs));
  for (int i = 0; i < 200; ++i) {
    wire::Reply r;
    ASSERT_TRUE(wire::ReadReply(fd, &r)) << "reply " << i;
    ASSERT_EQ(r.type, wire::OK);
    ASSERT_EQ(r.fields.at(0), v);
  }
  close(fd);
}

TEST(StoreLimits, StorageQuotaOfBytesAndKeys) {
  ScopedEnv bytes("DLPG_STORE_MAX_BYTES", std::to_string(1 << 20));
  ScopedEnv keys("DLPG_STORE_MAX_KEYS", "64");
  Served srv;
  std::string quarter(256 << 10, 'q');
  for (int i = 0; i < 3; ++i) {
    std::string k = "blob/" + std::to_string(i);
    ASSERT_EQ(A()->store_set(srv.s, k.c_str(), quarter.data(), quarter.size()), DLPG_OK)
        << A()->last_error();
  }
  ExpectRefusal(A()->store_set(srv.s, "blob/3", quarter.data(), quarter.size()),
                "DLPG_STORE_MAX_BYTES");
  // Others are still served, replacing a value by a smaller one is fine, deleting frees.
  EXPECT_EQ(A()->store_set(srv.s, "small", "s", 1), DLPG_OK) << A()->last_error();
  EXPECT_EQ(A()->store_set(srv.s, "blob/0", "x", 1), DLPG_OK) << A()->last_error();
  EXPECT_EQ(A()->store_set(srv.s, "blob/3", quarter.data(), quarter.size()), DLPG_OK)
      << A()->last_error();
  // Keys: fill to 64, then one more fails while overwriting an existing key works.
  for (int i = 0; i < 64; ++i) {
    std::string k = "key/" + std::to_string(i);
    dlpg_status_t st = A()->store_set(srv.s, k.c_str(), "1", 1);
    if (st != DLPG_OK) {
      ExpectRefusal(st, "DLPG_STORE_MAX_KEYS");
      break;
    }
  }
  ExpectRefusal(A()->store_set(srv.s, "one/more", "1", 1), "DLPG_STORE_MAX_KEYS");
  int64_t r = 0;
  ExpectRefusal(A()->store_add(srv.s, "new/counter", 1, &r), "DLPG_STORE_MAX_KEYS");
  EXPECT_EQ(A()->store_set(srv.s, "key/0", "2", 1), DLPG_OK) << A()->last_error();
  EXPECT_EQ(Get(srv.s, "key/0"), "2");
}

TEST(StoreLimits, KeyAndValueSizes) {
  ScopedEnv k("DLPG_STORE_MAX_KEY_BYTES", "16");
  ScopedEnv v("DLPG_STORE_MAX_VALUE_BYTES", "1000");
  Served srv;
  std::string value(1001, 'v');
  ExpectRefusal(A()->store_set(srv.s, "k", value.data(), value.size()),
                "DLPG_STORE_MAX_VALUE_BYTES");
  EXPECT_EQ(A()->store_set(srv.s, "k", value.data(), 1000), DLPG_OK) << A()->last_error();
  ExpectRefusal(A()->store_set(srv.s, "a-key-of-17-byte", "v", 1) == DLPG_OK
                    ? A()->store_set(srv.s, "a-key-of-17-bytes", "v", 1)
                    : DLPG_ERR_INTERNAL,
                "DLPG_STORE_MAX_KEY_BYTES");
  char buf[4];
  size_t len = 0;
  ExpectRefusal(A()->store_get(srv.s, "a-key-of-17-bytes", 1.0, buf, sizeof buf, &len),
                "DLPG_STORE_MAX_KEY_BYTES");
}

TEST(StoreLimits, WaitKeysAndLength) {
  ScopedEnv keys("DLPG_STORE_MAX_WAIT_KEYS", "4");
  ScopedEnv secs("DLPG_STORE_MAX_WAIT_S", "1");
  Served srv;
  const char *five[] = {"a", "b", "c", "d", "e"};
  ExpectRefusal(A()->store_wait(srv.s, five, 5, 0.5), "DLPG_STORE_MAX_WAIT_KEYS");
  int all = 0;
  ExpectRefusal(A()->store_check(srv.s, five, 5, &all), "DLPG_STORE_MAX_WAIT_KEYS");
  ExpectRefusal(A()->store_wait(srv.s, five, 1, 3.0), "DLPG_STORE_MAX_WAIT_S");
  double t0 = Now();
  EXPECT_EQ(A()->store_wait(srv.s, five, 4, 0.3), DLPG_ERR_TIMEOUT);
  EXPECT_LT(Now() - t0, Scaled(3.0));
  EXPECT_EQ(A()->store_set(srv.s, "other", "ok", 2), DLPG_OK);
}

TEST(StoreLimits, ParkedWaitersCostOnlyTheirKeys) {
  Served srv(30.0);
  // 16 connections park a WAIT on 1 000 missing keys each: 16 000 parked keys.
  std::vector<int> fds;
  for (int c = 0; c < 16; ++c) {
    std::vector<std::string> f{wire::U64(60000)};
    for (int i = 0; i < 1000; ++i) f.push_back("parked/" + std::to_string(c) + "/" + std::to_string(i));
    int fd = RawConnect(srv.port);
    ASSERT_TRUE(wire::SendAll(fd, wire::Frame(wire::WAIT, f)));
    fds.push_back(fd);
  }
  // A WAIT on two keys answers only when both are set, naming nothing extra.
  int w = RawConnect(srv.port);
  ASSERT_TRUE(wire::SendAll(w, wire::Frame(wire::WAIT, {wire::U64(10000), "x/1", "x/2"})));
  dlpg_store_t *c = nullptr;
  ASSERT_EQ(A()->store_open(srv.Url().c_str(), 5.0, &c), DLPG_OK);
  ASSERT_EQ(A()->store_set(c, "x/1", "1", 1), DLPG_OK);
  pollfd p{w, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 100), 0) << "answered with a key missing";
  ASSERT_EQ(A()->store_set(c, "x/2", "2", 1), DLPG_OK);
  wire::Reply r;
  ASSERT_TRUE(wire::ReadReply(w, &r));
  EXPECT_EQ(r.type, wire::OK);
  close(w);
  // GET latency of another client: every event used to rescan all 16 000 parked keys
  // (311 ms median measured); now a request touches only its own key.
  ASSERT_EQ(A()->store_set(c, "hot", "v", 1), DLPG_OK);
  std::vector<double> t;
  char buf[4];
  size_t len = 0;
  for (int i = 0; i < 100; ++i) {
    double t0 = Now();
    ASSERT_EQ(A()->store_set(c, "hot", "v", 1), DLPG_OK);
    ASSERT_EQ(A()->store_get(c, "hot", 5.0, buf, sizeof buf, &len), DLPG_OK);
    t.push_back(Now() - t0);
  }
  std::sort(t.begin(), t.end());
  EXPECT_LT(t[t.size() / 2], Scaled(0.05)) << "median SET+GET " << t[t.size() / 2] * 1e3 << " ms";
  // Setting one parked key of each connection answers none of them yet.
  for (int cn = 0; cn < 16; ++cn) {
    std::string k = "parked/" + std::to_string(cn) + "/0";
    ASSERT_EQ(A()->store_set(c, k.c_str(), "1", 1), DLPG_OK);
  }
  for (int fd : fds) {
    pollfd q{fd, POLLIN, 0};
    EXPECT_EQ(poll(&q, 1, 0), 0);
    close(fd);
  }
  A()->store_close(c);
}

TEST(StoreLimits, ConnectionsPerPeerAreCappedWithAClearError) {
  ScopedEnv cap("DLPG_STORE_MAX_CONNS_PER_PEER", "8");
  Served srv;
  std::vector<int> fds;
  // Hold connections until the server refuses one (its own client holds one already). Each
  // completes a request, as a real client's does: a connection that never completed one
  // would make room for the next (test_store_conns.cc).
  bool refused = false;
  for (int i = 0; i < 16 && !refused; ++i) {
    int fd = RawConnect(srv.port);
    ASSERT_GE(fd, 0);
    wire::SendAll(fd, wire::Frame(wire::GET, {"k"}));  // a refused one may be closed already
    wire::Reply r;
    ASSERT_TRUE(wire::ReadReply(fd, &r));
    if (r.type != wire::NOT_FOUND) {
      EXPECT_EQ(r.type, wire::ERROR);
      EXPECT_NE(r.fields.at(0).find("DLPG_STORE_MAX_CONNS_PER_PEER"), std::string::npos);
      refused = true;
      close(fd);
    } else {
      fds.push_back(fd);
    }
  }
  EXPECT_TRUE(refused);
  EXPECT_LE(fds.size(), 8u);
  // A new client gets the reason at once, not a timeout.
  dlpg_store_t *c = nullptr;
  double t0 = Now();
  dlpg_status_t st = A()->store_open(srv.Url().c_str(), 2.0, &c);
  if (st == DLPG_OK) st = A()->store_set(c, "k", "v", 1);
  ExpectRefusal(st, "DLPG_STORE_MAX_CONNS_PER_PEER");
  EXPECT_LT(Now() - t0, Scaled(3.0));
  A()->store_close(c);
  // The server's own client is unaffected; freed slots serve new clients.
  EXPECT_EQ(A()->store_set(srv.s, "k", "v", 1), DLPG_OK) << A()->last_error();
  for (int fd : fds) close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_EQ(A()->store_open(srv.Url().c_str(), 2.0, &c), DLPG_OK) << A()->last_error();
  EXPECT_EQ(Get(c, "k"), "v");
  A()->store_close(c);
}

TEST(StoreLimits, StalledFramesAndIdleConnectionsTimeOut) {
  ScopedEnv frame("DLPG_STORE_FRAME_TIMEOUT_S", "1");
  ScopedEnv idle("DLPG_STORE_IDLE_TIMEOUT_S", "1");
  Served srv;
  int partial = RawConnect(srv.port);
  ASSERT_TRUE(wire::SendAll(partial, std::string("\0\0", 2)));  // half a length
  int body = RawConnect(srv.port);
  ASSERT_TRUE(wire::SendAll(body, wire::Frame(wire::SET, {"k", std::string(100, 'v')}).substr(0, 20)));
  int quiet = RawConnect(srv.port);
  dlpg_store_t *c = nullptr;
  ASSERT_EQ(A()->store_open(srv.Url().c_str(), 5.0, &c), DLPG_OK);
  ASSERT_EQ(A()->store_set(c, "k", "v", 1), DLPG_OK);
  EXPECT_TRUE(ClosedByPeer(partial, 4.0));
  EXPECT_TRUE(ClosedByPeer(body, 4.0));
  EXPECT_TRUE(ClosedByPeer(quiet, 4.0));
  // The client's pooled connection was closed for idleness too: it reconnects unseen.
  EXPECT_EQ(Get(c, "k"), "v");
  int64_t r = 0;
  EXPECT_EQ(A()->store_add(c, "n", 1, &r), DLPG_OK) << A()->last_error();
  EXPECT_EQ(r, 1);
  close(partial);
  close(body);
  close(quiet);
  A()->store_close(c);
}

#ifdef DLPG_STORE_BIN
// The finding: with ulimit -n 1024, 1 100 idle connections made every new client time out.
// Here dlpg-store runs with 256 descriptors and 300 connections are opened, each completing
// a request (connections that never complete one are evicted for new ones instead:
// test_store_conns.cc): the excess is refused with a reason, a new client hears why at once,
// and once the idle ones are closed (DLPG_STORE_IDLE_TIMEOUT_S) clients are served again.
TEST(StoreLimits, DescriptorExhaustionIsRefusedNotHung) {
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  pid_t pid = fork();
  if (pid == 0) {
    rlimit rl{256, 256};
    setrlimit(RLIMIT_NOFILE, &rl);
    setenv("DLPG_STORE_IDLE_TIMEOUT_S", "2", 1);
    dup2(out[1], 1);
    close(out[0]);
    execl(DLPG_STORE_BIN, "dlpg-store", "--host", "127.0.0.1", "--port", "0", (char *)nullptr);
    _exit(127);
  }
  close(out[1]);
  std::string banner;
  char ch;
  while (read(out[0], &ch, 1) == 1 && ch != '\n') banner += ch;
  close(out[0]);
  // "dlpg-store listening on 127.0.0.1:PORT (...)": the real bound address.
  size_t at = banner.find("127.0.0.1:");
  ASSERT_NE(at, std::string::npos) << banner;
  int port = std::stoi(banner.substr(at + 10));
  std::vector<int> fds;
  int refused = 0;
  for (int i = 0; i < 300; ++i) {
    int fd = RawConnect(port);
    if (fd < 0) continue;
    fds.push_back(fd);
    wire::SendAll(fd, wire::Frame(wire::GET, {"k"}));  // a refused one may be closed already
    wire::Reply r;
    if (wire::ReadReply(fd, &r, Scaled(10)) && r.type == wire::ERROR) refused++;
  }
  EXPECT_GT(refused, 0);
  std::string url = "tcp://127.0.0.1:" + std::to_string(port);
  dlpg_store_t *c = nullptr;
  double t0 = Now();
  dlpg_status_t st = A()->store_open(url.c_str(), 2.0, &c);
  if (st == DLPG_OK) st = A()->store_set(c, "k", "v", 1);
  ExpectRefusal(st, "DLPG_STORE_MAX_CONNS");
  EXPECT_LT(Now() - t0, Scaled(3.0));
  A()->store_close(c);
  c = nullptr;
  // Idle connections are closed (after DLPG_STORE_IDLE_TIMEOUT_S): a client is served again
  // within a generous deadline.
  st = DLPG_ERR_SYSTEM;
  for (double end = Now() + Scaled(30); st != DLPG_OK && Now() < end;) {
    st = A()->store_open(url.c_str(), 5.0, &c);
    if (st == DLPG_OK) st = A()->store_set(c, "k", "v", 1);
    if (st != DLPG_OK) {
      A()->store_close(c);
      c = nullptr;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ASSERT_EQ(st, DLPG_OK) << A()->last_error();
  EXPECT_EQ(Get(c, "k"), "v");
  A()->store_close(c);
  for (int fd : fds) close(fd);
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}
#endif
