// White-box tests of the Gloo island (plugin/gloo), below the public API, the context's
// lifecycle and failures: rendezvous timeout, abort, a peer leaving, peers disagreeing on
// the operation, and the file store. Links the plugin's objects (dlpg_obj), not
// libdlpg.so. The operations are in gloo_island_ops_test.cc; both build into
// gloo_island_test.
#include "gloo_island_util.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gloo/peers.h"

TEST(GlooIsland, RendezvousTimeoutNamesTheWait) {
  dlpg_store_t *server = nullptr;
  ASSERT_EQ(dlpg_store_open("tcp://127.0.0.1:0?serve=1", 5, &server), DLPG_OK) << dlpg_last_error();
  dlpg__gloo_group_t *gg = nullptr;
  dlpg__gloo_ctx_t *ctx = nullptr;
  auto t0 = Clock::now();
  dlpg_status_t st = gloo_mesh(server, "lonely", 0, 2, 1.0, &gg, &ctx);
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(st, DLPG_ERR_TIMEOUT) << dlpg_last_error();
  EXPECT_EQ(ctx, nullptr);
  EXPECT_LT(secs, Scaled(5.0));
  EXPECT_NE(std::string(dlpg_last_error()).find("timed out"), std::string::npos) << dlpg_last_error();
  // The missing rank is named, not a store key.
  EXPECT_NE(std::string(dlpg_last_error()).find("rank 1 of 2 had not started it"),
            std::string::npos)
      << dlpg_last_error();
  printf("message: %s\n", dlpg_last_error());
  // The failure is repeated, not retried.
  std::string first = dlpg_last_error();
  EXPECT_EQ(dlpg__gloo_group_mesh(gg, &ctx), DLPG_ERR_TIMEOUT);
  EXPECT_EQ(std::string(dlpg_last_error()), first);
  dlpg__gloo_group_destroy(gg);
  dlpg_store_close(server);
}

TEST(GlooIsland, AbortWakesABlockedCollective) {
  std::atomic<bool> rank0_done{false};
  run_ranks(2, 20, [&](int r, dlpg__gloo_ctx_t *ctx) {
    if (r == 1) {
      // Rank 1 never joins; it waits until rank 0 is done (not a fixed time, which a busy
      // machine can outlast), then leaves.
      for (auto end = Clock::now() + std::chrono::duration<double>(Scaled(60));
           !rank0_done && Clock::now() < end;)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    std::vector<float> v(1 << 16, 1.0f);
    dlpg__op_t op = make_op(DLPG__OP_ALLREDUCE, tensor(v.data(), v.size(), DLPG__DT_FLOAT32),
                            tensor(v.data(), v.size(), DLPG__DT_FLOAT32));
    op.rop = DLPG_SUM;
    std::thread aborter([ctx] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      dlpg__gloo_ctx_abort(ctx);
    });
    auto t0 = Clock::now();
    dlpg_status_t st = run1(ctx, &op);
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    aborter.join();
    EXPECT_EQ(st, DLPG_ERR_ABORTED) << dlpg_last_error();
    EXPECT_LT(secs, Scaled(3.0)) << "abort did not wake the blocked allreduce";
    printf("abort after %.2f s: %s\n", secs, dlpg_last_error());
    EXPECT_EQ(run1(ctx, &op), DLPG_ERR_ABORTED);
    rank0_done = true;
  });
}

