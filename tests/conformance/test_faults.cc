// Fault injection: a peer killed (SIGKILL) in the middle of an allreduce, during
// the lazy creation of the CPU context and in the middle of a send; a peer stopped
// (SIGSTOP); a peer that skips a collective; rank 0 late; every rank of a group killed.
// Ranks are processes that meet through the real TCP store (its own process) on 127.0.0.1;
// see faults_util.h. Every survivor must return within the group's timeout + 1 s with an
// error that names the failing rank and the operation, destroy its group promptly, and a
// fresh group (also one under the same name on the same store) must work afterwards. Each
// trial prints a "FAULT ..." line with the measured time to detect (docs/reliability.md).
// The suite runs once per host-memory backend (faults.cmake: the default choice for ranks
// of one host, shared memory, and Gloo forced by DLPG_CPU_BACKEND); the expectations are
// what a user of either gets, and each trial checks from the flight record that its
// collectives ran on the backend the run is for. Tests named *Propagation* hold the
// expectations of failure propagation (peers end within about a second naming the failed
// rank).
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "faults_util.h"

using namespace dlpgt;

namespace {

constexpr double kTimeout = 3.0;   // the groups' timeout
constexpr double kSlack = 1.0;     // the allowance after it
constexpr int64_t kBig = 1 << 24;  // elements of float32 (64 MiB): an allreduce that lasts

// The victim: after delay_s in another thread, send sig to this process.
void SignalSelfAfter(int sig, double delay_s) {
  std::thread([sig, delay_s] {
    usleep(static_cast<useconds_t>(delay_s * 1e6));
    raise(sig);
  }).detach();
}

// What every survivor does after its failed operation: destroy, then a fresh group of the
// survivors under a new name and one under the trial's own name.
void AfterFailure(FaultRank &c, dlpg_group_t *g, int new_rank, int survivors) {
  TimedDestroy(c, g, "destroy_secs");
  CheckFreshGroup(c, new_rank, survivors, c.name + "-fresh", "fresh", kTimeout + 5);
  CheckFreshGroup(c, new_rank, survivors, c.name, "samename", kTimeout + 5);
}

// The collectives a rank ran (warm-up, fresh groups) ran on the backend this run of the
// cases is for (ctest's test_faults or test_faults_gloo): the suite must not pass on the
// other one unnoticed.
void ExpectBackend(const RankOutcome &o) {
  int seen = 0;
  for (const char *k : {"warm_backend", "fresh_op_backend", "samename_op_backend"}) {
    if (o.Get(k).empty()) continue;
    seen++;
    EXPECT_EQ(o.Get(k), ExpectedCpuBackend()) << k;
  }
  EXPECT_GT(seen, 0) << "no collective of this rank succeeded: which backend ran is unknown";
}

// The survivors' checks: a failure within timeout + slack whose message holds every string
// of `names`, a prompt destroy, working fresh groups.
void ExpectSurvived(const Trial &t, const std::vector<int> &survivors, const std::string &op,
                    std::vector<std::string> names, double bound = kTimeout + kSlack,
                    bool fresh = true) {
  for (int r : survivors) {
    const RankOutcome &o = t.out[r];
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(o.Get("join"), "ok");
    ExpectBackend(o);
    EXPECT_NE(o.Get(op + "_st"), "") << "no result: " << o.Get("killed");
    EXPECT_NE(o.Get(op + "_st"), "DLPG_OK");
    double secs = o.Secs(op + "_secs");
    EXPECT_GE(secs, 0);
    EXPECT_LT(secs, Scaled(bound)) << o.Get(op + "_msg");
    std::string msg = o.Get(op + "_msg");
    EXPECT_NE(msg, "");
    for (const auto &n : names) EXPECT_NE(msg.find(n), std::string::npos) << "lacks \"" << n << "\": " << msg;
    EXPECT_GE(o.Secs("destroy_secs"), 0);
    EXPECT_LT(o.Secs("destroy_secs"), Scaled(2.0));
    if (fresh) {
      EXPECT_EQ(o.Get("fresh"), "ok") << o.Get("fresh_op_msg");
      EXPECT_EQ(o.Get("samename"), "ok") << o.Get("samename_op_msg");
    }
    EXPECT_EQ(o.exit_code, 0);
  }
}

// ---------------------------------------------------------------- SIGKILL

void KillMidAllreduce(int trial, bool strict) {
  Trial t;
  RunTrial(3, UniqueName(), 40, [](FaultRank &c) {
    dlpg_group_t *g = JoinTrialGroup(c, kTimeout);
    if (!g) return;
    TimedAllreduce(c, g, 1000, "warm");
    // 10 ms into its call, once its input is ready: the others are in the operation too.
    TimedAllreduce(c, g, kBig, "op", [&c] {
      if (c.rank == 2) SignalSelfAfter(SIGKILL, 0.01);
    });
    AfterFailure(c, g, c.rank, 2);
  }, nullptr, &t);
  RecordOutcome("kill-mid-allreduce", trial, t, {0, 1}, "op");
  EXPECT_EQ(t.out[2].signal, SIGKILL);
  ExpectSurvived(t, {0, 1}, "op", {"rank 2", "allreduce"}, strict ? 1.5 : kTimeout + kSlack);
}

TEST(Faults, PeerKilledMidAllreduce) {
  for (int i = 0; i < TrialCount(2); i++) KillMidAllreduce(i, false);
}
TEST(Faults, PeerKilledMidAllreduce_Propagation) {
  for (int i = 0; i < TrialCount(2); i++) KillMidAllreduce(i, true);
}

// The victim dies while the first CPU operation creates the group's CPU context (after the
// group's creation, before or during its rendezvous or segment setup): the survivors' first
// operation names it. Where that creation is quicker than the victim's delay (shared memory
// takes about a millisecond) the first operation may complete before the kill lands; the
// victim then waits to be killed, and the survivors' next operation must name it instead.
void KillDuringCreation(int trial, double delay_s, int victim = 2) {
  Trial t;
  RunTrial(3, UniqueName(), 40, [delay_s, victim](FaultRank &c) {
    dlpg_group_t *g = JoinTrialGroup(c, kTimeout);
    if (!g) return;
    if (c.rank == victim) {
      if (delay_s <= 0) raise(SIGKILL);
      SignalSelfAfter(SIGKILL, delay_s);
    }
    if (TimedAllreduce(c, g, 1000, "op") == DLPG_OK) {
      if (c.rank == victim) {
        for (;;) pause();  // the kill is on its way
      }
      c.Put("op_retried", "1");
      TimedAllreduce(c, g, 1000, "op");
    }
    AfterFailure(c, g, c.rank < victim ? c.rank : c.rank - 1, 2);
  }, nullptr, &t);
  std::vector<int> survivors;
  for (int r = 0; r < 3; r++)
    if (r != victim) survivors.push_back(r);
  RecordOutcome(std::string(delay_s <= 0 ? "kill-before-creation" : "kill-during-creation") +
                    (victim == 0 ? " (rank 0)" : ""), trial, t, survivors, "op");
  if (t.out[survivors[0]].Get("op_retried") == "1")
    printf("FAULT (trial %d: the first operation completed before the kill)\n", trial);
  EXPECT_EQ(t.out[victim].signal, SIGKILL);
  if (delay_s <= 0) {
    for (int r : survivors) EXPECT_EQ(t.out[r].Get("op_retried"), "") << "rank " << r;
  }
  ExpectSurvived(t, survivors, "op", {"rank " + std::to_string(victim), "allreduce"});
}

TEST(Faults, PeerKilledBeforeLazyCreation) {
  for (int i = 0; i < TrialCount(2); i++) KillDuringCreation(i, 0);
}
TEST(Faults, PeerKilledDuringLazyCreation) {
  for (int i = 0; i < TrialCount(2); i++) KillDuringCreation(i, 0.002 * (i + 1));
}
// Rank 0 (Gloo's rendezvous root, the shared segment's maker) made the group and died.
TEST(Faults, RankZeroKilledBeforeLazyCreation) {
  for (int i = 0; i < TrialCount(1); i++) KillDuringCreation(i, 0, 0);
}

// A 256 MiB send (about 0.1 s on loopback) whose sender (or receiver) is killed 10 ms in:
// the survivor fails naming it (Gloo itself does not wake a receive whose data was arriving:
// the island's watchdog, gloo/peers.h, does). A small send first connects the pair, so the
// kill lands in the transfer, not in the pair's setup.
void KillMidSend(int trial, int victim) {
  Trial t;
  RunTrial(2, UniqueName(), 40, [victim](FaultRank &c) {
    dlpg_group_t *g = JoinTrialGroup(c, kTimeout);
    if (!g) return;
    TimedAllreduce(c, g, 1000, "warm");
    HostTensor w(DT::F32, {16});
    DLTensor *wp = w.dl();
    dlpg_status_t s = c.rank == 0 ? c.api->send(g, wp, 1, 6, nullptr, nullptr)
                                  : c.api->recv(g, wp, 0, 6, nullptr, nullptr);
    c.Put("warm_p2p", s == DLPG_OK ? "ok" : c.api->last_error());
    HostTensor x(DT::F32, {4 * kBig});
    DLTensor *xp = x.dl();
    if (c.rank == victim) SignalSelfAfter(SIGKILL, 0.01);
    double t0 = NowSeconds();
    s = c.rank == 0 ? c.api->send(g, xp, 1, 7, nullptr, nullptr)
                    : c.api->recv(g, xp, 0, 7, nullptr, nullptr);
    char secs[32];
    snprintf(secs, sizeof secs, "%.3f", NowSeconds() - t0);
    c.Put("op_st", c.api->status_name(s));
    c.Put("op_secs", secs);
    if (s != DLPG_OK) c.Put("op_msg", c.api->last_error());
    AfterFailure(c, g, 0, 1);
  }, nullptr, &t);
  int survivor = 1 - victim;
  RecordOutcome(victim == 0 ? "kill-sender-mid-send" : "kill-receiver-mid-send", trial, t,
                {survivor}, "op");
  EXPECT_EQ(t.out[victim].signal, SIGKILL);
  EXPECT_EQ(t.out[survivor].Get("warm_p2p"), "ok");
  ExpectSurvived(t, {survivor}, "op",
                 {"rank " + std::to_string(victim), survivor == 0 ? "send" : "recv"});
}

TEST(Faults, SenderKilledMidSend) {
  for (int i = 0; i < TrialCount(2); i++) KillMidSend(i, 0);
}
TEST(Faults, ReceiverKilledMidSend) {
  for (int i = 0; i < TrialCount(2); i++) KillMidSend(i, 1);
}

// ---------------------------------------------------------------- SIGSTOP, skip, late

// A peer stopped (SIGSTOP) stop_after_s into an allreduce that the others call others_late_s
// after it: alive, connected, silent. The survivors time out, naming it with every string
// of names; the parent kills the stopped rank once they are done.
void StopInAllreduce(const char *fault, int trial, double others_late_s, double stop_after_s,
                     const std::vector<std::string> &names) {
  Trial t;
  RunTrial(3, UniqueName(), 40, [=](FaultRank &c) {
    dlpg_group_t *g = JoinTrialGroup(c, kTimeout);
    if (!g) return;
    TimedAllreduce(c, g, 1000, "warm");
    if (c.rank != 2 && others_late_s > 0) usleep(static_cast<useconds_t>(others_late_s * 1e6));
    TimedAllreduce(c, g, kBig, "op", [&c, stop_after_s] {
      if (c.rank == 2) SignalSelfAfter(SIGSTOP, stop_after_s);
    });
    c.Mark("done");
    AfterFailure(c, g, c.rank, 2);
  }, [](Trial &t) {
    t.WaitMark(0, "done", 30);
    t.WaitMark(1, "done", 30);
    kill(t.pids[2], SIGKILL);
  }, &t);
  RecordOutcome(fault, trial, t, {0, 1}, "op");
  ExpectSurvived(t, {0, 1}, "op", names);
}

// 10 ms into a call all ranks made together: before or after its progress record shows the
// call, both named.
TEST(Faults, PeerStoppedMidAllreduce) {
  for (int i = 0; i < TrialCount(2); i++)
    StopInAllreduce("sigstop-mid-allreduce", i, 0, 0.01, {"rank 2", "allreduce"});
}

// While it waits inside the allreduce, the others 1.5 s late: its record shows it inside
// and is no longer rewritten, so the others' timeout names it as possibly stopped.
TEST(Faults, PeerStoppedWhileWaitingInAllreduce) {
  StopInAllreduce("sigstop-waiting-in-allreduce", 0, 1.5, 0.8,
                  {"rank 2", "reached coll_seq 2", "may be stopped"});
}

// A peer that skips one collective (alive, idle): the others time out within the bound.
// The flight recorder names the rank that did not reach the operation.
void SkipCollective(int trial, bool strict) {
  Trial t;
  RunTrial(3, UniqueName(), 40, [](FaultRank &c) {
    dlpg_group_t *g = JoinTrialGroup(c, kTimeout);
    if (!g) return;
    TimedAllreduce(c, g, 1000, "warm");
    if (c.rank == 2) {
      WaitKey(c, c.name + "/test/survivors-done", 30);
      c.api->group_destroy(g);
      return;
    }
    TimedAllreduce(c, g, 1000, "op");
    SetKey(c, c.name + "/test/survivors-done");
    AfterFailure(c, g, c.rank, 2);
  }, nullptr, &t);
  RecordOutcome("peer-skips-collective", trial, t, {0, 1}, "op");
  // The first survivor to give up timed out; the other may end with its record (REMOTE).
  int timeouts = 0;
  for (int r : {0, 1}) timeouts += t.out[r].Get("op_st") == "DLPG_ERR_TIMEOUT";
  EXPECT_GT(timeouts, 0);
  if (strict) ExpectSurvived(t, {0, 1}, "op", {"rank 2", "allreduce"}, kTimeout + kSlack, false);
  else ExpectSurvived(t, {0, 1}, "op", {"allreduce"}, kTimeout + kSlack, false);
}

TEST(Faults, PeerSkipsCollective) {
  for (int i = 0; i < TrialCount(2); i++) SkipCollective(i, false);
}
TEST(Faults, PeerSkipsCollectiveNamed_Propagation) {
  for (int i = 0; i < TrialCount(1); i++) SkipCollective(i, true);
}

// Rank 0 late within the timeout: everything works. Later than the timeout: the others'
// first operation fails within the bound naming rank 0.
TEST(Faults, RankZeroLate) {
  for (double late : {1.5, kTimeout + 1.5}) {
    Trial t;
    RunTrial(3, UniqueName(), 40, [late](FaultRank &c) {
      if (c.rank == 0) usleep(static_cast<useconds_t>(late * 1e6));
      dlpg_group_t *g = JoinTrialGroup(c, kTimeout);
      if (!g) return;
      TimedAllreduce(c, g, 1000, "op");
      c.api->group_destroy(g);
    }, nullptr, &t);
    if (late < kTimeout) {
      RecordOutcome("rank0-late-1.5s", 0, t, {0, 1, 2}, "op");
      for (int r = 0; r < 3; r++) EXPECT_EQ(t.out[r].Get("op_st"), "DLPG_OK") << t.out[r].Get("op_msg");
    } else {
      RecordOutcome("rank0-later-than-timeout", 0, t, {1, 2}, "op");
      for (int r = 1; r < 3; r++) {
        // The first to time out records it; the other may end first with that record
        // (failure propagation), which names rank 0 too.
        const std::string st = t.out[r].Get("op_st");
        EXPECT_TRUE(st == "DLPG_ERR_TIMEOUT" || st == "DLPG_ERR_REMOTE") << st;
        EXPECT_LT(t.out[r].Secs("op_secs"), Scaled(kTimeout + kSlack));
        EXPECT_NE(t.out[r].Get("op_msg").find("rank 0"), std::string::npos) << t.out[r].Get("op_msg");
      }
    }
  }
}

}  // namespace

