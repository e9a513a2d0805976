// Point-to-point: send/recv between every ordered pair, tag matching, dlpg_group_start/end
// batches that would deadlock if issued one by one, one thread driving two ranks' groups
// inside one batch, and zero-size messages. Data is random per rank and checked against a
// locally regenerated copy of the sender's data.
#include <thread>

#include "harness.h"

using namespace dlpgt;

namespace {

class P2P : public ::testing::TestWithParam<RankParam> {
 protected:
  void SetUp() override {
    if (GetParam().n < 2) GTEST_SKIP() << "point-to-point needs at least 2 ranks";
  }
};

std::vector<DT> P2PDTypes(bool full) {
  if (full) {
    std::vector<DT> v;
    for (auto &i : AllDTypes()) v.push_back(i.dt);
    return v;
  }
  return {DT::U8, DT::F32, DT::BF16, DT::F8E4M3};
}

// Check that t holds the data Generate(dt, seed, src) makes.
void ExpectFrom(HostTensor &t, uint64_t seed, int src, const std::string &what) {
  std::vector<uint8_t> want(t.nbytes() + 1);
  Generate(t.dt(), DLPG_SUM, seed, src, want.data(), t.numel());
  EXPECT_EQ("", Compare(t.dt(), DLPG_SUM, t.elems(), want.data(), t.numel())) << what;
}

TEST_P(P2P, EveryPair) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    uint64_t ci = 0;
    int errors = 0;
    for (DT dt : P2PDTypes(p.full))
      for (size_t n : {size_t(0), size_t(1), size_t(1031)})
        for (int src = 0; src < c.size; src++)
          for (int dst = 0; dst < c.size; dst++) {
            if (src == dst) continue;
            uint64_t seed = Mix(c.seed, ci++);
            if (c.rank != src && c.rank != dst) continue;
            if (errors >= 3) return;
            std::string what = std::string(Info(dt).name) + " numel=" + std::to_string(n) + " " +
                               std::to_string(src) + "->" + std::to_string(dst);
            HostTensor t(dt, {static_cast<int64_t>(n)}, c.rank == src ? 2 : 0, c.rank == src);
            if (c.rank == src) {
              Generate(dt, DLPG_SUM, seed, src, t.elems(), n);
              dlpg_work_t *w = nullptr;
              dlpg_status_t s = c.api->send(c.group, t.dl(), dst, static_cast<int>(ci % 7), nullptr, &w);
              if (s == DLPG_OK) s = c.api->work_wait(w, 0);
              EXPECT_EQ(s, DLPG_OK) << "send " << what << ": " << c.api->last_error()
                                    << (w ? c.api->work_error(w) : "");
              if (w) c.api->work_free(w);
              if (s != DLPG_OK) errors++;
            } else {
              t.Fill(0x5A);
              dlpg_status_t s = c.api->recv(c.group, t.dl(), src, static_cast<int>(ci % 7), nullptr, nullptr);
              EXPECT_EQ(s, DLPG_OK) << "recv " << what << ": " << c.api->last_error();
              if (s == DLPG_OK) ExpectFrom(t, seed, src, "recv " + what);
              else errors++;
            }
          }
  });
}

// Two messages with different tags, received in the opposite order they were sent. The
// receives are posted together in a batch (a receive in issue order would wait for a send
// queued behind the other one).
TEST_P(P2P, TagsMatchOppositeOrder) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    const int src = c.size - 1, dst = 0;
    uint64_t sa = Mix(c.seed, 1), sb = Mix(c.seed, 2);
    for (int variant = 0; variant < 2; variant++) {
      // Different sizes and dtypes, so a mix-up cannot pass unnoticed.
      HostTensor a(DT::I32, {1000}), b(DT::I32, {1000});
      if (c.rank == src) {
        Generate(DT::I32, DLPG_SUM, sa, src, a.elems(), a.numel());
        Generate(DT::I32, DLPG_SUM, sb, src, b.elems(), b.numel());
        dlpg_work_t *wa = nullptr, *wb = nullptr;
        if (variant == 1) DLPG_ASSERT_OK(c.api, c.api->group_start(c.group));
        DLPG_ASSERT_OK(c.api, c.api->send(c.group, a.dl(), dst, 11, nullptr, &wa));
        DLPG_ASSERT_OK(c.api, c.api->send(c.group, b.dl(), dst, 22, nullptr, &wb));
        if (variant == 1) DLPG_ASSERT_OK(c.api, c.api->group_end(c.group));
        DLPG_EXPECT_OK(c.api, c.api->work_wait(wa, 0));
        DLPG_EXPECT_OK(c.api, c.api->work_wait(wb, 0));
        c.api->work_free(wa);
        c.api->work_free(wb);
      } else if (c.rank == dst) {
        a.Fill(0);
        b.Fill(0);
        if (variant == 0) {
          dlpg_work_t *wa = nullptr, *wb = nullptr;
          DLPG_ASSERT_OK(c.api, c.api->group_start(c.group));
          DLPG_ASSERT_OK(c.api, c.api->recv(c.group, b.dl(), src, 22, nullptr, &wb));
          DLPG_ASSERT_OK(c.api, c.api->recv(c.group, a.dl(), src, 11, nullptr, &wa));
          DLPG_ASSERT_OK(c.api, c.api->group_end(c.group));
          DLPG_EXPECT_OK(c.api, c.api->work_wait(wb, 0));
          DLPG_EXPECT_OK(c.api, c.api->work_wait(wa, 0));
          c.api->work_free(wa);
          c.api->work_free(wb);
        } else {
          // The sends were batched, so both are posted: plain receives in reverse order.
          DLPG_ASSERT_OK(c.api, c.api->recv(c.group, b.dl(), src, 22, nullptr, nullptr));
          DLPG_ASSERT_OK(c.api, c.api->recv(c.group, a.dl(), src, 11, nullptr, nullptr));
        }
        ExpectFrom(a, sa, src, "tag 11 (variant " + std::to_string(variant) + ")");
        ExpectFrom(b, sb, src, "tag 22 (variant " + std::to_string(variant) + ")");
      }
      DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));
    }
  });
}

