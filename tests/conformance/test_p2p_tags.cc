// Point-to-point on host memory, where the tag matches (dlpg.h): messages of many tags and
// sizes received in another order than they were sent, messages far larger than any
// buffer a transport may stage them through (ctest runs these again with small pair
// slots), both directions of a pair at once, and a ring of several tags at every rank.
// Data is random per rank and tag and checked against a locally regenerated copy.
#include <algorithm>
#include <random>

#include "harness.h"

using namespace dlpgt;

namespace {

void ExpectFrom(HostTensor &t, uint64_t seed, int src, const std::string &what) {
  std::vector<uint8_t> want(t.nbytes() + 1);
  Generate(t.dt(), DLPG_SUM, seed, src, want.data(), t.numel());
  EXPECT_EQ("", Compare(t.dt(), DLPG_SUM, t.elems(), want.data(), t.numel())) << what;
}

void WaitFree(const dlpg_api_t *api, dlpg_work_t *w, const std::string &what) {
  dlpg_status_t s = api->work_wait(w, 0);
  EXPECT_EQ(s, DLPG_OK) << what << ": " << api->status_name(s) << ": " << api->work_error(w);
  api->work_free(w);
}

class P2PTags : public ::testing::TestWithParam<RankParam> {
 protected:
  void SetUp() override {
    if (GetParam().n < 2) GTEST_SKIP() << "point-to-point needs at least 2 ranks";
  }
};

// Sizes from empty to 12 MiB: small ones, ones around any chunk size, and large ones.
const std::vector<size_t> kSizes = {0, 1, 7, 2047, 2048, 70000, 1 << 20, 3 << 20};

// The last rank sends one message per tag (sizes in kSizes, in tag order, with work
// handles); rank 0 receives them in a shuffled order, some blocking, some with handles.
TEST_P(P2PTags, ManyTagsShuffledOrder) {
  RankParam p = GetParam();
  RunOptions o;
  o.group_timeout_s = 60;
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    const int src = c.size - 1, dst = 0;
    const int ntags = static_cast<int>(kSizes.size());
    if (c.rank == src) {
      std::vector<HostTensor> t;
      std::vector<dlpg_work_t *> w(ntags, nullptr);
      t.reserve(ntags);
      for (int k = 0; k < ntags; k++) {
        t.emplace_back(DT::F32, std::vector<int64_t>{static_cast<int64_t>(kSizes[k])});
        Generate(DT::F32, DLPG_SUM, Mix(c.seed, 100 + k), src, t[k].elems(), kSizes[k]);
        DLPG_ASSERT_OK(c.api, c.api->send(c.group, t[k].dl(), dst, 30 + k, nullptr, &w[k]));
      }
      for (int k = 0; k < ntags; k++) WaitFree(c.api, w[k], "send tag " + std::to_string(30 + k));
    } else if (c.rank == dst) {
      std::vector<int> order(ntags);
      for (int k = 0; k < ntags; k++) order[k] = k;
      std::mt19937 g(static_cast<unsigned>(c.seed));
      std::shuffle(order.begin(), order.end(), g);
      std::reverse(order.begin(), order.end());
      for (int i = 0; i < ntags; i++) {
        int k = order[i];
        HostTensor r(DT::F32, {static_cast<int64_t>(kSizes[k])});
        r.Fill(0x11);
        std::string what = "recv tag " + std::to_string(30 + k) + " (" +
                           std::to_string(kSizes[k]) + " floats, #" + std::to_string(i) + ")";
        if (i % 2) {
          DLPG_ASSERT_OK(c.api, c.api->recv(c.group, r.dl(), src, 30 + k, nullptr, nullptr));
        } else {
          dlpg_work_t *w = nullptr;
          DLPG_ASSERT_OK(c.api, c.api->recv(c.group, r.dl(), src, 30 + k, nullptr, &w));
          WaitFree(c.api, w, what);
        }
        ExpectFrom(r, Mix(c.seed, 100 + k), src, what);
      }
    }
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));
  }, o);
}

// Several messages with the same tag keep their order; another tag between them does not
// disturb it.
TEST_P(P2PTags, SameTagKeepsOrder) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    const int src = 0, dst = 1;
    const size_t n[] = {5, 300000, 9, 0, 700000};
    const int tag[] = {3, 3, 4, 3, 3};
    if (c.rank == src) {
      std::vector<HostTensor> t;
      std::vector<dlpg_work_t *> w(5);
      t.reserve(5);
      for (int i = 0; i < 5; i++) {
        t.emplace_back(DT::I32, std::vector<int64_t>{static_cast<int64_t>(n[i])});
        Generate(DT::I32, DLPG_SUM, Mix(c.seed, 200 + i), src, t[i].elems(), n[i]);
        DLPG_ASSERT_OK(c.api, c.api->send(c.group, t[i].dl(), dst, tag[i], nullptr, &w[i]));
      }
      for (int i = 0; i < 5; i++) WaitFree(c.api, w[i], "send #" + std::to_string(i));
    } else if (c.rank == dst) {
      // Tag 3's four messages first, in order, then tag 4's.
      for (int i : {0, 1, 3, 4, 2}) {
        HostTensor r(DT::I32, {static_cast<int64_t>(n[i])});
        r.Fill(0);
        DLPG_ASSERT_OK(c.api, c.api->recv(c.group, r.dl(), src, tag[i], nullptr, nullptr));
        ExpectFrom(r, Mix(c.seed, 200 + i), src, "message #" + std::to_string(i));
      }
    }
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));
  });
}

