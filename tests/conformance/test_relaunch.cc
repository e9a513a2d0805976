// Relaunch under one group name on a long-lived store (a dlpg-store process, a Redis
// server): a job that failed -- a rank that never came, a rank lost mid-operation, ranks that
// made different numbers of groups of the name -- must leave nothing a later job reads.
// Every later job runs with a lagging rank, so that its operations block long enough (well
// over the watcher's 0.2 s) for the ranks to read the failure records of their job: an
// earlier job's record read there would abort it. Ranks are forked processes on the real
// store on 127.0.0.1; each trial's outcome is printed as a RELAUNCH line (docs/reliability.md).
#include <unistd.h>

#include <cstdio>

#include "faults_util.h"
#include "redis_server.h"

using namespace dlpgt;

namespace {

constexpr int kRanks = 3;

dlpg_group_t *MakeGroup(FaultRank &c, double timeout_s) {
  dlpg_store_t *s = nullptr;
  if (c.api->store_open(c.url.c_str(), Scaled(30), &s) != DLPG_OK) {
    c.Put("fail", std::string("store_open: ") + c.api->last_error());
    return nullptr;
  }
  dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
  o.timeout_s = timeout_s;
  o.name = c.name.c_str();
  dlpg_group_t *g = nullptr;
  dlpg_status_t st = c.api->group_create(s, c.rank, c.size, &o, &g);
  c.api->store_close(s);
  if (st != DLPG_OK) c.Put("fail", std::string("group_create: ") + c.api->last_error());
  return st == DLPG_OK ? g : nullptr;
}

// A healthy job: every rank makes the group; `lagger` sleeps 0.5 s before the first and the
// third of 4 allreduces (random per-rank data, sums checked), so its peers block. Reports
// "ok" = 1 when all passed (and returns true), else "fail" = the first failure's message.
bool HealthyJob(FaultRank &c, int lagger) {
  dlpg_group_t *g = MakeGroup(c, Scaled(30));
  if (!g) return false;
  for (int i = 0; i < 4; i++) {
    if (c.rank == lagger && (i == 0 || i == 2)) usleep(500 * 1000);
    if (TimedAllreduce(c, g, 1 + 97 * i, "op") != DLPG_OK) {
      c.Put("fail", "allreduce " + std::to_string(i) + ": " + c.api->last_error());
      c.api->group_destroy(g);
      return false;
    }
  }
  c.api->group_destroy(g);
  c.Put("ok", "1");
  return true;
}

// Job A: ranks 0 and 1 make the group and allreduce; rank 2 never starts. Both must fail.
void MissingRankJob(FaultRank &c) {
  if (c.rank == 2) return;
  dlpg_group_t *g = MakeGroup(c, Scaled(1.5));
  if (!g) return;
  c.Put("a_st", c.api->status_name(TimedAllreduce(c, g, 8, "op")));
  c.api->group_destroy(g);
}

std::string Describe(const Trial &t) {
  std::string s;
  for (int r = 0; r < static_cast<int>(t.out.size()); r++) {
    const RankOutcome &o = t.out[r];
    s += " rank " + std::to_string(r) + ": " +
         (o.Get("ok") == "1" ? "ok" : "FAILED " + o.Get("fail") + " " + o.Get("op_msg") + " " +
                                          o.Get("killed"));
  }
  return s;
}

// Job B `trials` times under the name of a failed job A; each must pass on every rank.
int RelaunchTrials(const std::string &url, const std::string &name, int trials, int lagger,
                   const char *what) {
  int passed = 0;
  for (int i = 0; i < trials; i++) {
    Trial t;
    RunTrial(kRanks, name, Scaled(90), [&](FaultRank &c) { HealthyJob(c, lagger); }, nullptr,
             &t, url);
    bool ok = true;
    for (int r = 0; r < kRanks; r++) ok = ok && t.out[r].Get("ok") == "1";
    EXPECT_TRUE(ok) << what << " relaunch " << i << ":" << Describe(t);
    passed += ok;
  }
  printf("RELAUNCH %s: %d of %d relaunches passed (lagging rank %d)\n", what, passed, trials,
         lagger);
  return passed;
}

void MissingRankThenRelaunch(const std::string &url, const char *what) {
  const std::string name = UniqueName("relaunch");
  Trial a;
  RunTrial(kRanks, name, Scaled(60), MissingRankJob, nullptr, &a, url);
  for (int r = 0; r < 2; r++)
    EXPECT_NE(a.out[r].Get("a_st"), "DLPG_OK") << "job A rank " << r << " passed without rank 2";
  int n = TrialCount(5);
  EXPECT_EQ(RelaunchTrials(url, name, n, 0, what), n);
  EXPECT_EQ(RelaunchTrials(url, name, n, 2, what), n);
}

struct StoreProcess {
  pid_t pid = -1;
  int port = -1;
  StoreProcess() { pid = SpawnStore(&port); }
  ~StoreProcess() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  std::string Url() const { return "tcp://127.0.0.1:" + std::to_string(port); }
};

}  // namespace

