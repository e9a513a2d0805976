// The store's conformance tests, the operations: TCP store round trips, blocking semantics
// and deadlines, env://, file://, host callbacks, and every bad argument. Reaches the plugin
// only through dlopen + dlpg_get_api (api_loader.h). The server's robustness is in
// test_store_server.cc; both build into test_store.
#include "test_store_util.h"
#include "test_store_wire.h"

TEST(Store, RoundTripRandomBinaryValues) {
  Served srv;
  std::mt19937_64 rng(1234);
  const size_t sizes[] = {0, 1, 7, 1000, 65536, (5u << 20) + 3};  // up to several MiB
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i) {
    std::string key = "rt/" + std::to_string(i);
    std::string v = RandomBytes(rng, sizes[i]);
    ASSERT_EQ(A()->store_set(srv.s, key.c_str(), v.data(), v.size()), DLPG_OK) << A()->last_error();
    EXPECT_EQ(Get(srv.s, key.c_str()), v) << "size " << sizes[i];
  }
  // A short buffer receives the prefix and the full length.
  std::string v = RandomBytes(rng, 100);
  ASSERT_EQ(A()->store_set(srv.s, "short", v.data(), v.size()), DLPG_OK);
  char buf[10];
  size_t len = 0;
  ASSERT_EQ(A()->store_get(srv.s, "short", 1, buf, sizeof buf, &len), DLPG_OK);
  EXPECT_EQ(len, 100u);
  EXPECT_EQ(std::string(buf, 10), v.substr(0, 10));
  // Overwrite.
  ASSERT_EQ(A()->store_set(srv.s, "short", "xy", 2), DLPG_OK);
  EXPECT_EQ(Get(srv.s, "short"), "xy");
  // A second client of the same server sees the same data.
  dlpg_store_t *c = nullptr;
  ASSERT_EQ(A()->store_open(srv.Url().c_str(), 5, &c), DLPG_OK) << A()->last_error();
  EXPECT_EQ(Get(c, "short"), "xy");
  A()->store_close(c);
}

TEST(Store, AddCheckDeleteWait) {
  Served srv;
  std::mt19937_64 rng(7);
  int64_t expect = 0, r = 0;
  for (int i = 0; i < 20; ++i) {
    int64_t d = static_cast<int64_t>(rng() % 2001) - 1000;
    expect += d;
    ASSERT_EQ(A()->store_add(srv.s, "ctr", d, &r), DLPG_OK) << A()->last_error();
    EXPECT_EQ(r, expect);
  }
  EXPECT_EQ(Get(srv.s, "ctr"), std::to_string(expect));  // decimal text
  ASSERT_EQ(A()->store_add(srv.s, "ctr2", 5, nullptr), DLPG_OK);
  // Adding to a non-integer value fails with a message, the server stays fine.
  ASSERT_EQ(A()->store_set(srv.s, "text", "abc", 3), DLPG_OK);
  EXPECT_EQ(A()->store_add(srv.s, "text", 1, &r), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(A()->last_error()).find("text"), std::string::npos) << A()->last_error();

  const char *keys[] = {"ctr", "ctr2", "nope"};
  int all = -1;
  ASSERT_EQ(A()->store_check(srv.s, keys, 2, &all), DLPG_OK);
  EXPECT_EQ(all, 1);
  ASSERT_EQ(A()->store_check(srv.s, keys, 3, &all), DLPG_OK);
  EXPECT_EQ(all, 0);
  ASSERT_EQ(A()->store_check(srv.s, keys, 0, &all), DLPG_OK);
  EXPECT_EQ(all, 1);
  ASSERT_EQ(A()->store_wait(srv.s, keys, 2, 1.0), DLPG_OK);
  ASSERT_EQ(A()->store_wait(srv.s, keys, 0, 1.0), DLPG_OK);

  int deleted = -1;
  ASSERT_EQ(A()->store_delete_key(srv.s, "ctr2", &deleted), DLPG_OK);
  EXPECT_EQ(deleted, 1);
  ASSERT_EQ(A()->store_delete_key(srv.s, "ctr2", &deleted), DLPG_OK);
  EXPECT_EQ(deleted, 0);
  ASSERT_EQ(A()->store_delete_key(srv.s, "ctr2", nullptr), DLPG_OK);
  ASSERT_EQ(A()->store_check(srv.s, keys, 2, &all), DLPG_OK);
  EXPECT_EQ(all, 0);

  // wait and get return as soon as another client sets the keys.
  dlpg_store_t *c = nullptr;
  ASSERT_EQ(A()->store_open(srv.Url().c_str(), 5, &c), DLPG_OK);
  std::string late = RandomBytes(rng, 333);
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    EXPECT_EQ(A()->store_set(c, "late/a", late.data(), late.size()), DLPG_OK);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(A()->store_set(c, "late/b", "b", 1), DLPG_OK);
  });
  const char *lk[] = {"late/a", "late/b"};
  double t0 = Now();
  EXPECT_EQ(A()->store_wait(srv.s, lk, 2, 5.0), DLPG_OK) << A()->last_error();
  EXPECT_LT(Now() - t0, Scaled(3.0));
  EXPECT_EQ(Get(srv.s, "late/a"), late);
  setter.join();
  A()->store_close(c);
}

