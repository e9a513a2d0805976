// Receives from any source (dlpg.h's DLPG_ANY_SOURCE) on host memory: every other rank sends
// to rank 0 with one tag, each after a random delay, and rank 0 receives them all from any
// rank; each payload is checked against the reference regenerated for the sender it reports,
// and the messages of each sender must arrive in that sender's order. Named receives of the
// same tag interleave with them; a receive nobody sends to times out naming "any rank", and
// an abort wakes it; dlpg_send refuses DLPG_ANY_SOURCE. Shared memory and Gloo alike.
#include <chrono>
#include <random>
#include <thread>

#include "harness.h"

using namespace dlpgt;

namespace {

class P2PAnySource : public ::testing::TestWithParam<RankParam> {
 protected:
  void SetUp() override {
    if (GetParam().n < 3) GTEST_SKIP() << "several senders need at least 3 ranks";
  }
};

// Message k of sender r: its own data, so a payload tells which sender and which message.
uint64_t MsgSeed(uint64_t seed, int k) { return Mix(seed, 500 + k); }

TEST_P(P2PAnySource, SendersInRandomOrder) {
  RankParam p = GetParam();
  for (int64_t numel : {int64_t{300}, int64_t{200000}}) {  // one ring entry; streamed
    RunRanks(p.mode, p.n, [&](RankCtx &c) {
      const int kMsgs = 4, tag = 9;
      if (c.rank != 0) {
        std::mt19937 g(static_cast<unsigned>(c.seed + c.rank));
        std::vector<HostTensor> t;
        std::vector<dlpg_work_t *> w(kMsgs, nullptr);
        t.reserve(kMsgs);
        for (int k = 0; k < kMsgs; k++) {
          std::this_thread::sleep_for(std::chrono::microseconds(g() % 3000));
          t.emplace_back(DT::F32, std::vector<int64_t>{numel});
          Generate(DT::F32, DLPG_SUM, MsgSeed(c.seed, k), c.rank, t[k].elems(), numel);
          DLPG_ASSERT_OK(c.api, c.api->send(c.group, t[k].dl(), 0, tag, nullptr, &w[k]));
        }
        for (int k = 0; k < kMsgs; k++) {
          EXPECT_EQ(c.api->work_wait(w[k], 0), DLPG_OK) << c.api->work_error(w[k]);
          c.api->work_free(w[k]);
        }
      } else {
        std::vector<int> next(c.size, 0);  // the next message expected of each sender
        for (int i = 0; i < kMsgs * (c.size - 1); i++) {
          HostTensor r(DT::F32, {numel});
          r.Fill(0x11);
          int src = -1;
          if (i % 2) {
            DLPG_ASSERT_OK(c.api, c.api->recv_any(c.group, r.dl(), tag, &src, nullptr));
          } else {
            dlpg_work_t *w = nullptr;
            DLPG_ASSERT_OK(c.api, c.api->recv(c.group, r.dl(), DLPG_ANY_SOURCE, tag, nullptr, &w));
            ASSERT_EQ(c.api->work_wait(w, 0), DLPG_OK) << c.api->work_error(w);
            DLPG_ASSERT_OK(c.api, c.api->work_source(w, &src));
            c.api->work_free(w);
          }
          ASSERT_GE(src, 1) << "receive #" << i;
          ASSERT_LT(src, c.size) << "receive #" << i;
          ASSERT_LT(next[src], kMsgs) << "more messages from rank " << src << " than it sent";
          std::vector<uint8_t> want(r.nbytes() + 1);
          Generate(DT::F32, DLPG_SUM, MsgSeed(c.seed, next[src]), src, want.data(), numel);
          EXPECT_EQ("", Compare(DT::F32, DLPG_SUM, r.elems(), want.data(), numel))
              << "receive #" << i << ": rank " << src << "'s message " << next[src]
              << " (out of order or corrupt)";
          next[src]++;
        }
        // A named receive still tells its peer; the flight recorder shows peer=any.
        size_t len = 0;
        DLPG_ASSERT_OK(c.api, c.api->group_flight_record(c.group, nullptr, 0, &len));
        std::string rec(len + 1, '\0');
        DLPG_ASSERT_OK(c.api, c.api->group_flight_record(c.group, &rec[0], rec.size(), &len));
        EXPECT_NE(rec.find("op=dlpg_recv dtype=float32 count=" + std::to_string(numel) +
                           " devices=cpu peer=any"), std::string::npos) << rec;
      }
      DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));
    });
  }
}

TEST_P(P2PAnySource, NoSenderTimesOutNamingAnyRank) {
  RankParam p = GetParam();
  RunOptions o;
  o.group_timeout_s = 2;
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    if (c.rank != 0) return;
    HostTensor r(DT::F32, {16});
    int src = -7;
    dlpg_status_t s = c.api->recv_any(c.group, r.dl(), 3, &src, nullptr);
    EXPECT_EQ(s, DLPG_ERR_TIMEOUT) << c.api->last_error();
    EXPECT_NE(std::string(c.api->last_error()).find("any rank"), std::string::npos)
        << c.api->last_error();
    EXPECT_EQ(src, -7);
  }, o);
}

