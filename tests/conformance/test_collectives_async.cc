// Small collectives issued asynchronously (with a work handle), as a host overlapping its
// compute issues them: every kind on random per-rank data against its reference, many
// outstanding then waited for in reverse order, a rank that computes for a while after
// issuing (its op completes without it: its peers finish, its own work reaches done in the
// flight recorder before it waits), a work wait that times out naming the missing rank, an
// abort from another thread while an op is outstanding, and destroy with outstanding works.
// On one host these take the shared-memory backend's eager path (posted on the caller's
// thread, finished by whoever gets there first); with DLPG_CPU_BACKEND=gloo the same tests
// run through the group's worker thread.
#include <unistd.h>

#include <atomic>
#include <deque>
#include <thread>

#include "harness.h"

using namespace dlpgt;

namespace {

// One outstanding operation and what checks it when done.
struct Pending {
  dlpg_work_t *work = nullptr;
  std::string what;
  std::function<void()> check;
};

// Issue one async op of every kind (and of every root for the rooted ones) on n elements,
// appending to v; tensors live in keep (a deque: the checks hold references into it).
void IssueEveryKind(RankCtx &c, size_t n, uint64_t seed, std::deque<HostTensor> &keep,
                    std::vector<Pending> &v) {
  auto tensor = [&](DT dt, size_t numel) -> HostTensor & {
    keep.emplace_back(dt, std::vector<int64_t>{static_cast<int64_t>(numel)});
    keep.back().Fill(0x5A);
    return keep.back();
  };
  int k = 0;
  // w: where the call wrote the handle (read after the call, whatever the order in which
  // the arguments are evaluated).
  auto add = [&](const std::string &what, dlpg_status_t s, dlpg_work_t *const *w,
                 std::function<void()> check) {
    EXPECT_EQ(s, DLPG_OK) << what << ": " << c.api->status_name(s) << ": " << c.api->last_error();
    if (s == DLPG_OK) v.push_back({*w, what, std::move(check)});
  };
  const struct {
    DT dt;
    dlpg_reduce_op_t op;
  } reds[] = {{DT::F32, DLPG_SUM}, {DT::I64, DLPG_MAX}, {DT::BF16, DLPG_AVG}, {DT::U8, DLPG_BXOR}};
  for (auto r : reds) {
    if (!ReduceSupported(c.api, r.dt, r.op)) continue;
    uint64_t s = Mix(seed, k++);
    HostTensor &in = tensor(r.dt, n);
    Generate(r.dt, r.op, s, c.rank, in.elems(), n);
    DLTensor *ip = in.dl();
    dlpg_work_t *w = nullptr;
    std::string what = std::string("allreduce ") + Info(r.dt).name + " " + OpName(r.op);
    add(what, c.api->allreduce(c.group, &ip, nullptr, 1, r.op, nullptr, &w), &w, [&c, &in, r, s, n, what] {
      auto want = ReducedReference(r.dt, r.op, s, c.size, n, 0, n);
      EXPECT_EQ("", Compare(r.dt, r.op, in.elems(), want.data(), n)) << what;
    });
  }
  for (int root = 0; root < c.size; root++) {
    uint64_t s = Mix(seed, k++);
    HostTensor &in = tensor(DT::I32, n), &out = tensor(DT::I32, n);
    Generate(DT::I32, DLPG_MIN, s, c.rank, in.elems(), n);
    DLTensor *ip = in.dl(), *opp = out.dl();
    dlpg_work_t *w = nullptr;
    std::string what = "reduce min root " + std::to_string(root);
    add(what, c.api->reduce(c.group, &ip, &opp, 1, DLPG_MIN, root, nullptr, &w), &w,
        [&c, &out, root, s, n, what] {
          if (c.rank != root) return;
          auto want = ReducedReference(DT::I32, DLPG_MIN, s, c.size, n, 0, n);
          EXPECT_EQ("", Compare(DT::I32, DLPG_MIN, out.elems(), want.data(), n)) << what;
        });
    s = Mix(seed, k++);
    HostTensor &b = tensor(DT::F64, n), &bo = tensor(DT::F64, n);
    Generate(DT::F64, DLPG_SUM, s, c.rank, b.elems(), n);
    DLTensor *bp = b.dl(), *bop = bo.dl();
    what = "broadcast root " + std::to_string(root);
    add(what, c.api->broadcast(c.group, &bp, &bop, 1, root, nullptr, &w), &w,
        [&bo, root, s, n, what] {
          std::vector<uint8_t> want(n * 8 + 1);
          Generate(DT::F64, DLPG_SUM, s, root, want.data(), n);
          EXPECT_EQ("", Compare(DT::F64, DLPG_SUM, bo.elems(), want.data(), n)) << what;
        });
  }
  {
    uint64_t s = Mix(seed, k++);
    HostTensor &in = tensor(DT::U16, n), &out = tensor(DT::U16, n * c.size);
    Generate(DT::U16, DLPG_SUM, s, c.rank, in.elems(), n);
    DLTensor *ip = in.dl(), *opp = out.dl();
    dlpg_work_t *w = nullptr;
    add("allgather", c.api->allgather(c.group, &ip, &opp, 1, nullptr, &w), &w, [&c, &out, s, n] {
      std::vector<uint8_t> want(c.size * n * 2 + 1);
      for (int r = 0; r < c.size; r++) Generate(DT::U16, DLPG_SUM, s, r, want.data() + r * n * 2, n);
      EXPECT_EQ("", Compare(DT::U16, DLPG_SUM, out.elems(), want.data(), c.size * n)) << "allgather";
    });
  }
  {
    uint64_t s = Mix(seed, k++);
    size_t total = n * c.size;
    HostTensor &in = tensor(DT::F16, total), &out = tensor(DT::F16, n);
    Generate(DT::F16, DLPG_SUM, s, c.rank, in.elems(), total);
    DLTensor *ip = in.dl(), *opp = out.dl();
    dlpg_work_t *w = nullptr;
    add("reduce_scatter", c.api->reduce_scatter(c.group, &ip, &opp, 1, DLPG_SUM, nullptr, &w), &w,
        [&c, &out, s, n, total] {
          auto want = ReducedReference(DT::F16, DLPG_SUM, s, c.size, total, c.rank * n, n);
          EXPECT_EQ("", Compare(DT::F16, DLPG_SUM, out.elems(), want.data(), n)) << "reduce_scatter";
        });
  }
  {
    uint64_t s = Mix(seed, k++);
    size_t total = n * c.size;
    HostTensor &in = tensor(DT::I8, total), &out = tensor(DT::I8, total);
    Generate(DT::I8, DLPG_SUM, s, c.rank, in.elems(), total);
    dlpg_work_t *w = nullptr;
    add("alltoall", c.api->alltoall(c.group, in.dl(), out.dl(), nullptr, &w), &w,
        [&c, &out, s, n, total] {
          auto all = AllInputs(DT::I8, DLPG_SUM, s, c.size, total);
          std::vector<uint8_t> want(total + 1);
          for (int i = 0; i < c.size; i++) memcpy(want.data() + i * n, all[i].data() + c.rank * n, n);
          EXPECT_EQ("", Compare(DT::I8, DLPG_SUM, out.elems(), want.data(), total)) << "alltoall";
        });
  }
  dlpg_work_t *w = nullptr;
  add("barrier", c.api->barrier(c.group, &w), &w, [] {});
}

void WaitAndCheck(RankCtx &c, std::vector<Pending> &v, bool reverse) {
  for (size_t j = 0; j < v.size(); j++) {
    Pending &p = v[reverse ? v.size() - 1 - j : j];
    DLPG_EXPECT_OK(c.api, c.api->work_wait(p.work, 0));
    EXPECT_STREQ(c.api->work_error(p.work), "") << p.what;
  }
  for (Pending &p : v) {
    p.check();
    c.api->work_free(p.work);
  }
  v.clear();
}

class AsyncCollectives : public ::testing::TestWithParam<RankParam> {};

// Every kind, small, each round issued back to back (many outstanding) and waited for in
// reverse order, then one at a time (issued and waited for at once, the latency case).
TEST_P(AsyncCollectives, EveryKindSmall) {
  RankParam p = GetParam();
  RunRanks(p.mode, p.n, [&](RankCtx &c) {
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));  // the group's first op
    uint64_t ci = 0;
    for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(1000)}) {
      std::deque<HostTensor> keep;
      std::vector<Pending> v;
      IssueEveryKind(c, n, Mix(c.seed, ci++), keep, v);
      WaitAndCheck(c, v, true);
    }
    for (int i = 0; i < 40; i++) {
      std::deque<HostTensor> keep;
      std::vector<Pending> v;
      IssueEveryKind(c, 1 + i % 5, Mix(c.seed, ci++), keep, v);
      for (Pending &pd : v) {
        if (i % 2) {
          int done = 0;
          double end = NowSeconds() + Scaled(30);
          while (!done && NowSeconds() < end) DLPG_ASSERT_OK(c.api, c.api->work_test(pd.work, &done));
          EXPECT_EQ(done, 1) << pd.what;
        }
        DLPG_EXPECT_OK(c.api, c.api->work_wait(pd.work, 0));
      }
      WaitAndCheck(c, v, false);
    }
  });
}