TEST(Relaunch, AfterAMissingRankTcpStore) {
  StoreProcess store;
  ASSERT_GT(store.port, 0);
  MissingRankThenRelaunch(store.Url(), "tcp store, after a rank that never came");
}

TEST(Relaunch, AfterAMissingRankRedis) {
  SKIP_WITHOUT_REDIS();
  dlpg_redis::Redis redis;
  ASSERT_GT(redis.pid, 0);
  MissingRankThenRelaunch(redis.Url(), "redis, after a rank that never came");
}

// One process per rank retries under the name: ranks 0 and 1 make the group, fail without
// rank 2 (not there yet), destroy it and make it again, now with rank 2, which has made no
// group of that name before; three rounds in the same processes.
TEST(Relaunch, InProcessRetry) {
  StoreProcess store;
  ASSERT_GT(store.port, 0);
  const std::string name = UniqueName("retry");
  Trial t;
  RunTrial(kRanks, name, Scaled(120), [&](FaultRank &c) {
    int passed = 0;
    for (int round = 0; round < 3; round++) {
      if (c.rank != 2) {
        dlpg_group_t *g = MakeGroup(c, Scaled(1.0));
        if (!g) return;
        if (TimedAllreduce(c, g, 8, "a") == DLPG_OK) c.Put("fail", "passed without rank 2");
        c.api->group_destroy(g);
      }
      // Rank 2 comes once ranks 0 and 1 have failed: the flag key of this round.
      std::string flag = name + "/test/failed/" + std::to_string(round) + "/";
      if (c.rank != 2) SetKey(c, flag + std::to_string(c.rank));
      else for (int r = 0; r < 2; r++) WaitKey(c, flag + std::to_string(r), Scaled(60));
      passed += HealthyJob(c, round % kRanks);
    }
    c.Put("passed", std::to_string(passed));
  }, nullptr, &t, store.Url());
  for (int r = 0; r < kRanks; r++)
    EXPECT_EQ(t.out[r].Get("passed"), "3") << "rank " << r << ": " << t.out[r].Get("fail") << " "
                                           << t.out[r].Get("op_msg") << t.out[r].Get("killed");
}

// Rank 0 keeps its failed group (and the thread that admits ranks to its job) open while
// rank 1 makes the group again and knocks: a job admits a rank once, so rank 1 joins rank
// 0's next job instead of the failed one, where it would find its own earlier claim ("two
// processes claim rank 1").
TEST(Relaunch, RankMakingTheGroupAgainJoinsTheNextJob) {
  StoreProcess store;
  ASSERT_GT(store.port, 0);
  const std::string name = UniqueName("failedjob");
  const std::string knocking = name + "/test/knocking", flag = name + "/test/failed/";
  Trial t;
  RunTrial(kRanks, name, Scaled(120), [&](FaultRank &c) {
    if (c.rank != 2) {
      dlpg_group_t *g = MakeGroup(c, Scaled(1.0));
      if (!g) return;
      if (TimedAllreduce(c, g, 8, "a") == DLPG_OK) c.Put("fail", "passed without rank 2");
      if (c.rank == 0) {
        // Rank 1 re-posts its hello every 0.5 s while it waits: the old job sees it.
        WaitKey(c, knocking, Scaled(60));
        usleep(1500 * 1000);
      }
      c.api->group_destroy(g);
      SetKey(c, flag + std::to_string(c.rank));
      if (c.rank == 1) SetKey(c, knocking);
    } else {
      for (int r = 0; r < 2; r++) WaitKey(c, flag + std::to_string(r), Scaled(60));
    }
    c.Put("passed", HealthyJob(c, -1) ? "1" : "0");
  }, nullptr, &t, store.Url());
  for (int r = 0; r < kRanks; r++)
    EXPECT_EQ(t.out[r].Get("passed"), "1") << "rank " << r << ": " << t.out[r].Get("fail");
}

