// Point-to-point progress: sends and receives with work handles
// progress independently of each other and of later operations (a ring that receives before
// it sends, without a batch; many outstanding transfers in arbitrary order; p2p interleaved
// with collectives), a transfer needs only its two ranks (a 3-rank group whose first
// operation is a send/recv between ranks 0 and 1), and a send to self works inside a batch.
// Data is random per rank and checked against a locally regenerated copy.
#include <algorithm>
#include <random>
#include <thread>

#include "harness.h"

using namespace dlpgt;

namespace {

void ExpectFrom(HostTensor &t, uint64_t seed, int src, const std::string &what) {
  std::vector<uint8_t> want(t.nbytes() + 1);
  Generate(t.dt(), DLPG_SUM, seed, src, want.data(), t.numel());
  EXPECT_EQ("", Compare(t.dt(), DLPG_SUM, t.elems(), want.data(), t.numel())) << what;
}

HostTensor Filled(DT dt, size_t n, uint64_t seed, int src) {
  HostTensor t(dt, {static_cast<int64_t>(n)});
  Generate(dt, DLPG_SUM, seed, src, t.elems(), n);
  return t;
}

void WaitFree(const dlpg_api_t *api, dlpg_work_t *w, const std::string &what) {
  dlpg_status_t s = api->work_wait(w, 0);
  EXPECT_EQ(s, DLPG_OK) << what << ": " << api->status_name(s) << ": " << api->last_error();
  api->work_free(w);
}

class P2PAsync : public ::testing::TestWithParam<RankParam> {};

// Item 1: every rank posts recv(prev) then send(next) with work handles, no batch, then
// waits. A receive that occupied the group's executor would keep every send from starting.
TEST_P(P2PAsync, RingReceiveFirstWithoutBatch) {
  RankParam p = GetParam();
  if (p.n < 2) GTEST_SKIP() << "a ring needs at least 2 ranks";
  RunOptions o;
  o.group_timeout_s = 20;
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    const int next = (c.rank + 1) % c.size, prev = (c.rank + c.size - 1) % c.size;
    for (size_t n : {size_t(3), size_t(1) << 20}) {  // inline, and acknowledged payload
      uint64_t seed = Mix(c.seed, n);
      HostTensor s = Filled(DT::F32, n, seed, c.rank);
      HostTensor r(DT::F32, {static_cast<int64_t>(n)});
      r.Fill(0);
      dlpg_work_t *wr = nullptr, *ws = nullptr;
      double t0 = NowSeconds();
      DLPG_ASSERT_OK(c.api, c.api->recv(c.group, r.dl(), prev, 4, nullptr, &wr));
      DLPG_ASSERT_OK(c.api, c.api->send(c.group, s.dl(), next, 4, nullptr, &ws));
      WaitFree(c.api, wr, "recv from " + std::to_string(prev));
      WaitFree(c.api, ws, "send to " + std::to_string(next));
      EXPECT_LT(NowSeconds() - t0, Scaled(10.0)) << "ring of " << n << " floats";
      ExpectFrom(r, seed, prev, "ring numel=" + std::to_string(n));
    }
  }, o);
}

// Item 2: ranks 0 and 1 exchange as the group's first operation while rank 2 does nothing
// and destroys its group: only the two ranks take part in the connection.
TEST_P(P2PAsync, PairNeedsOnlyItsTwoRanks) {
  RankParam p = GetParam();
  if (p.n < 3) GTEST_SKIP() << "needs a third, idle rank";
  RunOptions o;
  o.group_timeout_s = 10;
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    if (c.rank > 1) return;  // idle: the harness destroys the group
    const int peer = 1 - c.rank;
    uint64_t seed = Mix(c.seed, 7);
    HostTensor s = Filled(DT::I64, 5000, seed, c.rank);
    HostTensor r(DT::I64, {5000});
    double t0 = NowSeconds();
    if (c.rank == 0) {
      DLPG_ASSERT_OK(c.api, c.api->send(c.group, s.dl(), peer, 0, nullptr, nullptr));
      DLPG_ASSERT_OK(c.api, c.api->recv(c.group, r.dl(), peer, 0, nullptr, nullptr));
    } else {
      DLPG_ASSERT_OK(c.api, c.api->recv(c.group, r.dl(), peer, 0, nullptr, nullptr));
      DLPG_ASSERT_OK(c.api, c.api->send(c.group, s.dl(), peer, 0, nullptr, nullptr));
    }
    double el = NowSeconds() - t0;
    EXPECT_LT(el, Scaled(5.0)) << "a send/recv between ranks 0 and 1 waited for the idle rank";
    ExpectFrom(r, seed, peer, "exchange between ranks 0 and 1");
  }, o);
}