// Ring exchange and all-pairs exchange in one batch: every rank sends before it receives,
// which deadlocks when the operations are issued one at a time with rendezvous sends.
TEST_P(P2P, BatchedRingAndAllPairs) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    const int next = (c.rank + 1) % c.size, prev = (c.rank + c.size - 1) % c.size;
    for (size_t n : {size_t(1), size_t(1031), size_t(1) << 20}) {
      uint64_t seed = Mix(c.seed, n);
      HostTensor s(DT::F32, {static_cast<int64_t>(n)}), r(DT::F32, {static_cast<int64_t>(n)});
      Generate(DT::F32, DLPG_SUM, seed, c.rank, s.elems(), n);
      r.Fill(0);
      dlpg_work_t *ws = nullptr, *wr = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->group_start(c.group));
      DLPG_ASSERT_OK(c.api, c.api->send(c.group, s.dl(), next, 0, nullptr, &ws));
      DLPG_ASSERT_OK(c.api, c.api->recv(c.group, r.dl(), prev, 0, nullptr, &wr));
      DLPG_ASSERT_OK(c.api, c.api->group_end(c.group));
      DLPG_EXPECT_OK(c.api, c.api->work_wait(wr, 0));
      DLPG_EXPECT_OK(c.api, c.api->work_wait(ws, 0));
      c.api->work_free(ws);
      c.api->work_free(wr);
      ExpectFrom(r, seed, prev, "ring numel=" + std::to_string(n));
    }
    // All pairs, nested start/end.
    const size_t n = 4097;
    uint64_t seed = Mix(c.seed, 99);
    HostTensor s(DT::I16, {static_cast<int64_t>(n)});
    Generate(DT::I16, DLPG_SUM, seed, c.rank, s.elems(), n);
    std::vector<HostTensor> rs;
    for (int i = 0; i < c.size; i++) rs.emplace_back(DT::I16, std::vector<int64_t>{static_cast<int64_t>(n)});
    std::vector<dlpg_work_t *> works;
    DLPG_ASSERT_OK(c.api, c.api->group_start(c.group));
    DLPG_ASSERT_OK(c.api, c.api->group_start(c.group));
    for (int peer = 0; peer < c.size; peer++) {
      if (peer == c.rank) continue;
      dlpg_work_t *w = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->send(c.group, s.dl(), peer, 5, nullptr, &w));
      works.push_back(w);
    }
    DLPG_ASSERT_OK(c.api, c.api->group_end(c.group));
    for (int peer = 0; peer < c.size; peer++) {
      if (peer == c.rank) continue;
      dlpg_work_t *w = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->recv(c.group, rs[peer].dl(), peer, 5, nullptr, &w));
      works.push_back(w);
    }
    DLPG_ASSERT_OK(c.api, c.api->group_end(c.group));
    for (auto *w : works) {
      DLPG_EXPECT_OK(c.api, c.api->work_wait(w, 0));
      c.api->work_free(w);
    }
    for (int peer = 0; peer < c.size; peer++)
      if (peer != c.rank) ExpectFrom(rs[peer], seed, peer, "all-pairs from " + std::to_string(peer));
  });
}

