// A member of a child in an area of its parent's segment (shm/pool.h) that dies or never
// comes before the child's first operation: the other members' first operation on the
// child ends within the child's deadline and names it -- the child's rank 0 (which claims
// the area: the others look for its claim) or another member (whose pid the area's rank
// blocks carry from the parent's segment). Forked rank processes on the plugin's TCP store
// (faults_util.h); the parent group has run a collective, so it has its segment.
#include <signal.h>
#include <unistd.h>

#include <string>

#include "faults_util.h"

using namespace dlpgt;

namespace {

constexpr double kChildTimeout = 3.0;

// The child is [1, 2, 0] of a 3-rank parent: child rank victim (parent rank members[victim])
// is killed (kill) or idles past the child's deadline; the others run an allreduce on it.
void MemberMissing(int victim, bool kill) {
  static const int members[3] = {1, 2, 0};
  Trial t;
  RunTrial(3, UniqueName(), 40, [victim, kill](FaultRank &c) {
    dlpg_group_t *g = JoinTrialGroup(c, 60);
    if (!g) return;
    if (c.api->barrier(g, nullptr) != DLPG_OK) {
      c.Put("parent", c.api->last_error());
      return;
    }
    c.Put("parent", "ok");
    dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
    o.timeout_s = kChildTimeout;
    dlpg_group_t *child = nullptr;
    int m[3] = {members[0], members[1], members[2]};
    if (c.api->group_create_subset(g, 3, m, &o, &child) != DLPG_OK) {
      c.Put("subset", c.api->last_error());
      return;
    }
    int crank = c.rank == 1 ? 0 : c.rank == 2 ? 1 : 2;
    if (crank == victim) {
      if (kill) raise(SIGKILL);
      usleep(static_cast<useconds_t>((kChildTimeout + 3) * 1e6));  // never comes in time
      c.api->group_destroy(child);
      c.api->group_destroy(g);
      return;
    }
    HostTensor x(DT::F32, {4});
    DLTensor *xp = x.dl();
    double t0 = NowSeconds();
    dlpg_status_t s = c.api->allreduce(child, &xp, nullptr, 1, DLPG_SUM, nullptr, nullptr);
    c.Put("op_secs", std::to_string(NowSeconds() - t0));
    c.Put("op_st", c.api->status_name(s));
    c.Put("op_msg", c.api->last_error());
    c.api->group_destroy(child);
    c.api->group_destroy(g);
  }, nullptr, &t);
  for (int r = 0; r < 3; r++) {
    int crank = r == 1 ? 0 : r == 2 ? 1 : 2;
    if (crank == victim) continue;
    const RankOutcome &o = t.out[r];
    EXPECT_EQ(o.Get("parent"), "ok") << "rank " << r;
    std::string msg = o.Get("op_msg");
    fprintf(stderr, "[subteam] victim %d%s: parent rank %d: %s: %s (%.2f s)\n", victim,
            kill ? " killed" : " idle", r, o.Get("op_st").c_str(), msg.c_str(), o.Secs("op_secs"));
    EXPECT_NE(o.Get("op_st"), "DLPG_OK") << "rank " << r;
    EXPECT_NE(o.Get("op_st"), "") << "rank " << r << ": no result";
    EXPECT_LT(o.Secs("op_secs"), Scaled(kChildTimeout + 5)) << msg;
    EXPECT_NE(msg.find("rank " + std::to_string(victim)), std::string::npos) << msg;
    if (kill) {
      EXPECT_NE(msg.find("died"), std::string::npos) << msg;
    } else {
      EXPECT_NE(msg.find("within"), std::string::npos) << msg;
    }
  }
}

TEST(SubteamFaults, RankZeroKilledBeforeTheClaim) { MemberMissing(0, true); }
TEST(SubteamFaults, MemberKilledBeforeItCame) { MemberMissing(1, true); }
TEST(SubteamFaults, RankZeroNeverComes) { MemberMissing(0, false); }
TEST(SubteamFaults, MemberNeverComes) { MemberMissing(2, false); }

}  // namespace