// ---------------------------------------------------------------- nothing left behind

namespace {

// The socket inodes among pid's descriptors.
std::set<std::string> SocketInodes(pid_t pid) {
  std::set<std::string> out;
  std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR *d = opendir(dir.c_str());
  if (!d) return out;
  while (struct dirent *e = readdir(d)) {
    char link[128];
    ssize_t n = readlink((dir + "/" + e->d_name).c_str(), link, sizeof link - 1);
    if (n <= 0) continue;
    link[n] = '\0';
    std::string l(link);
    if (l.rfind("socket:[", 0) == 0) out.insert(l.substr(8, l.size() - 9));
  }
  closedir(d);
  return out;
}

// Abstract Unix socket names (without the '@') of dlpg's shared-memory rendezvous bound in
// this network namespace, with their inodes (/proc/net/unix: ... Inode Path).
std::multimap<std::string, std::string> DlpgAbstractSockets() {
  std::multimap<std::string, std::string> out;
  std::ifstream f("/proc/net/unix");
  std::string line;
  std::getline(f, line);  // the header
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string num, ref, proto, flags, type, st, inode, path;
    if (!(in >> num >> ref >> proto >> flags >> type >> st >> inode >> path)) continue;
    if (path.rfind("@dlpg", 0) == 0) out.emplace(path.substr(1), inode);
  }
  return out;
}