TEST(Store, MissingKeyTimesOutNamingTheKey) {
  Served srv(0.5);  // the store's default deadline applies when timeout_s <= 0
  size_t len = 0;
  double t0 = Now();
  EXPECT_EQ(A()->store_get(srv.s, "missing/key", 0.3, nullptr, 0, &len), DLPG_ERR_TIMEOUT);
  double dt = Now() - t0;
  EXPECT_GE(dt, 0.25);
  EXPECT_LT(dt, 2.0);
  EXPECT_NE(std::string(A()->last_error()).find("missing/key"), std::string::npos)
      << A()->last_error();
  EXPECT_NE(std::string(A()->last_error()).find("dlpg_store_get"), std::string::npos);

  ASSERT_EQ(A()->store_set(srv.s, "present", "1", 1), DLPG_OK);
  const char *keys[] = {"present", "absent/one", "absent/two"};
  t0 = Now();
  EXPECT_EQ(A()->store_wait(srv.s, keys, 3, -1.0), DLPG_ERR_TIMEOUT);  // default: 0.5 s
  dt = Now() - t0;
  EXPECT_GE(dt, 0.45);
  EXPECT_LT(dt, 2.5);
  std::string msg = A()->last_error();
  EXPECT_NE(msg.find("absent/one"), std::string::npos) << msg;
  EXPECT_NE(msg.find("absent/two"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("'present'"), std::string::npos) << msg;
  // The connection still works after a timeout.
  EXPECT_EQ(Get(srv.s, "present"), "1");
}

// env:// in forked children, so setenv does not leak into the other tests.
TEST(Store, EnvUrl) {
  int port = 0;
  {
    Served probe;  // find a free port, then release it
    port = probe.port;
  }
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 0;
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(port - 1).c_str(), 1);
    unsetenv("DLPG_STORE_PORT");
    unsetenv("RANK");
    dlpg_store_t *s0 = nullptr, *s1 = nullptr;
    if (A()->store_open("env://", 5, &s0) != DLPG_OK) code = 10;  // RANK unset: serves
    int p = 0;
    if (!code && (A()->store_port(s0, &p) != DLPG_OK || p != port)) code = 11;
    if (!code && A()->store_set(s0, "env/k", "hello", 5) != DLPG_OK) code = 12;
    setenv("RANK", "1", 1);
    if (!code && A()->store_open("env://", 5, &s1) != DLPG_OK) code = 13;  // client only
    char buf[8];
    size_t len = 0;
    if (!code && (A()->store_get(s1, "env/k", 5, buf, sizeof buf, &len) != DLPG_OK || len != 5 ||
                  memcmp(buf, "hello", 5) != 0))
      code = 14;
    A()->store_close(s1);
    A()->store_close(s0);
    // DLPG_STORE_PORT wins over MASTER_PORT + 1.
    setenv("DLPG_STORE_PORT", std::to_string(port).c_str(), 1);
    setenv("MASTER_PORT", "1", 1);
    setenv("RANK", "0", 1);
    if (!code && A()->store_open("env://", 5, &s0) != DLPG_OK) code = 15;
    if (!code && (A()->store_port(s0, &p) != DLPG_OK || p != port)) code = 16;
    A()->store_close(s0);
    // Missing or malformed variables are INVALID_ARGUMENT naming the variable.
    setenv("RANK", "abc", 1);
    if (!code && (A()->store_open("env://", 1, &s0) != DLPG_ERR_INVALID_ARGUMENT ||
                  !strstr(A()->last_error(), "RANK")))
      code = 17;
    unsetenv("RANK");  // one problem at a time: now only MASTER_ADDR is missing
    unsetenv("MASTER_ADDR");
    if (!code && (A()->store_open("env://", 1, &s0) != DLPG_ERR_INVALID_ARGUMENT ||
                  !strstr(A()->last_error(), "MASTER_ADDR")))
      code = 18;
    if (code) fprintf(stderr, "env:// child failed with %d: %s\n", code, A()->last_error());
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// A host store in C++: a map under a mutex, with a condition variable for blocking gets.
namespace {
struct HostStore {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::string> kv;
  std::atomic<int> released{0};
  std::atomic<int> calls{0};
  std::atomic<int> inside{0};  // callbacks running now (the ABI promises at most one)
  std::atomic<int> max_inside{0};
  std::atomic<int> expired{0};  // gets and waits that ended with the host's timeout

  struct Enter {
    HostStore *h;
    explicit Enter(HostStore *hs) : h(hs) {
      int now = ++h->inside;
      int m = h->max_inside.load();
      while (now > m && !h->max_inside.compare_exchange_weak(m, now)) {
      }
      h->calls++;
    }
    ~Enter() { h->inside--; }
  };

  static HostStore *H(void *ctx) { return static_cast<HostStore *>(ctx); }
  static dlpg_status_t Set(void *ctx, const char *key, const void *v, size_t len) {
    Enter e(H(ctx));
    std::lock_guard<std::mutex> g(H(ctx)->mu);
    H(ctx)->kv[key] = std::string(static_cast<const char *>(v), len);
    H(ctx)->cv.notify_all();
    return DLPG_OK;
  }
  static dlpg_status_t Get(void *ctx, const char *key, double timeout, void *buf, size_t cap,
                           size_t *len) {
    Enter e(H(ctx));
    std::unique_lock<std::mutex> g(H(ctx)->mu);
    auto &kv = H(ctx)->kv;
    if (!H(ctx)->cv.wait_for(g, std::chrono::duration<double>(timeout),
                             [&] { return kv.count(key) > 0; })) {
      H(ctx)->expired++;
      return DLPG_ERR_TIMEOUT;
    }
    const std::string &v = kv[key];
    if (buf) memcpy(buf, v.data(), std::min(cap, v.size()));
    *len = v.size();
    return DLPG_OK;
  }
  static dlpg_status_t Wait(void *ctx, const char *const *keys, size_t n, double timeout) {
    Enter e(H(ctx));
    std::unique_lock<std::mutex> g(H(ctx)->mu);
    auto &kv = H(ctx)->kv;
    auto all = [&] {
      for (size_t i = 0; i < n; ++i)
        if (!kv.count(keys[i])) return false;
      return true;
    };
    if (!H(ctx)->cv.wait_for(g, std::chrono::duration<double>(timeout), all)) {
      H(ctx)->expired++;
      return DLPG_ERR_TIMEOUT;
    }
    return DLPG_OK;
  }
  static dlpg_status_t Add(void *ctx, const char *key, int64_t d, int64_t *r) {
    Enter e(H(ctx));
    std::lock_guard<std::mutex> g(H(ctx)->mu);
    auto &kv = H(ctx)->kv;
    int64_t cur = kv.count(key) ? std::stoll(kv[key]) : 0;
    *r = cur + d;
    kv[key] = std::to_string(*r);
    H(ctx)->cv.notify_all();
    return DLPG_OK;
  }
  static dlpg_status_t Check(void *ctx, const char *const *keys, size_t n, int *all) {
    Enter e(H(ctx));
    std::lock_guard<std::mutex> g(H(ctx)->mu);
    *all = 1;
    for (size_t i = 0; i < n; ++i)
      if (!H(ctx)->kv.count(keys[i])) *all = 0;
    return DLPG_OK;
  }
  static dlpg_status_t Delete(void *ctx, const char *key, int *deleted) {
    Enter e(H(ctx));
    std::lock_guard<std::mutex> g(H(ctx)->mu);
    *deleted = H(ctx)->kv.erase(key) ? 1 : 0;
    return DLPG_OK;
  }
  static void Release(void *ctx) { H(ctx)->released++; }
};
}  // namespace

// A host's wait that expires shows in the host's log (torch 2's TCPStore warns "[c10d]
// waitForInput: socket ... timed out after 41ms" for each) and can desynchronise torch 1.13's
// client. With a check callback, dlpg's blocking reads and a 4-rank group's rendezvous and
// allreduce never let one expire; the caller still gets its key as soon as it is set (within
// a generous bound) and its own DLPG_ERR_TIMEOUT at its deadline.
TEST(Store, FromOpsNeverLetsTheHostsWaitExpire) {
  HostStore h;
  dlpg_store_ops_t ops{};
  ops.struct_size = sizeof ops;
  ops.set = HostStore::Set;
  ops.get = HostStore::Get;
  ops.add = HostStore::Add;
  ops.wait = HostStore::Wait;
  ops.check = HostStore::Check;
  ops.delete_key = HostStore::Delete;
  ops.release = HostStore::Release;
  auto open = [&](int r) {
    dlpg_store_t *s = nullptr;
    // Rank 3 arrives late, so the others block in the rendezvous meanwhile.
    if (r == 3) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    return A()->store_from_ops(&ops, &h, 30.0, &s) == DLPG_OK ? s : nullptr;
  };
  EXPECT_EQ(AllreduceOn(4, open, "host-group"), 0);
  dlpg_store_t *s = open(0);
  ASSERT_NE(s, nullptr) << A()->last_error();
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(A()->store_set(s, "late/a", "a", 1), DLPG_OK);
    EXPECT_EQ(A()->store_set(s, "late/b", "b", 1), DLPG_OK);
  });
  double t0 = Now();
  EXPECT_EQ(Get(s, "late/a", 10.0), "a");
  const char *both[] = {"late/a", "late/b"};
  EXPECT_EQ(A()->store_wait(s, both, 2, 10.0), DLPG_OK) << A()->last_error();
  EXPECT_LT(Now() - t0, Scaled(5.0));
  setter.join();
  const char *missing[] = {"late/a", "never"};
  t0 = Now();
  EXPECT_EQ(A()->store_wait(s, missing, 2, 0.3), DLPG_ERR_TIMEOUT);
  EXPECT_NE(std::string(A()->last_error()).find("'never'"), std::string::npos)
      << A()->last_error();
  size_t len = 0;
  EXPECT_EQ(A()->store_get(s, "never", 0.3, nullptr, 0, &len), DLPG_ERR_TIMEOUT);
  EXPECT_LT(Now() - t0, Scaled(3.0));
  EXPECT_EQ(h.expired.load(), 0) << "the host's own wait or get timed out";
  A()->store_close(s);
}