// After pairwise traffic the full group still runs collectives (the mesh is separate).
TEST_P(P2PAsync, PairsThenCollectives) {
  RankParam p = GetParam();
  if (p.n < 3) GTEST_SKIP() << "needs a third rank";
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    uint64_t seed = Mix(c.seed, 8);
    if (c.rank < 2) {
      HostTensor s = Filled(DT::U8, 100, seed, c.rank), r(DT::U8, {100});
      dlpg_work_t *wr = nullptr, *ws = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->recv(c.group, r.dl(), 1 - c.rank, 1, nullptr, &wr));
      DLPG_ASSERT_OK(c.api, c.api->send(c.group, s.dl(), 1 - c.rank, 1, nullptr, &ws));
      WaitFree(c.api, wr, "recv");
      WaitFree(c.api, ws, "send");
      ExpectFrom(r, seed, 1 - c.rank, "pair exchange");
    }
    HostTensor a(DT::I32, {64});
    for (int i = 0; i < 64; i++) static_cast<int32_t *>(a.elems())[i] = c.rank * 1000 + i;
    DLTensor *in[] = {a.dl()};
    DLPG_ASSERT_OK(c.api, c.api->allreduce(c.group, in, nullptr, 1, DLPG_SUM, nullptr, nullptr));
    for (int i = 0; i < 64; i++)
      EXPECT_EQ(static_cast<int32_t *>(a.elems())[i], 1000 * c.size * (c.size - 1) / 2 + c.size * i);
  });
}