TEST(GlooIsland, PeerLeavingIsRemoteOrTimeout) {
  run_ranks(2, 3, [&](int r, dlpg__gloo_ctx_t *ctx) {
    if (r == 1) {
      dlpg__gloo_ctx_abort(ctx);  // closes rank 1's connections
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    float v = 1;
    dlpg__op_t op = make_op(DLPG__OP_ALLREDUCE, tensor(&v, 1, DLPG__DT_FLOAT32), tensor(&v, 1, DLPG__DT_FLOAT32));
    op.rop = DLPG_SUM;
    auto t0 = Clock::now();
    dlpg_status_t st = run1(ctx, &op);
    double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_TRUE(st == DLPG_ERR_REMOTE || st == DLPG_ERR_TIMEOUT) << dlpg_status_name(st) << ": " << dlpg_last_error();
    EXPECT_LT(secs, Scaled(6.0));
    printf("peer left: %s after %.2f s: %s\n", dlpg_status_name(st), secs, dlpg_last_error());
  });
}

TEST(GlooIsland, FileStoreAndContextOverIt) {
  char dir[] = "/tmp/dlpg-gloo-fs-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string path = std::string(dir) + "/sub/store";
  dlpg_store_t *s = nullptr;
  ASSERT_EQ(dlpg_store_open(("file://" + path).c_str(), 2.0, &s), DLPG_OK) << dlpg_last_error();
  const char *key = "a/b/c";
  ASSERT_EQ(dlpg_store_set(s, key, "hello", 5), DLPG_OK) << dlpg_last_error();
  ASSERT_EQ(dlpg_store_set(s, key, "world!", 6), DLPG_OK) << dlpg_last_error();  // overwrite
  char buf[16] = {0};
  size_t len = 0;
  ASSERT_EQ(dlpg_store_get(s, key, 1.0, buf, sizeof buf, &len), DLPG_OK) << dlpg_last_error();
  EXPECT_EQ(std::string(buf, len), "world!");
  ASSERT_EQ(dlpg_store_set(s, "empty", "", 0), DLPG_OK);
  ASSERT_EQ(dlpg_store_get(s, "empty", 1.0, buf, sizeof buf, &len), DLPG_OK) << dlpg_last_error();
  EXPECT_EQ(len, 0u);
  // add from 4 threads x 50 is atomic.
  std::vector<std::thread> th;
  for (int t = 0; t < 4; t++)
    th.emplace_back([&] {
      for (int i = 0; i < 50; i++) ASSERT_EQ(dlpg_store_add(s, "cnt/x", 2, nullptr), DLPG_OK) << dlpg_last_error();
    });
  for (auto &t : th) t.join();
  int64_t v = 0;
  ASSERT_EQ(dlpg_store_add(s, "cnt/x", 0, &v), DLPG_OK);
  EXPECT_EQ(v, 400);
  const char *keys[2] = {key, "missing/key"};
  int all = -1;
  ASSERT_EQ(dlpg_store_check(s, keys, 1, &all), DLPG_OK);
  EXPECT_EQ(all, 1);
  ASSERT_EQ(dlpg_store_check(s, keys, 2, &all), DLPG_OK);
  EXPECT_EQ(all, 0);
  auto t0 = Clock::now();
  EXPECT_EQ(dlpg_store_wait(s, keys, 2, 0.3), DLPG_ERR_TIMEOUT);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), Scaled(3.0));
  EXPECT_NE(std::string(dlpg_last_error()).find("missing/key"), std::string::npos) << dlpg_last_error();
  int deleted = -1;
  ASSERT_EQ(dlpg_store_delete_key(s, key, &deleted), DLPG_OK);
  EXPECT_EQ(deleted, 1);
  ASSERT_EQ(dlpg_store_delete_key(s, key, &deleted), DLPG_OK);
  EXPECT_EQ(deleted, 0);

  // Two ranks rendezvous through the file store and allreduce.
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; r++)
    ranks.emplace_back([&, r] {
      dlpg_store_t *rs = nullptr;
      ASSERT_EQ(dlpg_store_open(("file://" + path).c_str(), 10.0, &rs), DLPG_OK) << dlpg_last_error();
      dlpg__gloo_group_t *gg = nullptr;
      dlpg__gloo_ctx_t *ctx = nullptr;
      ASSERT_EQ(gloo_mesh(rs, "fs", r, 2, 10.0, &gg, &ctx), DLPG_OK) << dlpg_last_error();
      double x[3] = {1.0 + r, 2.0 * r, -3.0};
      dlpg__op_t op = make_op(DLPG__OP_ALLREDUCE, tensor(x, 3, DLPG__DT_FLOAT64), tensor(x, 3, DLPG__DT_FLOAT64));
      op.rop = DLPG_SUM;
      ASSERT_EQ(run1(ctx, &op), DLPG_OK) << dlpg_last_error();
      EXPECT_EQ(x[0], 3.0);
      EXPECT_EQ(x[1], 2.0);
      EXPECT_EQ(x[2], -6.0);
      dlpg__gloo_group_destroy(gg);
      dlpg_store_close(rs);
    });
  for (auto &t : ranks) t.join();
  dlpg_store_close(s);
  std::string cmd = std::string("rm -rf ") + dir;
  ASSERT_EQ(system(cmd.c_str()), 0);
}