std::vector<RankParam> AsyncParams() {
  return {{Mode::kThreads, 2, false}, {Mode::kProcesses, 2, false}, {Mode::kProcesses, 3, false}};
}

INSTANTIATE_TEST_SUITE_P(Ranks, AsyncCollectives, ::testing::ValuesIn(AsyncParams()),
                         RankParamName);

// The flight recorder's line of coll_seq `seq` on this rank ("" when there is none).
std::string FlightLine(RankCtx &c, int seq) {
  std::vector<char> buf(1 << 16);
  size_t len = 0;
  if (c.api->group_flight_record(c.group, buf.data(), buf.size(), &len) != DLPG_OK) return "";
  std::string all(buf.data()), key = "coll_seq=" + std::to_string(seq) + " ";
  size_t at = all.find(key);
  if (at == std::string::npos) return "";
  size_t end = all.find('\n', at);
  return all.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

// Wait (a condition, not a fixed pause) until key is set in the store.
void WaitKey(RankCtx &c, const std::string &key, double timeout_s) {
  std::string k = c.name + "/" + key;
  const char *kp = k.c_str();
  DLPG_EXPECT_OK(c.api, c.api->store_wait(c.store, &kp, 1, timeout_s));
}
void SetKey(RankCtx &c, const std::string &key) {
  std::string k = c.name + "/" + key;
  DLPG_EXPECT_OK(c.api, c.api->store_set(c.store, k.c_str(), "1", 1));
}

// Rank 0 issues an allreduce and then computes (calls nothing of dlpg) until rank 1 has
// finished the same allreduce with a blocking call: rank 1 must not need rank 0's later
// calls. Rank 0's op then completes without a wait or test (its flight recorder line says
// done), and its result is right.
TEST(AsyncCollectivesProgress, IssuerComputesWhilePeersFinish) {
  RunRanks(Mode::kProcesses, 2, [&](RankCtx &c) {
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));  // coll_seq 1
    const size_t n = 333;
    HostTensor t(DT::I64, {static_cast<int64_t>(n)});
    Generate(DT::I64, DLPG_SUM, c.seed, c.rank, t.elems(), n);
    DLTensor *tp = t.dl();
    if (c.rank == 0) {
      dlpg_work_t *w = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, &w));
      // "Compute": only the store's own calls until rank 1 is through.
      WaitKey(c, "r1done", Scaled(60));
      std::string line;
      double end = NowSeconds() + Scaled(20);
      while (NowSeconds() < end) {
        line = FlightLine(c, 2);
        if (line.find("state=done") != std::string::npos) break;
        usleep(2000);
      }
      EXPECT_NE(line.find("op=dlpg_allreduce"), std::string::npos) << line;
      EXPECT_NE(line.find("state=done"), std::string::npos)
          << "the operation did not complete while nobody waited for it: " << line;
      DLPG_EXPECT_OK(c.api, c.api->work_wait(w, 0));
      c.api->work_free(w);
    } else {
      DLPG_EXPECT_OK(c.api, c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr));
      SetKey(c, "r1done");
    }
    auto want = ReducedReference(DT::I64, DLPG_SUM, c.seed, c.size, n, 0, n);
    EXPECT_EQ("", Compare(DT::I64, DLPG_SUM, t.elems(), want.data(), n)) << "rank " << c.rank;
    // The group is still in step.
    DLPG_EXPECT_OK(c.api, c.api->barrier(c.group, nullptr));
  });
}