// Receives from any source and named receives of one tag, interleaved: each message is
// taken once, a named receive takes only its peer's, and each sender's messages go to the
// receives in issue order (the receive issued first gets the sender's first message). One
// sender (the last rank) sends nothing on that tag at first, so the probes of its pair wait
// unconnected; it sends later, to a named receive, which must still get its message.
TEST_P(P2PAnySource, NamedAndAnyInterleaved) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    const int tag = 4, kMsgs = 2, numel = 5000;  // one inline size would do; this is streamed
    const int late = c.size - 1, early = c.size - 2;  // early >= 1 (3 ranks at least)
    const std::string go = c.name + "/late-go";
    if (c.rank != 0) {
      if (c.rank == late) {  // only after rank 0 has taken every other message
        size_t len = 0;
        DLPG_ASSERT_OK(c.api, c.api->store_get(c.store, go.c_str(), 60, nullptr, 0, &len));
      }
      for (int k = 0; k < kMsgs; k++) {
        HostTensor t(DT::I32, {numel});
        Generate(DT::I32, DLPG_SUM, MsgSeed(c.seed, k), c.rank, t.elems(), numel);
        DLPG_ASSERT_OK(c.api, c.api->send(c.group, t.dl(), 0, tag, nullptr, nullptr));
      }
    } else {
      // The receives of the first round: any, a named one from `early`, then any again,
      // enough for every message of ranks 1..late-1.
      const int n = kMsgs * (c.size - 2);
      std::vector<HostTensor> r;
      std::vector<dlpg_work_t *> w(n, nullptr);
      std::vector<int> named(n, DLPG_ANY_SOURCE);
      named[1 % n] = early;
      r.reserve(n);
      for (int i = 0; i < n; i++) {
        r.emplace_back(DT::I32, std::vector<int64_t>{numel});
        DLPG_ASSERT_OK(c.api, c.api->recv(c.group, r[i].dl(), named[i], tag, nullptr, &w[i]));
      }
      std::vector<int> next(c.size, 0);
      for (int i = 0; i < n; i++) {  // issue order: each sender's messages in order
        ASSERT_EQ(c.api->work_wait(w[i], 0), DLPG_OK) << c.api->work_error(w[i]);
        int src = -1;
        DLPG_ASSERT_OK(c.api, c.api->work_source(w[i], &src));
        c.api->work_free(w[i]);
        if (named[i] != DLPG_ANY_SOURCE) {
          EXPECT_EQ(src, named[i]) << "receive #" << i;
        }
        ASSERT_GE(src, 1);
        ASSERT_LT(src, late) << "receive #" << i << " matched the rank that has not sent yet";
        std::vector<uint8_t> want(r[i].nbytes() + 1);
        Generate(DT::I32, DLPG_SUM, MsgSeed(c.seed, next[src]), src, want.data(), numel);
        EXPECT_EQ("", Compare(DT::I32, DLPG_SUM, r[i].elems(), want.data(), numel))
            << "receive #" << i << ": rank " << src << "'s message " << next[src];
        next[src]++;
      }
      DLPG_ASSERT_OK(c.api, c.api->store_set(c.store, go.c_str(), "1", 1));
      // The late rank's messages: a named receive, then one from any source.
      for (int k = 0; k < kMsgs; k++) {
        HostTensor t(DT::I32, {numel});
        int src = late;
        if (k == 0) DLPG_ASSERT_OK(c.api, c.api->recv(c.group, t.dl(), late, tag, nullptr, nullptr));
        else DLPG_ASSERT_OK(c.api, c.api->recv_any(c.group, t.dl(), tag, &src, nullptr));
        EXPECT_EQ(src, late);
        std::vector<uint8_t> want(t.nbytes() + 1);
        Generate(DT::I32, DLPG_SUM, MsgSeed(c.seed, k), late, want.data(), numel);
        EXPECT_EQ("", Compare(DT::I32, DLPG_SUM, t.elems(), want.data(), numel))
            << "rank " << late << "'s message " << k;
      }
    }
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));
  });
}

// An abort wakes a receive from any source that nobody sends to, and its work completes.
TEST_P(P2PAnySource, AbortWakesIt) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    std::string key = c.name + "/abort-done";
    if (c.rank != 0) {  // idle until rank 0 is done
      size_t len = 0;
      c.api->store_get(c.store, key.c_str(), 30, nullptr, 0, &len);
      return;
    }
    HostTensor t(DT::F32, {64});
    dlpg_work_t *w = nullptr;
    DLPG_ASSERT_OK(c.api, c.api->recv(c.group, t.dl(), DLPG_ANY_SOURCE, 2, nullptr, &w));
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      c.api->group_abort(c.group);
    });
    EXPECT_EQ(c.api->work_wait(w, 0), DLPG_ERR_ABORTED) << c.api->last_error();
    aborter.join();
    double t0 = NowSeconds();
    int done = 0;
    while (!done && NowSeconds() - t0 < 5) c.api->work_test(w, &done);
    EXPECT_EQ(done, 1) << "the aborted receive's work did not complete";
    int src = -7;
    EXPECT_EQ(c.api->work_source(w, &src), DLPG_ERR_INVALID_ARGUMENT);
    c.api->work_free(w);
    c.api->store_set(c.store, key.c_str(), "1", 1);
  });
}

TEST_P(P2PAnySource, SendRefusesAnySource) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    HostTensor t(DT::F32, {4});
    EXPECT_EQ(c.api->send(c.group, t.dl(), DLPG_ANY_SOURCE, 0, nullptr, nullptr),
              DLPG_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(c.api->last_error()).find("peer is -1"), std::string::npos)
        << c.api->last_error();
  });
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Ranks, P2PAnySource, ::testing::ValuesIn(StandardRankParams()),
                         RankParamName);
