// A failed send or receive is the group's failure: rank 1 is SIGKILLed 10 ms into a
// 256 MiB receive from rank 0 (blocking, or posted with a work handle and waited for). Rank
// 0's transfer fails naming rank 1; rank 2, which meanwhile waits in the group's first
// barrier, and rank 0's own next barrier must then fail with DLPG_ERR_REMOTE naming rank 1
// and the transfer (peer and tag) within about a second, not at the group's deadline
// blaming healthy rank 0, and never with an abort nobody called. Runs on shared memory and
// on Gloo (faults.cmake).
#include <signal.h>
#include <unistd.h>

#include <thread>

#include "faults_util.h"

using namespace dlpgt;

namespace {

constexpr double kTimeout = 10.0;    // the group's: far above what propagation may take
constexpr double kPropagate = 4.0;   // "about a second", on a loaded 2-core machine
constexpr int64_t kBig = 1 << 26;    // float32 elements (256 MiB): a transfer that lasts

void TimedBarrier(FaultRank &c, dlpg_group_t *g, const std::string &p) {
  double t0 = NowSeconds();
  dlpg_status_t s = c.api->barrier(g, nullptr);
  char secs[32];
  snprintf(secs, sizeof secs, "%.3f", NowSeconds() - t0);
  c.Put(p + "_st", c.api->status_name(s));
  c.Put(p + "_secs", secs);
  if (s != DLPG_OK) c.Put(p + "_msg", c.api->last_error());
}

void ExpectNamed(const RankOutcome &o, const std::string &p, double bound) {
  SCOPED_TRACE(p);
  EXPECT_EQ(o.Get(p + "_st"), "DLPG_ERR_REMOTE") << o.Get(p + "_msg");
  double secs = o.Secs(p + "_secs");
  EXPECT_GE(secs, 0);
  EXPECT_LT(secs, Scaled(bound)) << o.Get(p + "_msg");
  std::string msg = o.Get(p + "_msg");
  for (const char *n : {"rank 1", "tag 7"})
    EXPECT_NE(msg.find(n), std::string::npos) << "lacks \"" << n << "\": " << msg;
  // Nobody called dlpg_group_abort, and rank 0 did its part.
  EXPECT_EQ(msg.find("dlpg_group_abort"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("did not say whether"), std::string::npos) << msg;
}

void KillReceiver(bool async) {
  Trial t;
  RunTrial(3, UniqueName(), 60, [async](FaultRank &c) {
    dlpg_group_t *g = JoinTrialGroup(c, kTimeout);
    if (!g) return;
    if (c.rank == 2) {
      TimedBarrier(c, g, "op");
      TimedDestroy(c, g, "destroy_secs");
      return;
    }
    // A small transfer first connects the pair, so the kill lands in the big one.
    HostTensor w(DT::F32, {16});
    DLTensor *wp = w.dl();
    dlpg_status_t s = c.rank == 0 ? c.api->send(g, wp, 1, 6, nullptr, nullptr)
                                  : c.api->recv(g, wp, 0, 6, nullptr, nullptr);
    c.Put("warm_p2p", s == DLPG_OK ? "ok" : c.api->last_error());
    HostTensor x(DT::F32, {kBig});
    DLTensor *xp = x.dl();
    if (c.rank == 1) {
      std::thread([] {
        usleep(10000);
        raise(SIGKILL);
      }).detach();
      c.api->recv(g, xp, 0, 7, nullptr, nullptr);
      for (;;) pause();  // the kill is on its way
    }
    double t0 = NowSeconds();
    if (async) {
      dlpg_work_t *wk = nullptr;
      s = c.api->send(g, xp, 1, 7, &wk, nullptr);
      if (s == DLPG_OK) {
        s = c.api->work_wait(wk, 0);
        c.api->work_free(wk);
      }
    } else {
      s = c.api->send(g, xp, 1, 7, nullptr, nullptr);
    }
    char secs[32];
    snprintf(secs, sizeof secs, "%.3f", NowSeconds() - t0);
    c.Put("send_st", c.api->status_name(s));
    c.Put("send_secs", secs);
    if (s != DLPG_OK) c.Put("send_msg", c.api->last_error());
    TimedBarrier(c, g, "next");
    TimedDestroy(c, g, "destroy_secs");
  }, nullptr, &t);
  EXPECT_EQ(t.out[1].signal, SIGKILL);
  const RankOutcome &r0 = t.out[0], &r2 = t.out[2];
  EXPECT_EQ(r0.Get("warm_p2p"), "ok");
  EXPECT_NE(r0.Get("send_st"), "DLPG_OK");
  EXPECT_NE(r0.Get("send_msg").find("rank 1"), std::string::npos) << r0.Get("send_msg");
  printf("FAULT p2p-kill-receiver%s: rank 0 %s after %s s: %s\n", async ? " (async)" : "",
         r0.Get("send_st").c_str(), r0.Get("send_secs").c_str(), r0.Get("send_msg").c_str());
  printf("  rank 0 next barrier %s after %s s: %s\n", r0.Get("next_st").c_str(),
         r0.Get("next_secs").c_str(), r0.Get("next_msg").c_str());
  printf("  rank 2 barrier %s after %s s: %s\n", r2.Get("op_st").c_str(),
         r2.Get("op_secs").c_str(), r2.Get("op_msg").c_str());
  ExpectNamed(r0, "next", 3.0);
  ExpectNamed(r2, "op", kPropagate);
  for (int r : {0, 2}) {
    EXPECT_LT(t.out[r].Secs("destroy_secs"), Scaled(2.0)) << "rank " << r;
    EXPECT_EQ(t.out[r].exit_code, 0) << "rank " << r;
  }
}

}  // namespace

TEST(FaultsP2p, ReceiverKilledMidRecvNamedToTheGroup_Propagation) { KillReceiver(false); }
TEST(FaultsP2p, ReceiverKilledMidAsyncRecvNamedToTheGroup_Propagation) { KillReceiver(true); }