// A wait shorter than the group's timeout on an op rank 1 never joins: DLPG_ERR_TIMEOUT
// naming rank 1, within its bound; rank 1's later op then fails too, naming rank 0.
TEST(AsyncCollectivesProgress, WaitTimeoutNamesTheMissingRank) {
  RunRanks(Mode::kProcesses, 2, [&](RankCtx &c) {
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));
    HostTensor t(DT::F32, {8});
    Generate(DT::F32, DLPG_SUM, c.seed, c.rank, t.elems(), 8);
    DLTensor *tp = t.dl();
    if (c.rank == 0) {
      dlpg_work_t *w = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, &w));
      double t0 = NowSeconds();
      dlpg_status_t s = c.api->work_wait(w, 1.0);
      double el = NowSeconds() - t0;
      std::string msg = c.api->last_error();
      EXPECT_EQ(s, DLPG_ERR_TIMEOUT) << c.api->status_name(s) << ": " << msg;
      EXPECT_GE(el, 0.9);
      EXPECT_LT(el, Scaled(6.0));
      EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
      EXPECT_EQ(c.api->work_wait(w, 1.0), DLPG_ERR_TIMEOUT);  // the first result stays
      EXPECT_NE(std::string(c.api->work_error(w)).find("rank 1"), std::string::npos);
      c.api->work_free(w);
      SetKey(c, "r0timedout");
    } else {
      WaitKey(c, "r0timedout", Scaled(60));
      double t0 = NowSeconds();
      dlpg_status_t s = c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr);
      std::string msg = c.api->last_error();
      EXPECT_NE(s, DLPG_OK);
      EXPECT_LT(NowSeconds() - t0, Scaled(10.0));
      EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
    }
  });
}