TEST(Store, FromOpsFullTable) {
  HostStore h;
  dlpg_store_ops_t ops{};
  ops.struct_size = sizeof ops;
  ops.set = HostStore::Set;
  ops.get = HostStore::Get;
  ops.add = HostStore::Add;
  ops.wait = nullptr;  // dlpg falls back to get per key
  ops.release = HostStore::Release;
  ops.check = HostStore::Check;
  ops.delete_key = HostStore::Delete;
  dlpg_store_t *s = nullptr;
  ASSERT_EQ(A()->store_from_ops(&ops, &h, 2.0, &s), DLPG_OK) << A()->last_error();
  ops.set = nullptr;  // the table was copied
  std::mt19937_64 rng(5);
  std::string v = RandomBytes(rng, 3000);
  ASSERT_EQ(A()->store_set(s, "ops/k", v.data(), v.size()), DLPG_OK);
  EXPECT_EQ(Get(s, "ops/k"), v);
  int64_t r = 0;
  ASSERT_EQ(A()->store_add(s, "ops/c", 41, &r), DLPG_OK);
  ASSERT_EQ(A()->store_add(s, "ops/c", 1, &r), DLPG_OK);
  EXPECT_EQ(r, 42);
  int all = 0;
  const char *keys[] = {"ops/k", "ops/c", "ops/missing"};
  ASSERT_EQ(A()->store_check(s, keys, 2, &all), DLPG_OK);
  EXPECT_EQ(all, 1);
  ASSERT_EQ(A()->store_wait(s, keys, 2, 1.0), DLPG_OK);
  double t0 = Now();
  EXPECT_EQ(A()->store_wait(s, keys, 3, 0.3), DLPG_ERR_TIMEOUT);
  EXPECT_LT(Now() - t0, Scaled(3.0));
  EXPECT_NE(std::string(A()->last_error()).find("ops/missing"), std::string::npos)
      << A()->last_error();
  // Another thread sets the key a blocked get waits for, through the same handle.
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ(A()->store_set(s, "ops/late", "z", 1), DLPG_OK);
  });
  EXPECT_EQ(Get(s, "ops/late", 5.0), "z");
  setter.join();
  int deleted = 0;
  ASSERT_EQ(A()->store_delete_key(s, "ops/k", &deleted), DLPG_OK);
  EXPECT_EQ(deleted, 1);
  int port = 0;
  EXPECT_EQ(A()->store_port(s, &port), DLPG_ERR_UNSUPPORTED);
  EXPECT_EQ(h.max_inside.load(), 1);  // one callback at a time
  EXPECT_EQ(h.released.load(), 0);
  A()->store_close(s);
  EXPECT_EQ(h.released.load(), 1);
}

