// The store's conformance tests, the TCP server: hundreds of concurrent clients, malformed
// and oversized frames, port in use, server gone, ephemeral ports. Reaches the plugin only
// through dlopen + dlpg_get_api (api_loader.h). The operations are in test_store_ops.cc;
// both build into test_store.
#include "test_store_util.h"
#include "test_store_wire.h"


TEST(Store, ManyConcurrentClients) {
  Served srv(20.0);
  const int n = 256;
  std::atomic<int> failures{0};
  std::vector<std::thread> ts;
  std::string url = srv.Url();
  for (int i = 0; i < n; ++i) {
    ts.emplace_back([&, i] {
      dlpg_store_t *c = nullptr;
      if (A()->store_open(url.c_str(), 20, &c) != DLPG_OK) {
        failures++;
        return;
      }
      std::mt19937_64 rng(1000 + i);
      std::string v = RandomBytes(rng, 64 + i);
      std::string key = "client/" + std::to_string(i);
      int64_t r = 0;
      if (A()->store_set(c, key.c_str(), v.data(), v.size()) != DLPG_OK ||
          A()->store_add(c, "clients", 1, &r) != DLPG_OK || r < 1 || r > n)
        failures++;
      // Every client waits for its neighbour's key, so all connections are open together.
      std::string nb = "client/" + std::to_string((i + 1) % n);
      std::mt19937_64 rng2(1000 + (i + 1) % n);
      std::string expect = RandomBytes(rng2, 64 + (i + 1) % n);
      std::string got(expect.size() + 10, '\0');
      size_t len = 0;
      if (A()->store_get(c, nb.c_str(), 20, &got[0], got.size(), &len) != DLPG_OK ||
          len != expect.size() || got.substr(0, len) != expect)
        failures++;
      A()->store_close(c);
    });
  }
  for (auto &t : ts) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(Get(srv.s, "clients"), std::to_string(n));

  // Threads sharing one handle: a blocked get must not hold up another thread's set.
  std::thread waiter([&] { EXPECT_EQ(Get(srv.s, "shared/later", 5.0), "v"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  double t0 = Now();
  EXPECT_EQ(A()->store_set(srv.s, "shared/later", "v", 1), DLPG_OK);
  waiter.join();
  EXPECT_LT(Now() - t0, Scaled(3.0));
}

TEST(Store, PortInUseIsAnErrorNotACrash) {
  Served srv;
  std::string url = "tcp://127.0.0.1:" + std::to_string(srv.port) + "?serve=1";
  dlpg_store_t *s2 = reinterpret_cast<dlpg_store_t *>(0x1);
  EXPECT_EQ(A()->store_open(url.c_str(), 2, &s2), DLPG_ERR_SYSTEM);
  EXPECT_EQ(s2, reinterpret_cast<dlpg_store_t *>(0x1));  // untouched on failure
  std::string msg = A()->last_error();
  EXPECT_NE(msg.find(std::to_string(srv.port)), std::string::npos) << msg;
  // (dlpg's words for it, "in use": tests/unit/test_wording.cc)
  // The first server is unharmed.
  ASSERT_EQ(A()->store_set(srv.s, "still", "up", 2), DLPG_OK);
  EXPECT_EQ(Get(srv.s, "still"), "up");
}

TEST(Store, MalformedAndOversizedFramesCloseOnlyThatConnection) {
  Served srv;
  ASSERT_EQ(A()->store_set(srv.s, "k", "v", 1), DLPG_OK);
  // An unknown command type.
  {
    int fd = RawConnect(srv.port);
    ASSERT_GE(fd, 0);
    const unsigned char f[] = {0, 0, 0, 5, 99, 0, 0, 0, 0};
    ASSERT_EQ(send(fd, f, sizeof f, 0), static_cast<ssize_t>(sizeof f));
    EXPECT_TRUE(ClosedByPeer(fd, 3.0));
    close(fd);
  }
  // Field lengths that run past the frame.
  {
    int fd = RawConnect(srv.port);
    ASSERT_GE(fd, 0);
    const unsigned char f[] = {0, 0, 0, 10, 2, 0, 0, 0, 1, 0, 0, 0, 200, 'k'};
    ASSERT_EQ(send(fd, f, sizeof f, 0), static_cast<ssize_t>(sizeof f));
    EXPECT_TRUE(ClosedByPeer(fd, 3.0));
    close(fd);
  }
  // An oversized frame: 4 GiB announced.
  {
    int fd = RawConnect(srv.port);
    ASSERT_GE(fd, 0);
    const unsigned char f[] = {0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0, 2};
    ASSERT_EQ(send(fd, f, sizeof f, 0), static_cast<ssize_t>(sizeof f));
    EXPECT_TRUE(ClosedByPeer(fd, 3.0));
    close(fd);
  }
  // Random garbage.
  {
    std::mt19937_64 rng(99);
    int fd = RawConnect(srv.port);
    ASSERT_GE(fd, 0);
    std::string g = RandomBytes(rng, 4096);
    g[0] = 0x7f;  // a length far over the limit
    send(fd, g.data(), g.size(), MSG_NOSIGNAL);
    EXPECT_TRUE(ClosedByPeer(fd, 3.0));
    close(fd);
  }
  // An idle raw connection stays open while the others misbehave, and the store still serves.
  int idle = RawConnect(srv.port);
  ASSERT_GE(idle, 0);
  EXPECT_EQ(Get(srv.s, "k"), "v");
  dlpg_store_t *c = nullptr;
  ASSERT_EQ(A()->store_open(srv.Url().c_str(), 5, &c), DLPG_OK);
  EXPECT_EQ(A()->store_set(c, "k2", "w", 1), DLPG_OK);
  EXPECT_EQ(Get(srv.s, "k2"), "w");
  EXPECT_FALSE(ClosedByPeer(idle, 0.2));
  close(idle);
  A()->store_close(c);
}

TEST(Store, ServerGoneFailsWithoutHanging) {
  dlpg_store_t *server = nullptr, *c = nullptr;
  ASSERT_EQ(A()->store_open("tcp://127.0.0.1:0?serve=1", 5, &server), DLPG_OK);
  int port = 0;
  ASSERT_EQ(A()->store_port(server, &port), DLPG_OK);
  std::string url = "tcp://127.0.0.1:" + std::to_string(port);
  ASSERT_EQ(A()->store_open(url.c_str(), 5, &c), DLPG_OK);
  ASSERT_EQ(A()->store_set(c, "a", "1", 1), DLPG_OK);
  // A client blocked in get when the server goes away returns with an error.
  std::thread blocked([&] {
    size_t len = 0;
    double t0 = Now();
    EXPECT_NE(A()->store_get(c, "never", 20, nullptr, 0, &len), DLPG_OK);
    EXPECT_LT(Now() - t0, Scaled(5.0));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  A()->store_close(server);  // the last reference: the server stops
  blocked.join();
  double t0 = Now();
  dlpg_status_t st = A()->store_set(c, "a", "2", 1);
  EXPECT_EQ(st, DLPG_ERR_REMOTE) << A()->last_error();
  EXPECT_NE(std::string(A()->last_error()).find(std::to_string(port)), std::string::npos)
      << A()->last_error();
  size_t len = 0;
  EXPECT_NE(A()->store_get(c, "a", 20, nullptr, 0, &len), DLPG_OK);
  EXPECT_LT(Now() - t0, Scaled(5.0));
  A()->store_close(c);
  // Nobody listening at open: the connect retries until the deadline, then TIMEOUT.
  t0 = Now();
  EXPECT_EQ(A()->store_open(url.c_str(), 0.5, &c), DLPG_ERR_TIMEOUT);
  EXPECT_LT(Now() - t0, Scaled(3.0));
  EXPECT_NE(std::string(A()->last_error()).find(url.substr(6)), std::string::npos)
      << A()->last_error();
}

TEST(Store, EphemeralPortAndRetainedByClients) {
  Served srv;
  EXPECT_GT(srv.port, 0);
  EXPECT_LE(srv.port, 65535);
  dlpg_store_t *c = nullptr;
  ASSERT_EQ(A()->store_open(srv.Url().c_str(), 5, &c), DLPG_OK);
  int p2 = 0;
  ASSERT_EQ(A()->store_port(c, &p2), DLPG_OK);
  EXPECT_EQ(p2, srv.port);
  A()->store_close(c);
  // A server on every interface is reached through the loopback too.
  dlpg_store_t *any = nullptr;
  ASSERT_EQ(A()->store_open("tcp://0.0.0.0:0?serve=1", 5, &any), DLPG_OK) << A()->last_error();
  int p3 = 0;
  ASSERT_EQ(A()->store_port(any, &p3), DLPG_OK);
  std::string url = "tcp://127.0.0.1:" + std::to_string(p3);
  ASSERT_EQ(A()->store_open(url.c_str(), 5, &c), DLPG_OK) << A()->last_error();
  ASSERT_EQ(A()->store_set(any, "any", "1", 1), DLPG_OK);
  EXPECT_EQ(Get(c, "any"), "1");
  A()->store_close(c);
  A()->store_close(any);
}