// dlpg_group_abort from another thread while an op rank 1 never joins is outstanding: the
// waiter (or, when nobody waits, the next wait) returns DLPG_ERR_ABORTED promptly, and the
// peer's later op fails naming rank 0.
void AbortOutstanding(bool waiting) {
  RunRanks(Mode::kProcesses, 2, [&](RankCtx &c) {
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));
    HostTensor t(DT::I32, {16});
    Generate(DT::I32, DLPG_SUM, c.seed, c.rank, t.elems(), 16);
    DLTensor *tp = t.dl();
    if (c.rank == 0) {
      dlpg_work_t *w = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, &w));
      std::atomic<bool> aborted{false};
      std::thread ab([&] {
        usleep(200 * 1000);
        c.api->group_abort(c.group);
        aborted = true;
      });
      if (!waiting) ab.join();
      double t0 = NowSeconds();
      dlpg_status_t s = c.api->work_wait(w, 0);  // the group's timeout (60 s)
      double el = NowSeconds() - t0;
      if (waiting) ab.join();
      EXPECT_TRUE(aborted.load());
      EXPECT_EQ(s, DLPG_ERR_ABORTED) << c.api->status_name(s) << ": " << c.api->last_error();
      EXPECT_LT(el, Scaled(waiting ? 5.0 : 2.0));
      int done = 0;
      DLPG_EXPECT_OK(c.api, c.api->work_test(w, &done));
      EXPECT_EQ(done, 1);
      c.api->work_free(w);
      // Later ops of the aborted group fail at once.
      EXPECT_EQ(c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr),
                DLPG_ERR_ABORTED);
      SetKey(c, "r0aborted");
    } else {
      WaitKey(c, "r0aborted", Scaled(60));
      double t0 = NowSeconds();
      dlpg_status_t s = c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr);
      std::string msg = c.api->last_error();
      EXPECT_NE(s, DLPG_OK);
      EXPECT_LT(NowSeconds() - t0, Scaled(10.0));
      EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
    }
  });
}

TEST(AsyncCollectivesAbort, FromAnotherThreadWhileWaiting) { AbortOutstanding(true); }
TEST(AsyncCollectivesAbort, FromAnotherThreadWhileNobodyWaits) { AbortOutstanding(false); }

// Destroy with outstanding works on every rank: the operations complete (the handles stay
// valid after the destroy and report success), with the right results.
TEST(AsyncCollectivesDestroy, WithOutstandingWorks) {
  RunRanks(Mode::kProcesses, 2, [&](RankCtx &c) {
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));
    std::deque<HostTensor> keep;
    std::vector<Pending> v;
    IssueEveryKind(c, 5, Mix(c.seed, 1), keep, v);
    DLPG_EXPECT_OK(c.api, c.api->group_destroy(c.group));
    c.group = nullptr;
    WaitAndCheck(c, v, true);
  });
}

// Destroy while the peer never joins the outstanding op: the destroy ends within the
// group's timeout (3 s) plus its abort's grace, and the work reports a failure.
TEST(AsyncCollectivesDestroy, WhilePeerNeverJoins) {
  RunOptions ro;
  ro.group_timeout_s = 3;
  ro.deadline_s = 90;
  RunRanks(Mode::kProcesses, 2, [&](RankCtx &c) {
    DLPG_ASSERT_OK(c.api, c.api->barrier(c.group, nullptr));
    HostTensor t(DT::F64, {4});
    Generate(DT::F64, DLPG_SUM, c.seed, c.rank, t.elems(), 4);
    DLTensor *tp = t.dl();
    if (c.rank == 0) {
      dlpg_work_t *w = nullptr;
      DLPG_ASSERT_OK(c.api, c.api->allreduce(c.group, &tp, nullptr, 1, DLPG_SUM, nullptr, &w));
      double t0 = NowSeconds();
      c.api->group_destroy(c.group);
      c.group = nullptr;
      EXPECT_LT(NowSeconds() - t0, Scaled(3.0 + 8.0));
      int done = 0;
      DLPG_EXPECT_OK(c.api, c.api->work_test(w, &done));
      EXPECT_EQ(done, 1) << "a work outstanding at destroy did not end with it";
      dlpg_status_t s = c.api->work_wait(w, 1.0);
      EXPECT_NE(s, DLPG_OK);
      EXPECT_STRNE(c.api->work_error(w), "");
      c.api->work_free(w);
      SetKey(c, "r0destroyed");
    } else {
      WaitKey(c, "r0destroyed", Scaled(60));
    }
  }, ro);
}

}  // namespace
