// Faults in the uneven collectives: a peer that never calls dlpg_alltoallv (alive, idle) and
// a peer killed (SIGKILL) in the middle of a large one. Ranks are processes over the real
// TCP store (faults_util.h); every survivor must end within the group's timeout + 1 s with
// an error naming the operation (and, killed, the rank), as test_faults.cc's collectives do.
#include <signal.h>
#include <unistd.h>

#include <thread>

#include "faults_util.h"

using namespace dlpgt;

namespace {

constexpr double kTimeout = 3.0;
constexpr double kSlack = 1.0;

// An alltoallv with skewed blocks (rank 0 sends 4x): `per` elements of float32 per block on
// the others. Records <p>_st, <p>_secs and <p>_msg as TimedAllreduce does.
dlpg_status_t TimedAlltoallv(FaultRank &c, dlpg_group_t *g, int64_t per, const std::string &p,
                             const std::function<void()> &at_call = nullptr) {
  std::vector<int64_t> sc(static_cast<size_t>(c.size)), rc(static_cast<size_t>(c.size));
  for (int j = 0; j < c.size; j++) {
    sc[static_cast<size_t>(j)] = c.rank == 0 ? 4 * per : per;
    rc[static_cast<size_t>(j)] = j == 0 ? 4 * per : per;
  }
  int64_t st = 0, rt = 0;
  for (int j = 0; j < c.size; j++) st += sc[static_cast<size_t>(j)], rt += rc[static_cast<size_t>(j)];
  HostTensor in(DT::F32, {st}), out(DT::F32, {rt});
  in.Fill(1);
  if (at_call) at_call();
  double t0 = NowSeconds();
  dlpg_status_t s = c.api->alltoallv(g, in.dl(), sc.data(), nullptr, out.dl(), rc.data(), nullptr,
                                     nullptr, nullptr);
  c.Put(p + "_st", c.api->status_name(s));
  c.Put(p + "_secs", std::to_string(NowSeconds() - t0));
  if (s != DLPG_OK) c.Put(p + "_msg", c.api->last_error());
  return s;
}

void ExpectEnded(const Trial &t, const std::vector<int> &survivors,
                 const std::vector<std::string> &names) {
  for (int r : survivors) {
    const RankOutcome &o = t.out[r];
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(o.Get("warm_st"), "DLPG_OK") << o.Get("warm_msg");
    EXPECT_NE(o.Get("op_st"), "");
    EXPECT_NE(o.Get("op_st"), "DLPG_OK");
    EXPECT_LT(o.Secs("op_secs"), Scaled(kTimeout + kSlack)) << o.Get("op_msg");
    std::string msg = o.Get("op_msg");
    for (const auto &n : names) EXPECT_NE(msg.find(n), std::string::npos) << "lacks \"" << n << "\": " << msg;
    EXPECT_EQ(o.exit_code, 0);
  }
}

TEST(FaultsVColl, PeerSkipsAlltoallv) {
  Trial t;
  RunTrial(3, UniqueName(), 40, [](FaultRank &c) {
    dlpg_group_t *g = JoinTrialGroup(c, kTimeout);
    if (!g) return;
    TimedAlltoallv(c, g, 100, "warm");
    if (c.rank == 2) {  // alive, but never calls the next alltoallv
      WaitKey(c, c.name + "/test/survivors-done", 30);
      c.api->group_destroy(g);
      return;
    }
    TimedAlltoallv(c, g, 100, "op");
    SetKey(c, c.name + "/test/survivors-done");
    TimedDestroy(c, g, "destroy_secs");
  }, nullptr, &t);
  RecordOutcome("peer-skips-alltoallv", 0, t, {0, 1}, "op");
  ExpectEnded(t, {0, 1}, {"alltoallv"});
  // The first survivor to give up timed out naming the rank that never came.
  int named = 0;
  for (int r : {0, 1}) named += t.out[r].Get("op_msg").find("rank 2") != std::string::npos;
  EXPECT_GT(named, 0);
}

TEST(FaultsVColl, PeerKilledMidAlltoallv) {
  Trial t;
  RunTrial(3, UniqueName(), 40, [](FaultRank &c) {
    dlpg_group_t *g = JoinTrialGroup(c, kTimeout);
    if (!g) return;
    TimedAlltoallv(c, g, 100, "warm");
    // 10 ms into a call that moves ~100 MiB: the others are in the operation too.
    TimedAlltoallv(c, g, int64_t{1} << 22, "op", [&c] {
      if (c.rank == 2)
        std::thread([] {
          usleep(10000);
          raise(SIGKILL);
        }).detach();
    });
    TimedDestroy(c, g, "destroy_secs");
  }, nullptr, &t);
  RecordOutcome("kill-mid-alltoallv", 0, t, {0, 1}, "op");
  EXPECT_EQ(t.out[2].signal, SIGKILL);
  ExpectEnded(t, {0, 1}, {"rank 2", "alltoallv"});
}

}  // namespace