// Both ranks of a pair send 16 MiB to each other at once, then a small reply each way.
TEST_P(P2PTags, LargeBothWaysAtOnce) {
  RankParam p = GetParam();
  RunOptions o;
  o.group_timeout_s = 60;
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    if (c.rank > 1) return;
    const int peer = 1 - c.rank;
    const size_t n = size_t(4) << 20;  // floats: 16 MiB
    HostTensor s(DT::F32, {static_cast<int64_t>(n)}), r(DT::F32, {static_cast<int64_t>(n)});
    Generate(DT::F32, DLPG_SUM, Mix(c.seed, 300), c.rank, s.elems(), n);
    r.Fill(0);
    dlpg_work_t *ws = nullptr, *wr = nullptr;
    DLPG_ASSERT_OK(c.api, c.api->send(c.group, s.dl(), peer, 1, nullptr, &ws));
    DLPG_ASSERT_OK(c.api, c.api->recv(c.group, r.dl(), peer, 1, nullptr, &wr));
    WaitFree(c.api, ws, "send 16 MiB");
    WaitFree(c.api, wr, "recv 16 MiB");
    ExpectFrom(r, Mix(c.seed, 300), peer, "16 MiB from rank " + std::to_string(peer));
    HostTensor a(DT::U8, {3}), b(DT::U8, {3});
    Generate(DT::U8, DLPG_SUM, Mix(c.seed, 301), c.rank, a.elems(), 3);
    if (c.rank == 0) {
      DLPG_ASSERT_OK(c.api, c.api->send(c.group, a.dl(), peer, 2, nullptr, nullptr));
      DLPG_ASSERT_OK(c.api, c.api->recv(c.group, b.dl(), peer, 2, nullptr, nullptr));
    } else {
      DLPG_ASSERT_OK(c.api, c.api->recv(c.group, b.dl(), peer, 2, nullptr, nullptr));
      DLPG_ASSERT_OK(c.api, c.api->send(c.group, a.dl(), peer, 2, nullptr, nullptr));
    }
    ExpectFrom(b, Mix(c.seed, 301), peer, "reply");
  }, o);
}

// A ring at every rank, three tags per step posted receive-first with work handles and
// waited for in the opposite order: every rank's transfers progress on their own.
TEST_P(P2PTags, RingOfTagsReceiveFirst) {
  RankParam p = GetParam();
  RunOptions o;
  o.group_timeout_s = 60;
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    const int next = (c.rank + 1) % c.size, prev = (c.rank + c.size - 1) % c.size;
    const size_t n[] = {17, size_t(1) << 20, 4096};
    for (int round = 0; round < 3; round++) {
      std::vector<HostTensor> s, r;
      s.reserve(3);
      r.reserve(3);
      std::vector<dlpg_work_t *> ws(3), wr(3);
      for (int k = 0; k < 3; k++) {
        r.emplace_back(DT::F64, std::vector<int64_t>{static_cast<int64_t>(n[k])});
        r[k].Fill(0);
        DLPG_ASSERT_OK(c.api, c.api->recv(c.group, r[k].dl(), prev, 7 + k, nullptr, &wr[k]));
      }
      for (int k = 2; k >= 0; k--) {
        s.emplace_back(DT::F64, std::vector<int64_t>{static_cast<int64_t>(n[k])});
        Generate(DT::F64, DLPG_SUM, Mix(c.seed, 400 + 10 * round + k), c.rank, s.back().elems(),
                 n[k]);
        DLPG_ASSERT_OK(c.api, c.api->send(c.group, s.back().dl(), next, 7 + k, nullptr, &ws[k]));
      }
      for (int k = 2; k >= 0; k--) WaitFree(c.api, wr[k], "ring recv tag " + std::to_string(7 + k));
      for (int k = 0; k < 3; k++) WaitFree(c.api, ws[k], "ring send tag " + std::to_string(7 + k));
      for (int k = 0; k < 3; k++)
        ExpectFrom(r[k], Mix(c.seed, 400 + 10 * round + k), prev,
                   "round " + std::to_string(round) + " tag " + std::to_string(7 + k));
    }
  }, o);
}

// A receive whose size differs from its send fails on the receiving rank, small or large.
TEST_P(P2PTags, SizeMismatchFailsTheReceive) {
  RankParam p = GetParam();
  RunOptions o;
  o.group_timeout_s = 20;
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    if (c.rank > 1) return;
    const size_t n[] = {10, size_t(1) << 20};
    std::vector<HostTensor> t;
    std::vector<dlpg_work_t *> w(2);
    t.reserve(2);
    for (int k = 0; k < 2; k++) {
      t.emplace_back(DT::F32, std::vector<int64_t>{static_cast<int64_t>(c.rank == 0 ? n[k] : n[k] + 1)});
      Generate(DT::F32, DLPG_SUM, Mix(c.seed, k), 0, t[k].elems(), t[k].numel());
      if (c.rank == 0) {
        DLPG_ASSERT_OK(c.api, c.api->send(c.group, t[k].dl(), 1, 5 + k, nullptr, &w[k]));
      } else {
        DLPG_ASSERT_OK(c.api, c.api->recv(c.group, t[k].dl(), 0, 5 + k, nullptr, &w[k]));
      }
    }
    for (int k = 0; k < 2; k++) {
      dlpg_status_t s = c.api->work_wait(w[k], 0);
      if (c.rank == 1) {
        EXPECT_NE(s, DLPG_OK) << "a receive of " << n[k] + 1 << " floats met a send of " << n[k];
      }
      c.api->work_free(w[k]);
    }
  }, o);
}

INSTANTIATE_TEST_SUITE_P(Ranks, P2PTags, ::testing::ValuesIn(StandardRankParams()), RankParamName);

}  // namespace