// Item 1: a send and a receive to self inside a batch, beside a ring exchange.
TEST_P(P2PAsync, SendToSelfInBatch) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    const int next = (c.rank + 1) % c.size, prev = (c.rank + c.size - 1) % c.size;
    uint64_t seed = Mix(c.seed, 9);
    for (size_t n : {size_t(0), size_t(17), size_t(100000)}) {
      HostTensor self_s = Filled(DT::BF16, n, seed + n, c.rank + 100);
      HostTensor self_r(DT::BF16, {static_cast<int64_t>(n)});
      HostTensor ring_s = Filled(DT::F64, n, seed + n, c.rank);
      HostTensor ring_r(DT::F64, {static_cast<int64_t>(n)});
      std::vector<dlpg_work_t *> ws(4, nullptr);
      DLPG_ASSERT_OK(c.api, c.api->group_start(c.group));
      // The receive from self first, the send to self after it: matched by tag in order.
      DLPG_ASSERT_OK(c.api, c.api->recv(c.group, self_r.dl(), c.rank, 3, nullptr, &ws[0]));
      DLPG_ASSERT_OK(c.api, c.api->send(c.group, self_s.dl(), c.rank, 3, nullptr, &ws[1]));
      DLPG_ASSERT_OK(c.api, c.api->send(c.group, ring_s.dl(), next, 3, nullptr, &ws[2]));
      DLPG_ASSERT_OK(c.api, c.api->recv(c.group, ring_r.dl(), prev, 3, nullptr, &ws[3]));
      DLPG_ASSERT_OK(c.api, c.api->group_end(c.group));
      for (auto *w : ws) WaitFree(c.api, w, "batch with self, n=" + std::to_string(n));
      ExpectFrom(self_r, seed + n, c.rank + 100, "to self, n=" + std::to_string(n));
      ExpectFrom(ring_r, seed + n, prev, "ring beside self, n=" + std::to_string(n));
    }
    // Blocking (work == NULL) inside the batch: dlpg_group_end returns once both are done.
    HostTensor s = Filled(DT::I8, 33, seed, c.rank), r(DT::I8, {33});
    DLPG_ASSERT_OK(c.api, c.api->group_start(c.group));
    DLPG_ASSERT_OK(c.api, c.api->send(c.group, s.dl(), c.rank, 0, nullptr, nullptr));
    DLPG_ASSERT_OK(c.api, c.api->recv(c.group, r.dl(), c.rank, 0, nullptr, nullptr));
    DLPG_ASSERT_OK(c.api, c.api->group_end(c.group));
    ExpectFrom(r, seed, c.rank, "blocking send to self in a batch");
    // A size mismatch with self fails both sides with both sizes named.
    HostTensor big(DT::I8, {34});
    dlpg_work_t *w1 = nullptr, *w2 = nullptr;
    DLPG_ASSERT_OK(c.api, c.api->group_start(c.group));
    DLPG_ASSERT_OK(c.api, c.api->send(c.group, s.dl(), c.rank, 1, nullptr, &w1));
    DLPG_ASSERT_OK(c.api, c.api->recv(c.group, big.dl(), c.rank, 1, nullptr, &w2));
    DLPG_ASSERT_OK(c.api, c.api->group_end(c.group));
    for (auto *w : {w1, w2}) {
      EXPECT_EQ(c.api->work_wait(w, 0), DLPG_ERR_INVALID_ARGUMENT);
      std::string m = c.api->work_error(w);
      EXPECT_NE(m.find("33"), std::string::npos) << m;
      EXPECT_NE(m.find("34"), std::string::npos) << m;
      c.api->work_free(w);
    }
    // Outside a batch a send to self could only wait for itself: refused at the call.
    EXPECT_EQ(c.api->send(c.group, s.dl(), c.rank, 0, nullptr, &w1), DLPG_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(c.api->last_error()).find("self"), std::string::npos)
        << c.api->last_error();
  });
}

