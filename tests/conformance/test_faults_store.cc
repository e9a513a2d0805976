// Fault injection, part 2 (see test_faults.cc): the store process killed before and after
// the rendezvous; dlpg_group_abort from another thread while an operation is blocked and
// while the first operation creates the CPU context; the work's state after such a wait.
#include <signal.h>
#include <unistd.h>

#include <thread>

#include "faults_util.h"

using namespace dlpgt;

namespace {

constexpr double kTimeout = 3.0;
constexpr double kSlack = 1.0;  // within the group's timeout + 1 s

// The store process is killed after the groups are created, before the first operation
// (which needs the store for the rendezvous): every rank fails within the bound naming the
// store. Killed after the rendezvous: operations go on (they do not use the store).
void StoreGone(int trial, bool before) {
  Trial t;
  RunTrial(2, UniqueName(), 40, [before](FaultRank &c) {
    dlpg_group_t *g = JoinTrialGroup(c, kTimeout);
    if (!g) return;
    if (!before) TimedAllreduce(c, g, 1000, "warm");
    c.Mark("ready");
    // The parent kills the store now; give it time to be gone.
    usleep(500000);
    TimedAllreduce(c, g, 100000, "op");
    TimedDestroy(c, g, "destroy_secs");
  }, [](Trial &t) {
    t.WaitMark(0, "ready", 20);
    t.WaitMark(1, "ready", 20);
    kill(t.store_pid, SIGKILL);
  }, &t);
  RecordOutcome(before ? "store-gone-before-rendezvous" : "store-gone-after-rendezvous", trial,
                t, {0, 1}, "op");
  for (int r = 0; r < 2; r++) {
    const RankOutcome &o = t.out[r];
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(o.Get("join"), "ok");
    if (before) {
      EXPECT_NE(o.Get("op_st"), "DLPG_OK");
      EXPECT_NE(o.Get("op_st"), "");
      EXPECT_LT(o.Secs("op_secs"), Scaled(kTimeout + kSlack));
      EXPECT_NE(o.Get("op_msg").find("store"), std::string::npos) << o.Get("op_msg");
    } else {
      EXPECT_EQ(o.Get("op_st"), "DLPG_OK") << o.Get("op_msg");
    }
    EXPECT_GE(o.Secs("destroy_secs"), 0);
    EXPECT_LT(o.Secs("destroy_secs"), Scaled(2.0));
    EXPECT_EQ(o.exit_code, 0);
  }
}

TEST(FaultsStore, StoreGoneBeforeRendezvous) {
  for (int i = 0; i < TrialCount(2); i++) StoreGone(i, true);
}
TEST(FaultsStore, StoreGoneAfterRendezvous) {
  for (int i = 0; i < TrialCount(2); i++) StoreGone(i, false);
}

// Rank 0 blocks in an allreduce that rank 1 does not join (warm: in the operation; cold: in
// the first operation's rendezvous); another thread aborts after 0.3 s. The wait returns
// ABORTED promptly, the work then says done with the same message, and
// destroy is prompt.
void AbortBlocked(int trial, bool warm) {
  Trial t;
  RunTrial(2, UniqueName(), 40, [warm](FaultRank &c) {
    dlpg_group_t *g = JoinTrialGroup(c, kTimeout);
    if (!g) return;
    if (warm) TimedAllreduce(c, g, 1000, "warm");
    if (c.rank == 1) {
      WaitKey(c, c.name + "/test/done", 30);
      c.api->group_destroy(g);
      return;
    }
    HostTensor x(DT::F32, {1000});
    DLTensor *xp = x.dl();
    dlpg_work_t *w = nullptr;
    dlpg_status_t s = c.api->allreduce(g, &xp, nullptr, 1, DLPG_SUM, nullptr, &w);
    if (s != DLPG_OK) {
      c.Put("op_st", c.api->status_name(s));
      c.Put("op_msg", c.api->last_error());
      return;
    }
    std::thread aborter([&] {
      usleep(300000);
      c.api->group_abort(g);
    });
    double t0 = NowSeconds();
    s = c.api->work_wait(w, 0);
    char secs[32];
    snprintf(secs, sizeof secs, "%.3f", NowSeconds() - t0);
    c.Put("op_st", c.api->status_name(s));
    c.Put("op_secs", secs);
    c.Put("op_msg", c.api->last_error());
    aborter.join();
    int done = -1;
    c.api->work_test(w, &done);
    c.Put("work_done", std::to_string(done));
    c.Put("work_error", c.api->work_error(w));
    c.api->work_free(w);
    TimedDestroy(c, g, "destroy_secs");
    SetKey(c, c.name + "/test/done");
  }, nullptr, &t);
  RecordOutcome(warm ? "abort-during-blocked-op" : "abort-during-creation", trial, t, {0}, "op");
  const RankOutcome &o = t.out[0];
  EXPECT_EQ(o.Get("op_st"), "DLPG_ERR_ABORTED") << o.Get("op_msg");
  EXPECT_LT(o.Secs("op_secs"), std::min(Scaled(2.5), 0.95 * kTimeout));  // the abort at 0.3 s
  EXPECT_EQ(o.Get("work_done"), "1");
  EXPECT_EQ(o.Get("work_error"), o.Get("op_msg"));
  EXPECT_GE(o.Secs("destroy_secs"), 0);
  EXPECT_LT(o.Secs("destroy_secs"), Scaled(2.0));
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(t.out[1].exit_code, 0);
}

TEST(FaultsStore, AbortDuringBlockedOperation) {
  for (int i = 0; i < TrialCount(2); i++) AbortBlocked(i, true);
}
TEST(FaultsStore, AbortDuringLazyCreation) {
  for (int i = 0; i < TrialCount(2); i++) AbortBlocked(i, false);
}

}  // namespace