// Rank 1 knocks again, from a second group of its own, after it joined rank 0's job (which
// still waits for rank 2, so its admitting thread runs): the job does not admit it twice,
// and when no next job comes its timeout says that rank 0's job already holds a rank 1.
TEST(Relaunch, RankKnockingTwiceIsToldTheJobHoldsIt) {
  StoreProcess store;
  ASSERT_GT(store.port, 0);
  const std::string name = UniqueName("twice");
  const std::string done = name + "/test/second-done";
  Trial t;
  RunTrial(kRanks, name, Scaled(60), [&](FaultRank &c) {
    if (c.rank == 2) {
      WaitKey(c, done, Scaled(60));
      return;
    }
    dlpg_group_t *g = MakeGroup(c, Scaled(1.0));
    if (!g) return;
    c.Put("first", c.api->status_name(TimedAllreduce(c, g, 8, "a")));
    if (c.rank == 1) {
      dlpg_store_t *s = nullptr;
      dlpg_group_t *g2 = nullptr;
      dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
      o.timeout_s = Scaled(2);
      o.name = c.name.c_str();
      if (c.api->store_open(c.url.c_str(), Scaled(30), &s) == DLPG_OK &&
          c.api->group_create(s, 1, kRanks, &o, &g2) == DLPG_OK) {
        c.Put("second", c.api->status_name(TimedAllreduce(c, g2, 8, "b")));
        c.Put("second_msg", c.api->last_error());
        c.api->group_destroy(g2);
      }
      if (s) c.api->store_close(s);
      SetKey(c, done);
    } else {
      WaitKey(c, done, Scaled(60));  // rank 0's group (and its job's thread) stays meanwhile
    }
    c.api->group_destroy(g);
  }, nullptr, &t, store.Url());
  // Its own timeout or rank 0's, whichever was recorded first.
  EXPECT_NE(t.out[1].Get("first"), "DLPG_OK");
  EXPECT_EQ(t.out[1].Get("second"), "DLPG_ERR_TIMEOUT") << t.out[1].Get("second_msg");
  EXPECT_NE(t.out[1].Get("second_msg").find("rank 0's job"), std::string::npos)
      << t.out[1].Get("second_msg");
  EXPECT_NE(t.out[1].Get("second_msg").find("already holds a rank 1"), std::string::npos)
      << t.out[1].Get("second_msg");
}

// Job A loses rank 1 in the middle of its second allreduce (it exits); the survivors fail.
// Then jobs under the same name pass.
TEST(Relaunch, AfterAFailureMidOperation) {
  StoreProcess store;
  ASSERT_GT(store.port, 0);
  const std::string name = UniqueName("midop");
  Trial a;
  RunTrial(kRanks, name, Scaled(60), [&](FaultRank &c) {
    dlpg_group_t *g = MakeGroup(c, Scaled(3));
    if (!g) return;
    if (TimedAllreduce(c, g, 64, "first") != DLPG_OK) return;
    if (c.rank == 1) {
      usleep(300 * 1000);  // the others are blocked in the second one by now
      _exit(3);
    }
    c.Put("a_st", c.api->status_name(TimedAllreduce(c, g, 64, "op")));
    c.api->group_destroy(g);
  }, nullptr, &a, store.Url());
  for (int r : {0, 2})
    EXPECT_NE(a.out[r].Get("a_st"), "DLPG_OK") << "job A rank " << r;
  int n = TrialCount(5);
  EXPECT_EQ(RelaunchTrials(store.Url(), name, n, 1, "tcp store, after a rank lost mid-operation"), n);
}

// Ranks that made different numbers of groups of one name before (rank 0 three, rank 1
// one, rank 2 none; made and destroyed without an operation) still meet in the next one.
TEST(Relaunch, RanksOfDifferentGroupCounts) {
  StoreProcess store;
  ASSERT_GT(store.port, 0);
  const std::string name = UniqueName("counts");
  Trial t;
  RunTrial(kRanks, name, Scaled(90), [&](FaultRank &c) {
    int earlier = c.rank == 0 ? 3 : c.rank == 1 ? 1 : 0;
    for (int i = 0; i < earlier; i++) {
      dlpg_group_t *g = MakeGroup(c, Scaled(30));
      if (!g) return;
      c.api->group_destroy(g);
    }
    HealthyJob(c, 2);
  }, nullptr, &t, store.Url());
  for (int r = 0; r < kRanks; r++)
    EXPECT_EQ(t.out[r].Get("ok"), "1") << Describe(t);
}