// Entries of /dev/shm whose name mentions dlpg.
std::vector<std::string> DevShmDlpg() {
  std::vector<std::string> out;
  if (DIR *d = opendir("/dev/shm")) {
    while (struct dirent *e = readdir(d))
      if (strstr(e->d_name, "dlpg")) out.push_back(e->d_name);
    closedir(d);
  }
  return out;
}

bool MapsDlpgMemfd(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(f, line))
    if (line.find("memfd:dlpg") != std::string::npos) return true;
  return false;
}

// The names of the abstract sockets some descriptor of pids holds.
std::set<std::string> SocketsOf(const std::vector<pid_t> &pids) {
  std::set<std::string> inodes, names;
  for (pid_t p : pids)
    for (const auto &i : SocketInodes(p)) inodes.insert(i);
  for (const auto &s : DlpgAbstractSockets())
    if (inodes.count(s.second)) names.insert(s.first);
  return names;
}

}  // namespace

// kill -9 of every rank of a shared-memory group leaves nothing: neither while rank 0
// listens on its rendezvous socket for a rank that has not come (the socket's name is gone
// from /proc/net/unix), nor while all ranks have the segment mapped in an operation (its
// memory has no name anywhere: nothing in /dev/shm). Gloo makes neither (skipped there).
TEST(Faults, EveryRankKilledLeavesNothing) {
  if (ExpectedCpuBackend() != "shm") GTEST_SKIP() << "the shared-memory backend's resources";
  ASSERT_EQ(DevShmDlpg(), std::vector<std::string>{});
  for (bool mid_op : {false, true}) {
    SCOPED_TRACE(mid_op ? "every rank in an operation" : "rank 0 serving the segment");
    Trial t;
    std::set<std::string> socks;
    bool mapped = true;
    RunTrial(3, UniqueName(), 40, [mid_op](FaultRank &c) {
      // A long timeout: rank 0 keeps serving the segment until the parent kills it.
      dlpg_group_t *g = JoinTrialGroup(c, 30);
      if (!g) return;
      if (mid_op) {
        TimedAllreduce(c, g, 1000, "warm");
        c.Mark("warm");
        for (;;) TimedAllreduce(c, g, 1 << 20, "op");
      }
      c.Mark("joined");
      if (c.rank == 2) {
        // Joins the group's job and says where it runs (an asynchronous receive its peer
        // never answers), so the others choose shm and rank 0 serves the segment, but never
        // comes to the collective.
        HostTensor t(DT::F32, {4});
        dlpg_work_t *w = nullptr;
        c.api->recv(g, t.dl(), 1, 99, nullptr, &w);
        WaitKey(c, c.name + "/test/never", 30);
        return;
      }
      TimedAllreduce(c, g, 1000, "op");
    }, [&](Trial &t) {
      const char *mark = mid_op ? "warm" : "joined";
      for (int r = 0; r < 3; r++) t.WaitMark(r, mark, Scaled(20));
      if (mid_op) {
        for (int r = 0; r < 3; r++) mapped = mapped && MapsDlpgMemfd(t.pids[r]);
      } else {
        // Rank 0 listens from its first operation on, until every rank fetched the segment.
        double end = NowSeconds() + Scaled(10);
        while ((socks = SocketsOf({t.pids[0]})).empty() && NowSeconds() < end) usleep(10000);
      }
      for (int r = 0; r < 3; r++) kill(t.pids[r], SIGKILL);
    }, &t);
    for (int r = 0; r < 3; r++) EXPECT_EQ(t.out[r].signal, SIGKILL) << "rank " << r;
    if (mid_op) {
      for (int r = 0; r < 3; r++) EXPECT_EQ(t.out[r].Get("warm_backend"), "shm") << "rank " << r;
      EXPECT_TRUE(mapped) << "a rank had no memfd:dlpg mapping in its operation";
    } else {
      ASSERT_FALSE(socks.empty()) << "rank 0 was never seen listening on an abstract dlpg socket";
    }
    for (const auto &s : DlpgAbstractSockets())
      EXPECT_EQ(socks.count(s.first), 0u) << "@" << s.first << " outlived its ranks";
    EXPECT_EQ(DevShmDlpg(), std::vector<std::string>{});
  }
}