TEST(Store, FromOpsShortTable) {
  HostStore h;
  // An older host whose table ends after add: wait, release, check and delete are absent,
  // and the bytes after the table must not be read (they are garbage here).
  struct {
    dlpg_store_ops_t ops;
  } mem;
  memset(&mem, 0xab, sizeof mem);
  mem.ops.struct_size = offsetof(dlpg_store_ops_t, wait);
  mem.ops.set = HostStore::Set;
  mem.ops.get = HostStore::Get;
  mem.ops.add = HostStore::Add;
  dlpg_store_t *s = nullptr;
  ASSERT_EQ(A()->store_from_ops(&mem.ops, &h, 1.0, &s), DLPG_OK) << A()->last_error();
  ASSERT_EQ(A()->store_set(s, "a", "1", 1), DLPG_OK);
  const char *keys[] = {"a"};
  EXPECT_EQ(A()->store_wait(s, keys, 1, 1.0), DLPG_OK);
  int all = 0, deleted = 0;
  EXPECT_EQ(A()->store_check(s, keys, 1, &all), DLPG_ERR_UNSUPPORTED);
  EXPECT_EQ(A()->store_delete_key(s, "a", &deleted), DLPG_ERR_UNSUPPORTED);
  A()->store_close(s);
  EXPECT_EQ(h.released.load(), 0);

  dlpg_store_ops_t ops{};
  ops.set = HostStore::Set;
  ops.get = HostStore::Get;
  ops.add = HostStore::Add;
  ops.struct_size = 0;
  EXPECT_EQ(A()->store_from_ops(&ops, &h, 1, &s), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(A()->last_error()).find("struct_size"), std::string::npos);
  ops.struct_size = offsetof(dlpg_store_ops_t, add);  // add cut off
  EXPECT_EQ(A()->store_from_ops(&ops, &h, 1, &s), DLPG_ERR_INVALID_ARGUMENT);
  ops.struct_size = sizeof ops;
  ops.get = nullptr;
  EXPECT_EQ(A()->store_from_ops(&ops, &h, 1, &s), DLPG_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(A()->last_error()).find("get"), std::string::npos);
  EXPECT_EQ(A()->store_from_ops(nullptr, &h, 1, &s), DLPG_ERR_INVALID_ARGUMENT);
  ops.get = HostStore::Get;
  EXPECT_EQ(A()->store_from_ops(&ops, &h, 1, nullptr), DLPG_ERR_INVALID_ARGUMENT);
}