// Many outstanding transfers: to and from every peer, several tags, the same (peer, tag)
// several times (matched in issue order), mixed sizes, each rank posting in its own random
// order; then every wait.
TEST_P(P2PAsync, ManyOutstandingAnyOrder) {
  RankParam p = GetParam();
  if (p.n < 2) GTEST_SKIP() << "needs peers";
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    struct Item {
      bool send;
      int peer, tag, k;  // k: the k-th message of (direction, peer, tag)
      size_t n;
      HostTensor t;
      dlpg_work_t *w = nullptr;
    };
    // Message (src -> dst, tag, k): numel and seed both sides compute alike.
    auto numel = [](int src, int dst, int tag, int k) {
      return static_cast<size_t>((src * 7 + dst * 3 + tag * 5 + k) % 3 == 0 ? 70000 : 1 + 11 * (tag + k));
    };
    auto mseed = [&](int src, int dst, int tag, int k) {
      return Mix(c.seed, static_cast<uint64_t>(((src * 64 + dst) * 64 + tag) * 64 + k));
    };
    std::vector<Item> items;
    for (int peer = 0; peer < c.size; peer++) {
      if (peer == c.rank) continue;
      for (int tag = 0; tag < 3; tag++)
        for (int k = 0; k < 2; k++) {
          size_t ns = numel(c.rank, peer, tag, k), nr = numel(peer, c.rank, tag, k);
          items.push_back({true, peer, tag, k, ns, Filled(DT::F32, ns, mseed(c.rank, peer, tag, k), c.rank)});
          items.push_back({false, peer, tag, k, nr, HostTensor(DT::F32, {static_cast<int64_t>(nr)})});
        }
    }
    // Post order: random per rank, except that the k-th message of a (direction, peer, tag)
    // keeps its place relative to the others of the same triple (that is what matches).
    std::vector<size_t> order(items.size());
    for (size_t i = 0; i < order.size(); i++) order[i] = i;
    std::mt19937 rng(static_cast<uint32_t>(c.seed + 31 * c.rank));
    std::shuffle(order.begin(), order.end(), rng);
    std::map<std::tuple<bool, int, int>, int> next_k;
    std::vector<size_t> posted;
    std::vector<bool> done(items.size(), false);
    while (posted.size() < items.size())
      for (size_t i : order) {
        if (done[i]) continue;
        Item &it = items[i];
        int &nk = next_k[std::make_tuple(it.send, it.peer, it.tag)];
        if (it.k != nk) continue;
        nk++;
        done[i] = true;
        posted.push_back(i);
        it.t.Fill(it.send ? 0 : 0x33);
        if (it.send) Generate(DT::F32, DLPG_SUM, mseed(c.rank, it.peer, it.tag, it.k), c.rank, it.t.elems(), it.n);
        dlpg_status_t s = it.send ? c.api->send(c.group, it.t.dl(), it.peer, it.tag, nullptr, &it.w)
                                  : c.api->recv(c.group, it.t.dl(), it.peer, it.tag, nullptr, &it.w);
        ASSERT_EQ(s, DLPG_OK) << c.api->last_error();
      }
    // Wait in reverse post order.
    for (size_t j = posted.size(); j-- > 0;) {
      Item &it = items[posted[j]];
      WaitFree(c.api, it.w, std::string(it.send ? "send to " : "recv from ") + std::to_string(it.peer));
      if (!it.send)
        ExpectFrom(it.t, mseed(it.peer, c.rank, it.tag, it.k), it.peer,
                   "message " + std::to_string(it.k) + " from rank " + std::to_string(it.peer) +
                       " tag " + std::to_string(it.tag));
    }
  });
}

// Point-to-point does not queue behind collectives: rank 0 issues an allreduce and then a
// send; rank 1 first receives that send and only then joins the allreduce. (With sends
// queued behind the group's collectives this deadlocks; torch's Gloo and NCCL backends
// complete it.) Collectives keep their own order, p2p its own (per peer and tag).
TEST_P(P2PAsync, InterleavedWithCollectives) {
  RankParam p = GetParam();
  if (p.n < 2) GTEST_SKIP() << "needs peers";
  RunOptions o;
  o.group_timeout_s = 20;
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    uint64_t seed = Mix(c.seed, 11);
    HostTensor a(DT::I64, {300}), b(DT::I64, {5});
    for (int i = 0; i < 300; i++) static_cast<int64_t *>(a.elems())[i] = c.rank + i;
    for (int i = 0; i < 5; i++) static_cast<int64_t *>(b.elems())[i] = c.rank == 0 ? 40 + i : -1;
    DLTensor *ain[] = {a.dl()}, *bin[] = {b.dl()};
    HostTensor s = Filled(DT::U16, 9000, seed, c.rank), r(DT::U16, {9000});
    if (c.rank == 0) {
      dlpg_work_t *w1 = nullptr, *ws = nullptr, *w2 = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->allreduce(c.group, ain, nullptr, 1, DLPG_SUM, nullptr, &w1));
      DLPG_ASSERT_OK(c.api, c.api->send(c.group, s.dl(), 1, 2, nullptr, &ws));
      DLPG_ASSERT_OK(c.api, c.api->broadcast(c.group, bin, nullptr, 1, 0, nullptr, &w2));
      WaitFree(c.api, ws, "send queued after an allreduce");
      WaitFree(c.api, w1, "allreduce");
      WaitFree(c.api, w2, "broadcast");
    } else {
      if (c.rank == 1) DLPG_ASSERT_OK(c.api, c.api->recv(c.group, r.dl(), 0, 2, nullptr, nullptr));
      dlpg_work_t *w1 = nullptr, *w2 = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->allreduce(c.group, ain, nullptr, 1, DLPG_SUM, nullptr, &w1));
      DLPG_ASSERT_OK(c.api, c.api->broadcast(c.group, bin, nullptr, 1, 0, nullptr, &w2));
      WaitFree(c.api, w1, "allreduce");
      WaitFree(c.api, w2, "broadcast");
      if (c.rank == 1) ExpectFrom(r, seed, 0, "send issued after an allreduce");
    }
    for (int i = 0; i < 300; i++)
      EXPECT_EQ(static_cast<int64_t *>(a.elems())[i], c.size * (c.size - 1) / 2 + c.size * i);
    for (int i = 0; i < 5; i++) EXPECT_EQ(static_cast<int64_t *>(b.elems())[i], 40 + i);
  }, o);
}

