// redis://HOST:PORT[/DB] stores: the dlpg store operations on a real Redis server
// that each test starts itself (Debian's redis-server on a free loopback port, no
// persistence), its password through ?token= or DLPG_STORE_TOKEN, database selection, and a
// rendezvous of many clients. Skipped, saying so, where redis-server is not installed.
#include <fcntl.h>
#include <signal.h>

#include <random>

#include "redis_server.h"

using dlpg_redis::Redis;

TEST(StoreRedis, Operations) {
  SKIP_WITHOUT_REDIS();
  Redis redis;
  dlpg_store_t *s = nullptr;
  ASSERT_EQ(A()->store_open(redis.Url().c_str(), 5.0, &s), DLPG_OK) << A()->last_error();
  std::mt19937_64 rng(11);
  std::string v = RandomBytes(rng, 100000);  // binary, with a NUL inside
  ASSERT_EQ(A()->store_set(s, "bin", v.data(), v.size()), DLPG_OK) << A()->last_error();
  EXPECT_EQ(Get(s, "bin"), v);
  ASSERT_EQ(A()->store_set(s, "empty", "", 0), DLPG_OK);
  EXPECT_EQ(Get(s, "empty"), "");
  int64_t r = 0;
  EXPECT_EQ(A()->store_add(s, "n", 3, &r), DLPG_OK);
  EXPECT_EQ(A()->store_add(s, "n", -5, &r), DLPG_OK);
  EXPECT_EQ(r, -2);
  EXPECT_EQ(A()->store_add(s, "bin", 1, &r), DLPG_ERR_INVALID_ARGUMENT);
  const char *both[] = {"n", "bin"}, *missing[] = {"n", "nope/1", "nope/2"};
  int all = 0;
  EXPECT_EQ(A()->store_check(s, both, 2, &all), DLPG_OK);
  EXPECT_EQ(all, 1);
  EXPECT_EQ(A()->store_check(s, missing, 3, &all), DLPG_OK);
  EXPECT_EQ(all, 0);
  double t0 = Now();
  EXPECT_EQ(A()->store_wait(s, missing, 3, 0.3), DLPG_ERR_TIMEOUT);
  std::string msg = A()->last_error();
  EXPECT_NE(msg.find("nope/1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nope/2"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("'n'"), std::string::npos) << msg;
  EXPECT_LT(Now() - t0, Scaled(3.0));
  int deleted = 0;
  EXPECT_EQ(A()->store_delete_key(s, "n", &deleted), DLPG_OK);
  EXPECT_EQ(deleted, 1);
  EXPECT_EQ(A()->store_delete_key(s, "n", &deleted), DLPG_OK);
  EXPECT_EQ(deleted, 0);
  // A get blocks until another client sets the key.
  std::thread later([&] {
    dlpg_store_t *o = nullptr;
    ASSERT_EQ(A()->store_open(redis.Url().c_str(), 5.0, &o), DLPG_OK);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(A()->store_set(o, "later", "here", 4), DLPG_OK);
    A()->store_close(o);
  });
  EXPECT_EQ(Get(s, "later", 5.0), "here");
  later.join();
  int port = 0;
  EXPECT_EQ(A()->store_port(s, &port), DLPG_ERR_UNSUPPORTED);
  A()->store_close(s);
}

TEST(StoreRedis, DatabasesAreSeparate) {
  SKIP_WITHOUT_REDIS();
  Redis redis;
  dlpg_store_t *a = nullptr, *b = nullptr;
  ASSERT_EQ(A()->store_open(redis.Url("/0").c_str(), 5.0, &a), DLPG_OK) << A()->last_error();
  ASSERT_EQ(A()->store_open(redis.Url("/3").c_str(), 5.0, &b), DLPG_OK) << A()->last_error();
  ASSERT_EQ(A()->store_set(a, "k", "zero", 4), DLPG_OK);
  ASSERT_EQ(A()->store_set(b, "k", "three", 5), DLPG_OK);
  EXPECT_EQ(Get(a, "k"), "zero");
  EXPECT_EQ(Get(b, "k"), "three");
  A()->store_close(a);
  A()->store_close(b);
  dlpg_store_t *c = nullptr;
  EXPECT_EQ(A()->store_open(redis.Url("/x").c_str(), 1.0, &c), DLPG_ERR_INVALID_ARGUMENT);
}

TEST(StoreRedis, PasswordThroughTokenOrEnvironment) {
  SKIP_WITHOUT_REDIS();
  const std::string pw = "redis-Pa55";
  Redis redis(pw);
  dlpg_store_t *s = nullptr;
  ASSERT_EQ(A()->store_open(redis.Url("?token=" + pw).c_str(), 5.0, &s), DLPG_OK)
      << A()->last_error();
  EXPECT_EQ(A()->store_set(s, "k", "v", 1), DLPG_OK) << A()->last_error();
  A()->store_close(s);
  {
    ScopedEnv env("DLPG_STORE_TOKEN", pw);
    ASSERT_EQ(A()->store_open(redis.Url("/2").c_str(), 5.0, &s), DLPG_OK) << A()->last_error();
    A()->store_close(s);
  }
  for (std::string tail : {std::string(""), std::string("?token=wrong-one")}) {
    dlpg_status_t st = A()->store_open(redis.Url(tail).c_str(), 2.0, &s);
    std::string msg = A()->last_error();
    EXPECT_EQ(st, DLPG_ERR_INVALID_ARGUMENT) << tail;
    EXPECT_NE(msg.find("authentication failed"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("wrong-one"), std::string::npos) << msg;
    EXPECT_EQ(msg.find(pw), std::string::npos) << msg;
  }
}

TEST(StoreRedis, ManyClientsRendezvous) {
  SKIP_WITHOUT_REDIS();
  Redis redis;
  const int n = 64;
  std::atomic<int> failures{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < n; ++i)
    ts.emplace_back([&, i] {
      dlpg_store_t *c = nullptr;
      if (A()->store_open(redis.Url().c_str(), 20.0, &c) != DLPG_OK) {
        failures++;
        return;
      }
      std::string key = "addr/" + std::to_string(i), val = "rank" + std::to_string(i);
      int64_t arrived = 0;
      if (A()->store_set(c, key.c_str(), val.data(), val.size()) != DLPG_OK ||
          A()->store_add(c, "arrived", 1, &arrived) != DLPG_OK)
        failures++;
      std::vector<std::string> keys;
      for (int j = 0; j < n; ++j) keys.push_back("addr/" + std::to_string(j));
      std::vector<const char *> ptrs;
      for (auto &k : keys) ptrs.push_back(k.c_str());
      if (A()->store_wait(c, ptrs.data(), ptrs.size(), 20.0) != DLPG_OK) failures++;
      std::string peer = "addr/" + std::to_string((i + 1) % n);
      if (Get(c, peer.c_str()) != "rank" + std::to_string((i + 1) % n)) failures++;
      A()->store_close(c);
    });
  for (auto &t : ts) t.join();
  EXPECT_EQ(failures.load(), 0);
  dlpg_store_t *s = nullptr;
  ASSERT_EQ(A()->store_open(redis.Url().c_str(), 5.0, &s), DLPG_OK);
  EXPECT_EQ(Get(s, "arrived"), std::to_string(n));
  A()->store_close(s);
}

TEST(StoreRedis, ServerGoneIsAnErrorNotAHang) {
  SKIP_WITHOUT_REDIS();
  dlpg_store_t *s = nullptr;
  std::string url;
  {
    Redis redis;
    url = redis.Url();
    ASSERT_EQ(A()->store_open(url.c_str(), 5.0, &s), DLPG_OK);
    ASSERT_EQ(A()->store_set(s, "k", "v", 1), DLPG_OK);
  }
  double t0 = Now();
  EXPECT_NE(A()->store_set(s, "k", "v", 1), DLPG_OK);
  char buf[4];
  size_t len = 0;
  EXPECT_NE(A()->store_get(s, "k", 1.0, buf, sizeof buf, &len), DLPG_OK);
  EXPECT_LT(Now() - t0, Scaled(7.0));
  A()->store_close(s);
  // Nobody listening at open: retried until the deadline, then DLPG_ERR_TIMEOUT naming the
  // address, as for a tcp:// store (the open's deadline is what passed).
  t0 = Now();
  s = nullptr;
  EXPECT_EQ(A()->store_open(url.c_str(), 0.5, &s), DLPG_ERR_TIMEOUT) << A()->last_error();
  EXPECT_EQ(s, nullptr);
  EXPECT_LT(Now() - t0, Scaled(3.0));
  std::string msg = A()->last_error();
  EXPECT_NE(msg.find(url.substr(8)), std::string::npos) << msg;
  EXPECT_NE(msg.find("0.5 s"), std::string::npos) << msg;
}

TEST(StoreRedis, GlooGroupRendezvousesThroughRedis) {
  SKIP_WITHOUT_REDIS();
  Redis redis;
  std::string url = redis.Url("/1");
  EXPECT_EQ(AllreduceThrough(4, [&](int) { return url; }, "redis-group"), 0);
}