TEST(Store, FileUrl) {
  char dir[] = "/tmp/dlpg-store-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string url = std::string("file://") + dir;
  dlpg_store_t *s = nullptr;
  // dlpg.h promises file:// (no skip: a plugin without it fails here).
  dlpg_status_t st = A()->store_open(url.c_str(), 2, &s);
  if (st != DLPG_OK) rmdir(dir);
  ASSERT_EQ(st, DLPG_OK) << A()->last_error();
  std::mt19937_64 rng(11);
  std::string v = RandomBytes(rng, 5000);
  ASSERT_EQ(A()->store_set(s, "file/k", v.data(), v.size()), DLPG_OK) << A()->last_error();
  dlpg_store_t *s2 = nullptr;
  ASSERT_EQ(A()->store_open(url.c_str(), 2, &s2), DLPG_OK);
  EXPECT_EQ(Get(s2, "file/k"), v);
  size_t len = 0;
  EXPECT_EQ(A()->store_get(s2, "file/missing", 0.2, nullptr, 0, &len), DLPG_ERR_TIMEOUT);
  A()->store_close(s2);
  A()->store_close(s);
  std::string cmd = std::string("rm -rf ") + dir;
  EXPECT_EQ(system(cmd.c_str()), 0);
}

TEST(Store, BadArguments) {
  Served srv;
  dlpg_store_t *s = srv.s, *out = nullptr;
  const dlpg_status_t BAD = DLPG_ERR_INVALID_ARGUMENT;
  auto names = [](const char *fn) {
    return std::string(A()->last_error()).find(fn) != std::string::npos;
  };
  std::string long_key(DLPG_STORE_MAX_KEY_LEN + 1, 'k');
  std::string max_key(DLPG_STORE_MAX_KEY_LEN, 'm');
  size_t len = 0;
  int flag = 0;
  char buf[4];

  // open
  EXPECT_EQ(A()->store_open(nullptr, 1, &out), BAD);
  EXPECT_TRUE(names("dlpg_store_open"));
  EXPECT_EQ(A()->store_open("tcp://127.0.0.1:1", 1, nullptr), BAD);
  const char *bad_urls[] = {"", "http://x:1", "tcp://", "tcp://127.0.0.1", "tcp://:5",
                            "tcp://127.0.0.1:", "tcp://127.0.0.1:70000", "tcp://127.0.0.1:12ab",
                            "tcp://127.0.0.1:5?serve=2", "tcp://127.0.0.1:5?x=1",
                            "tcp://127.0.0.1:0", "tcp://[::1:5", "file://", "file://host/p",
                            "env://extra"};
  for (const char *u : bad_urls) {
    EXPECT_EQ(A()->store_open(u, 1, &out), BAD) << u;
    EXPECT_TRUE(names("dlpg_store_open")) << A()->last_error();
    EXPECT_TRUE(names(u)) << u << ": " << A()->last_error();
  }
  // set
  EXPECT_EQ(A()->store_set(nullptr, "k", "v", 1), BAD);
  EXPECT_TRUE(names("dlpg_store_set"));
  EXPECT_EQ(A()->store_set(s, nullptr, "v", 1), BAD);
  EXPECT_EQ(A()->store_set(s, "", "v", 1), BAD);
  EXPECT_EQ(A()->store_set(s, long_key.c_str(), "v", 1), BAD);
  EXPECT_TRUE(names("DLPG_STORE_MAX_KEY_LEN"));
  EXPECT_EQ(A()->store_set(s, "k", nullptr, 1), BAD);
  EXPECT_EQ(A()->store_set(s, "k", "v", size_t(DLPG_STORE_MAX_VALUE_LEN) + 1), BAD);
  EXPECT_TRUE(names("DLPG_STORE_MAX_VALUE_LEN"));
  EXPECT_EQ(A()->store_set(s, "k", nullptr, 0), DLPG_OK);  // empty value
  EXPECT_EQ(A()->store_set(s, max_key.c_str(), "v", 1), DLPG_OK) << A()->last_error();
  EXPECT_EQ(Get(s, max_key.c_str()), "v");
  // get
  EXPECT_EQ(A()->store_get(nullptr, "k", 1, buf, 4, &len), BAD);
  EXPECT_TRUE(names("dlpg_store_get"));
  EXPECT_EQ(A()->store_get(s, nullptr, 1, buf, 4, &len), BAD);
  EXPECT_EQ(A()->store_get(s, "", 1, buf, 4, &len), BAD);
  EXPECT_EQ(A()->store_get(s, long_key.c_str(), 1, buf, 4, &len), BAD);
  EXPECT_EQ(A()->store_get(s, "k", 1, nullptr, 4, &len), BAD);
  EXPECT_TRUE(names("capacity"));
  EXPECT_EQ(A()->store_get(s, "k", 1, buf, 4, nullptr), BAD);
  EXPECT_EQ(A()->store_get(s, "k", std::nan(""), buf, 4, &len), BAD);
  // add
  EXPECT_EQ(A()->store_add(nullptr, "k", 1, nullptr), BAD);
  EXPECT_TRUE(names("dlpg_store_add"));
  EXPECT_EQ(A()->store_add(s, nullptr, 1, nullptr), BAD);
  EXPECT_EQ(A()->store_add(s, long_key.c_str(), 1, nullptr), BAD);
  // wait / check
  const char *keys[] = {"k", nullptr};
  const char *keys_empty[] = {""};
  EXPECT_EQ(A()->store_wait(nullptr, keys, 1, 1), BAD);
  EXPECT_TRUE(names("dlpg_store_wait"));
  EXPECT_EQ(A()->store_wait(s, nullptr, 1, 1), BAD);
  EXPECT_EQ(A()->store_wait(s, keys, 2, 1), BAD);
  EXPECT_TRUE(names("keys[1]"));
  EXPECT_EQ(A()->store_wait(s, keys_empty, 1, 1), BAD);
  EXPECT_EQ(A()->store_wait(s, nullptr, 0, 1), DLPG_OK);
  EXPECT_EQ(A()->store_check(nullptr, keys, 1, &flag), BAD);
  EXPECT_TRUE(names("dlpg_store_check"));
  EXPECT_EQ(A()->store_check(s, nullptr, 1, &flag), BAD);
  EXPECT_EQ(A()->store_check(s, keys, 2, &flag), BAD);
  EXPECT_EQ(A()->store_check(s, keys, 1, nullptr), BAD);
  EXPECT_EQ(A()->store_check(s, nullptr, 0, &flag), DLPG_OK);
  EXPECT_EQ(flag, 1);
  // delete
  EXPECT_EQ(A()->store_delete_key(nullptr, "k", &flag), BAD);
  EXPECT_TRUE(names("dlpg_store_delete_key"));
  EXPECT_EQ(A()->store_delete_key(s, nullptr, &flag), BAD);
  EXPECT_EQ(A()->store_delete_key(s, "", &flag), BAD);
  // port / close
  int port = 0;
  EXPECT_EQ(A()->store_port(nullptr, &port), BAD);
  EXPECT_TRUE(names("dlpg_store_port"));
  EXPECT_EQ(A()->store_port(s, nullptr), BAD);
  EXPECT_EQ(A()->store_close(nullptr), DLPG_OK);
  // The store still works after all of that.
  EXPECT_EQ(A()->store_set(s, "after", "ok", 2), DLPG_OK);
  EXPECT_EQ(Get(s, "after"), "ok");
}