TEST_P(P2P, ZeroSizeMessages) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    // The CPU context is created lazily by the first operation and needs every rank (a
    // full mesh), so ranks that take no part in the messages below join with a barrier.
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));
    uint64_t seed = Mix(c.seed, 5);
    for (int round = 0; round < 3; round++) {
      if (c.rank == 0) {
        HostTensor z(DT::F64, {0}), z2(DT::F64, {4, 0, 3}), t(DT::F64, {33});
        Generate(DT::F64, DLPG_SUM, seed + round, 0, t.elems(), 33);
        DLPG_ASSERT_OK(c.api, c.api->send(c.group, z.dl(), 1, 3, nullptr, nullptr));
        DLPG_ASSERT_OK(c.api, c.api->send(c.group, z2.dl(), 1, 3, nullptr, nullptr));
        DLPG_ASSERT_OK(c.api, c.api->send(c.group, t.dl(), 1, 3, nullptr, nullptr));
      } else if (c.rank == 1) {
        HostTensor z(DT::F64, {0}), z2(DT::F64, {4, 0, 3}), t(DT::F64, {33});
        DLPG_ASSERT_OK(c.api, c.api->recv(c.group, z.dl(), 0, 3, nullptr, nullptr));
        DLPG_ASSERT_OK(c.api, c.api->recv(c.group, z2.dl(), 0, 3, nullptr, nullptr));
        DLPG_ASSERT_OK(c.api, c.api->recv(c.group, t.dl(), 0, 3, nullptr, nullptr));
        ExpectFrom(t, seed + round, 0, "message after zero-size ones");
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, P2P, ::testing::ValuesIn(StandardRankParams()), RankParamName);

// One thread drives two ranks: the send on rank 0's group and the matching receive on rank
// 1's group sit in one dlpg_group_start/end batch of that thread.
TEST(P2PSingleThread, OneThreadDrivesTwoRanks) {
  const dlpg_api_t *api = dlpg_test_api();
  dlpg_store_t *s0 = nullptr, *s1 = nullptr;
  DLPG_ASSERT_OK(api, api->store_open("tcp://127.0.0.1:0?serve=1", 30, &s0));
  int port = 0;
  DLPG_ASSERT_OK(api, api->store_port(s0, &port));
  std::string url = "tcp://127.0.0.1:" + std::to_string(port);
  DLPG_ASSERT_OK(api, api->store_open(url.c_str(), 30, &s1));
  std::string name = UniqueName();
  dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
  o.timeout_s = 30;
  o.name = name.c_str();
  dlpg_group_t *g0 = nullptr, *g1 = nullptr;
  DLPG_ASSERT_OK(api, api->group_create(s0, 0, 2, &o, &g0));
  DLPG_ASSERT_OK(api, api->group_create(s1, 1, 2, &o, &g1));
  // Connect both groups first (rendezvous needs both ranks at once).
  dlpg_status_t b1 = DLPG_OK;
  std::thread t([&] { b1 = api->barrier(g1, nullptr); });
  dlpg_status_t b0 = api->barrier(g0, nullptr);
  t.join();
  ASSERT_EQ(b0, DLPG_OK) << api->last_error();
  ASSERT_EQ(b1, DLPG_OK);

  uint64_t seed = TestSeed();
  for (size_t n : {size_t(0), size_t(7), size_t(1) << 18}) {
    HostTensor x(DT::F32, {static_cast<int64_t>(n)}), y(DT::F32, {static_cast<int64_t>(n)});
    HostTensor x1(DT::U64, {static_cast<int64_t>(n)}), y1(DT::U64, {static_cast<int64_t>(n)});
    Generate(DT::F32, DLPG_SUM, seed + n, 0, x.elems(), n);
    Generate(DT::U64, DLPG_SUM, seed + n, 1, x1.elems(), n);
    dlpg_work_t *w[4] = {};
    DLPG_ASSERT_OK(api, api->group_start(g0));
    DLPG_ASSERT_OK(api, api->send(g0, x.dl(), 1, 1, nullptr, &w[0]));   // rank 0 -> 1
    DLPG_ASSERT_OK(api, api->recv(g1, y.dl(), 0, 1, nullptr, &w[1]));   // rank 1 <- 0
    DLPG_ASSERT_OK(api, api->send(g1, x1.dl(), 0, 2, nullptr, &w[2]));  // rank 1 -> 0
    DLPG_ASSERT_OK(api, api->recv(g0, y1.dl(), 1, 2, nullptr, &w[3]));  // rank 0 <- 1
    DLPG_ASSERT_OK(api, api->group_end(g0));
    for (auto *wk : w) {
      DLPG_EXPECT_OK(api, api->work_wait(wk, 10));
      api->work_free(wk);
    }
    ExpectFrom(y, seed + n, 0, "rank 1 received from rank 0, numel=" + std::to_string(n));
    ExpectFrom(y1, seed + n, 1, "rank 0 received from rank 1, numel=" + std::to_string(n));
  }
  DLPG_EXPECT_OK(api, api->group_destroy(g0));
  DLPG_EXPECT_OK(api, api->group_destroy(g1));
  api->store_close(s1);
  api->store_close(s0);
}

}  // namespace