// An abort wakes a receive waiting on a connected pair, and its work completes.
TEST_P(P2PAsync, AbortWakesConnectedReceive) {
  RankParam p = GetParam();
  if (p.n != 2) GTEST_SKIP() << "two ranks";
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    HostTensor t(DT::U8, {100000});
    // Connect the pair first.
    if (c.rank == 0) DLPG_ASSERT_OK(c.api, c.api->send(c.group, t.dl(), 1, 0, nullptr, nullptr));
    else DLPG_ASSERT_OK(c.api, c.api->recv(c.group, t.dl(), 0, 0, nullptr, nullptr));
    if (c.rank == 1) {
      dlpg_work_t *w = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->recv(c.group, t.dl(), 0, 1, nullptr, &w));
      std::thread aborter([&] {
        usleep(200000);
        c.api->group_abort(c.group);
      });
      EXPECT_EQ(c.api->work_wait(w, 0), DLPG_ERR_ABORTED) << c.api->last_error();
      aborter.join();
      double t0 = NowSeconds();
      int done = 0;
      while (!done && NowSeconds() - t0 < 5) c.api->work_test(w, &done);
      EXPECT_EQ(done, 1) << "the aborted receive's work did not complete";
      c.api->work_free(w);
    }
    std::string key = c.name + "/abort-done";
    if (c.rank == 1) c.api->store_set(c.store, key.c_str(), "1", 1);
    else {
      size_t len = 0;
      c.api->store_get(c.store, key.c_str(), 30, nullptr, 0, &len);
    }
  });
}

// A peer that never takes part: the transfer ends within the group's timeout with a message
// naming the missing rank (the pair's connection waits for that rank alone).
TEST_P(P2PAsync, MissingPeerTimesOut) {
  RankParam p = GetParam();
  if (p.n != 2) GTEST_SKIP() << "two ranks";
  RunOptions o;
  o.group_timeout_s = 2;
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    std::string key = c.name + "/sender-done";
    if (c.rank == 1) {  // idle until the sender has given up
      size_t len = 0;
      c.api->store_get(c.store, key.c_str(), 30, nullptr, 0, &len);
      return;
    }
    HostTensor t(DT::F32, {10});
    dlpg_work_t *w = nullptr;
    double t0 = NowSeconds();
    DLPG_ASSERT_OK(c.api, c.api->send(c.group, t.dl(), 1, 0, nullptr, &w));
    dlpg_status_t s = c.api->work_wait(w, 0);
    double el = NowSeconds() - t0;
    EXPECT_EQ(s, DLPG_ERR_TIMEOUT) << c.api->status_name(s) << ": " << c.api->last_error();
    EXPECT_LT(el, Scaled(10.0));
    // The work itself ends too (its transfer gave up at the same deadline, or the wait's
    // abort completed it), naming the rank it waited for.
    int done = 0;
    while (!done && NowSeconds() - t0 < 10) c.api->work_test(w, &done);
    EXPECT_EQ(done, 1);
    std::string m = c.api->work_error(w);
    EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
    c.api->work_free(w);
    c.api->store_set(c.store, key.c_str(), "1", 1);
  }, o);
}

INSTANTIATE_TEST_SUITE_P(Ranks, P2PAsync, ::testing::ValuesIn(StandardRankParams()), RankParamName);

}  // namespace