TEST(GlooIsland, PeerMismatchIsInvalidArgumentEverywhere) {
  // Rank 2 of 3 disagrees; every rank reports the same message naming rank 0 and rank 2,
  // and the context keeps working. Covers the small path, the large path, and sizes that
  // straddle the small-message threshold (one rank small, another large).
  const int n = 3;
  run_ranks(n, 20, [&](int r, dlpg__gloo_ctx_t *ctx) {
    const dlpg__dtype_t dt = DLPG__DT_FLOAT32;
    for (size_t base : {size_t(10), size_t(1024), size_t(5000)}) {
      const size_t m = r == 2 ? base + 1 : base;
      std::vector<float> a(m, 1.0f + r), b(m * n);
      dlpg__op_t op = make_op(DLPG__OP_ALLREDUCE, tensor(a.data(), m, dt), tensor(a.data(), m, dt));
      op.rop = DLPG_SUM;
      ASSERT_EQ(run1(ctx, &op), DLPG_ERR_INVALID_ARGUMENT) << "m=" << m;
      std::string want = "dlpg_allreduce: rank 0 has " + std::to_string(base) +
                         " elements of float32 but rank 2 has " + std::to_string(base + 1) +
                         " elements of float32";
      EXPECT_EQ(std::string(dlpg_last_error()), want);
      op = make_op(DLPG__OP_ALLGATHER, tensor(a.data(), m, dt), tensor(b.data(), m * n, dt));
      ASSERT_EQ(run1(ctx, &op), DLPG_ERR_INVALID_ARGUMENT) << "m=" << m;
      EXPECT_NE(std::string(dlpg_last_error()).find("rank 2 has an input of"), std::string::npos)
          << dlpg_last_error();
      // Matching: the context still works, on both paths.
      for (size_t k : {size_t(3), size_t(3000)}) {
        std::vector<float> c(k, 1.0f + r);
        op = make_op(DLPG__OP_ALLREDUCE, tensor(c.data(), k, dt), tensor(c.data(), k, dt));
        op.rop = DLPG_SUM;
        ASSERT_EQ(run1(ctx, &op), DLPG_OK) << dlpg_last_error();
        for (size_t i = 0; i < k; i++) ASSERT_EQ(c[i], 6.0f);
      }
    }
    // A different operation kind on rank 1.
    std::vector<float> a(8, 1.0f);
    dlpg__op_t op = make_op(r == 1 ? DLPG__OP_BROADCAST : DLPG__OP_ALLREDUCE,
                            tensor(a.data(), 8, dt), tensor(a.data(), 8, dt));
    ASSERT_EQ(run1(ctx, &op), DLPG_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(dlpg_last_error()).find("rank 0 called dlpg_allreduce but rank 1 called dlpg_broadcast"),
              std::string::npos) << dlpg_last_error();
  });
}

// A pair whose peer process ended while Gloo still holds the socket open (Gloo closes it
// from its own loop thread, after the waiter may already be reporting the failure): the
// connection counts as lost from the moment the peer's end is closed, so the failure names
// the rank instead of "a peer".
TEST(GlooIsland, PeerClosedSocketCountsAsLostBeforeGlooClosesIt) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr *>(&a), sizeof a), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr *>(&a), &len), 0);
  int far = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(far, reinterpret_cast<sockaddr *>(&a), sizeof a), 0);
  int near = accept(listener, nullptr, nullptr);
  ASSERT_GE(near, 0);
  dlpg_gloo::PeerSocket p;
  p.rank = 2;
  p.fd = near;
  socklen_t sl = sizeof p.self, pl = sizeof p.peer;
  ASSERT_EQ(getsockname(near, reinterpret_cast<sockaddr *>(&p.self), &sl), 0);
  ASSERT_EQ(getpeername(near, reinterpret_cast<sockaddr *>(&p.peer), &pl), 0);
  std::vector<dlpg_gloo::PeerSocket> socks{p};
  EXPECT_EQ(dlpg_gloo::first_lost_peer(socks), -1);
  close(far);
  // The peer's FIN reaches the socket at once on loopback; allow a busy machine a moment.
  int lost = -1;
  for (auto end = Clock::now() + std::chrono::duration<double>(Scaled(5)); lost < 0 && Clock::now() < end;
       std::this_thread::sleep_for(std::chrono::milliseconds(2)))
    lost = dlpg_gloo::first_lost_peer(socks);
  EXPECT_EQ(lost, 2);
  close(near);
  close(listener);
}
