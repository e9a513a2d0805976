// Stall warnings and trace files: a rank that stalls before a collective is named in one
// WARN by each waiting rank before the group's deadline (DLPG_STALL_WARN_S); the log goes to
// DLPG_DEBUG_FILE with %h and %p expanded, or to stderr with one line when that file cannot
// be opened; a killed rank's survivors write their flight records as JSON into
// DLPG_FLIGHT_RECORDER_DUMP. Parameters are read once per process, so each case runs under
// its own ctest entry (stall.cmake) and skips itself elsewhere. Ranks are forked processes
// over the real TCP store on 127.0.0.1 (faults_util.h).
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "faults_util.h"

using namespace dlpgt;

namespace {

constexpr double kTimeout = 6.0;  // the groups' timeout; the stall warning comes at 1 s

std::string Env(const char *name) {
  const char *v = getenv(name);
  return v ? v : "";
}

std::string ReadFile(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int Count(const std::string &text, const std::string &what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
  return n;
}

// The line of text holding what ("" when none).
std::string LineWith(const std::string &text, const std::string &what) {
  size_t at = text.find(what);
  if (at == std::string::npos) return "";
  size_t b = text.rfind('\n', at);
  size_t e = text.find('\n', at);
  b = b == std::string::npos ? 0 : b + 1;
  return text.substr(b, e == std::string::npos ? std::string::npos : e - b);
}

std::string OneLine(std::string s) {
  for (char &ch : s)
    if (ch == '\n' || ch == '\t') ch = ' ';
  return s;
}

// A float32 allreduce of n elements of random data, checked when it succeeds.
dlpg_status_t Allreduce(FaultRank &c, dlpg_group_t *g, int64_t n, uint64_t seed) {
  HostTensor t(DT::F32, {n});
  Generate(DT::F32, DLPG_SUM, seed, c.rank, t.elems(), static_cast<size_t>(n));
  DLTensor *tp = t.dl();
  dlpg_status_t s = c.api->allreduce(g, &tp, nullptr, 1, DLPG_SUM, nullptr, nullptr);
  if (s != DLPG_OK) return s;
  std::vector<std::vector<uint8_t>> all(c.size, std::vector<uint8_t>(n * 4));
  std::vector<const void *> ptrs;
  for (int r = 0; r < c.size; r++) {
    Generate(DT::F32, DLPG_SUM, seed, r, all[r].data(), static_cast<size_t>(n));
    ptrs.push_back(all[r].data());
  }
  std::vector<uint8_t> want(n * 4);
  Reduce(DT::F32, DLPG_SUM, ptrs, want.data(), static_cast<size_t>(n));
  std::string diff = Compare(DT::F32, DLPG_SUM, t.elems(), want.data(), static_cast<size_t>(n));
  if (!diff.empty()) c.Put("wrong_result", diff);
  return s;
}

// Where the log tells of the group's failure: the flight record's dump at this rank's abort,
// or the line of a rank that adopts a peer's failure.
size_t FailureAt(const std::string &log) {
  size_t a = log.find("flight recorder, last"), b = log.find("; aborting the group");
  return a < b ? a : b;
}

// Rank 2 of 3 waits in its first collective (so it publishes its progress: coll_seq 1),
// then stalls before the second until the others have failed. Ranks 0 and 1 block in the
// second, warn once at 1 s naming rank 2, and fail at the 6 s deadline (or on rank 0's
// record). The warning precedes the failure's lines in the log.
TEST(StallEnv, WarnsOnceNamingTheStalledRank) {
  if (Env("DLPG_STALL_WARN_S") != "1") GTEST_SKIP() << "run by the test_stall_warn entries";
  Trial t;
  RunTrial(3, UniqueName(), 60, [](FaultRank &c) {
    dlpg_group_t *g = JoinTrialGroup(c, kTimeout);
    if (!g) return;
    if (c.rank != 2) usleep(600000);  // rank 2 blocks in coll_seq 1 and publishes it
    c.Put("warm", c.api->status_name(Allreduce(c, g, 1000, 11)));
    if (c.rank == 2) {
      WaitKey(c, c.name + "/failed0", 60);
      WaitKey(c, c.name + "/failed1", 60);
      c.api->group_destroy(g);
      return;
    }
    dlpg_status_t s = DLPG_OK;
    std::string log = CaptureStderr([&] { s = Allreduce(c, g, 517, 12); });
    c.Put("op", c.api->status_name(s));
    SetKey(c, c.name + "/failed" + std::to_string(c.rank));
    const std::string mark = "still blocked after";
    c.Put("warnings", std::to_string(Count(log, mark)));
    std::string line = LineWith(log, mark);
    c.Put("warning", line);
    size_t warn_at = log.find(mark);
    // The failure: the dump of the rank that aborted, or the one line of a rank that
    // adopts a peer's failure (it logs no dump of its own).
    size_t fail_at = FailureAt(log);
    c.Put("order", warn_at != std::string::npos && fail_at != std::string::npos &&
                           warn_at < fail_at ? "warning first" : OneLine(log));
    c.api->group_destroy(g);
  }, nullptr, &t);
  for (int r = 0; r < 2; r++) {
    const RankOutcome &o = t.out[r];
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(o.Get("warm"), "DLPG_OK");
    EXPECT_NE(o.Get("op"), "DLPG_OK");
    EXPECT_EQ(o.Get("wrong_result"), "");
    EXPECT_EQ(o.Get("warnings"), "1") << o.Get("warning");
    std::string w = o.Get("warning");
    printf("rank %d's stall warning: %s\n", r, w.c_str());
    EXPECT_NE(w.find(" WARN "), std::string::npos) << w;
    EXPECT_NE(w.find("dlpg_allreduce (coll_seq 2, float32 x517)"), std::string::npos) << w;
    // Rank 2 is named: behind by its record (at 1 s its record may predate a call, so the
    // warning says "had not reached", as of the record), or (not read in time) unknown.
    EXPECT_TRUE(w.find("rank 2 had not reached coll_seq 2") != std::string::npos ||
                w.find("rank 2 published no progress, so whether it reached coll_seq 2 is "
                       "unknown") != std::string::npos)
        << w;
    // The other waiting rank is never called late (its record shows coll_seq 2 started).
    EXPECT_EQ(w.find("rank " + std::to_string(1 - r) + " had not"), std::string::npos) << w;
    EXPECT_EQ(o.Get("order"), "warning first");
    EXPECT_EQ(o.exit_code, 0);
  }
  EXPECT_EQ(t.out[2].Get("warm"), "DLPG_OK");
  EXPECT_EQ(t.out[2].exit_code, 0);
}

// Rank 2 of 3 is slow outside dlpg (a data loader, say): it comes last to the first
// collective, so it never blocks in dlpg and its watcher never publishes while blocked, then
// stays away from the second for 4.5 s before calling it. Ranks 0 and 1 warn once at 2 s
// (DLPG_STALL_WARN_S=2: long enough for every record to have caught up) and say for certain
// that rank 2 has not called the allreduce, quoting its last call and how long ago that was
// (its watcher publishes the collective it last issued while idle). The allreduce then
// completes with the right sum on every rank.
TEST(StallEnv, NamesTheRankThatDidNotCall) {
  if (Env("DLPG_STALL_WARN_S") != "2") GTEST_SKIP() << "run by the test_stall_notcalled entries";
  Trial t;
  RunTrial(3, UniqueName(), 60, [](FaultRank &c) {
    dlpg_group_t *g = JoinTrialGroup(c, 20);
    if (!g) return;
    if (c.rank == 2) usleep(600000);  // the others block in coll_seq 1, rank 2 does not
    c.Put("warm", c.api->status_name(Allreduce(c, g, 1000, 21)));
    if (c.rank == 2) {
      usleep(4500000);  // "in its data loader"
      c.Put("op", c.api->status_name(Allreduce(c, g, 517, 22)));
      c.api->group_destroy(g);
      return;
    }
    dlpg_status_t s = DLPG_OK;
    std::string log = CaptureStderr([&] { s = Allreduce(c, g, 517, 22); });
    c.Put("op", c.api->status_name(s));
    const std::string mark = "still blocked after";
    c.Put("warnings", std::to_string(Count(log, mark)));
    c.Put("warning", LineWith(log, mark));
    c.api->group_destroy(g);
  }, nullptr, &t);
  for (int r = 0; r < 3; r++) {
    const RankOutcome &o = t.out[r];
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(o.Get("warm"), "DLPG_OK");
    EXPECT_EQ(o.Get("op"), "DLPG_OK");
    EXPECT_EQ(o.Get("wrong_result"), "");
    EXPECT_EQ(o.exit_code, 0);
    if (r == 2) continue;
    EXPECT_EQ(o.Get("warnings"), "1") << o.Get("warning");
    std::string w = o.Get("warning");
    printf("rank %d's stall warning: %s\n", r, w.c_str());
    EXPECT_NE(w.find("dlpg_allreduce (coll_seq 2, float32 x517)"), std::string::npos) << w;
    EXPECT_NE(w.find("rank 2 has not called dlpg_allreduce (coll_seq 2): its last call was "
                     "coll_seq 1, "), std::string::npos) << w;
    EXPECT_NE(w.find(" s ago"), std::string::npos) << w;
    EXPECT_EQ(w.find("unknown"), std::string::npos) << w;
    EXPECT_EQ(w.find("rank " + std::to_string(1 - r) + " has not"), std::string::npos) << w;
  }
}

// Point-to-point: rank 0 waits in a receive from rank 1, which stalls before its send.
// Rank 0 warns once, naming the receive and rank 1 (p2p numbers are per rank, so the
// warning quotes rank 1's record, or says it has none, and claims nothing more).
TEST(StallEnv, WarnsOnceForAReceive) {
  if (Env("DLPG_STALL_WARN_S") != "1") GTEST_SKIP() << "run by the test_stall_warn entries";
  Trial t;
  RunTrial(2, UniqueName(), 60, [](FaultRank &c) {
    dlpg_group_t *g = JoinTrialGroup(c, kTimeout);
    if (!g) return;
    c.Put("warm", c.api->status_name(Allreduce(c, g, 100, 21)));
    if (c.rank == 1) {
      WaitKey(c, c.name + "/failed0", 60);
      c.api->group_destroy(g);
      return;
    }
    HostTensor buf(DT::I64, {33});
    dlpg_status_t s = DLPG_OK;
    std::string log = CaptureStderr([&] {
      s = c.api->recv(g, buf.dl(), 1, 7, nullptr, nullptr);
    });
    c.Put("op", c.api->status_name(s));
    SetKey(c, c.name + "/failed0");
    c.Put("warnings", std::to_string(Count(log, "still blocked after")));
    c.Put("warning", LineWith(log, "still blocked after"));
    size_t warn_at = log.find("still blocked after");
    size_t fail_at = FailureAt(log);
    c.Put("order", warn_at != std::string::npos && fail_at != std::string::npos &&
                           warn_at < fail_at ? "warning first" : OneLine(log));
    c.api->group_destroy(g);
  }, nullptr, &t);
  const RankOutcome &o = t.out[0];
  std::string w = o.Get("warning");
  printf("rank 0's stall warning: %s\n", w.c_str());
  EXPECT_EQ(o.Get("op"), "DLPG_ERR_TIMEOUT");
  EXPECT_EQ(o.Get("warnings"), "1") << w;
  EXPECT_NE(w.find("dlpg_recv from rank 1 (p2p_seq 1 on this rank, int64 x33)"), std::string::npos)
      << w;
  EXPECT_TRUE(w.find("rank 1 published no progress, so whether it posted the matching send "
                     "is unknown") != std::string::npos ||
              w.find("rank 1's last progress record: coll_seq 1 started, 1 completed; 0 "
                     "point-to-point operations started") != std::string::npos)
      << w;
  EXPECT_EQ(o.Get("order"), "warning first");
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(t.out[1].exit_code, 0);
}

// DLPG_DEBUG_FILE=<dir>/dlpg.%h.%p: each rank's lines land in its own file, none on stderr.
TEST(StallEnv, DebugFileNamedByHostAndPid) {
  std::string pattern = Env("DLPG_DEBUG_FILE");
  if (pattern.find("/stall_log/") == std::string::npos) GTEST_SKIP() << "run by test_stall_file";
  std::string dir = pattern.substr(0, pattern.rfind('/'));
  mkdir(dir.c_str(), 0755);
  char host[256] = "";
  gethostname(host, sizeof host);
  std::string h = host;
  if (h.find('.') != std::string::npos) h = h.substr(0, h.find('.'));
  Trial t;
  RunTrial(2, UniqueName(), 60, [](FaultRank &c) {
    dlpg_group_t *g = nullptr;
    dlpg_status_t s = DLPG_OK;
    std::string err = CaptureStderr([&] {
      g = JoinTrialGroup(c, kTimeout);
      if (g) s = Allreduce(c, g, 64, 5);
    });
    c.Put("pid", std::to_string(getpid()));
    c.Put("op", c.api->status_name(s));
    c.Put("stderr_lines", std::to_string(Count(err, " dlpg ")));
    if (g) c.api->group_destroy(g);
  }, nullptr, &t);
  for (int r = 0; r < 2; r++) {
    const RankOutcome &o = t.out[r];
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(o.Get("op"), "DLPG_OK");
    EXPECT_EQ(o.Get("stderr_lines"), "0");
    std::string path = dir + "/dlpg." + h + "." + o.Get("pid");
    std::string text = ReadFile(path);
    EXPECT_GT(Count(text, " dlpg INFO "), 0) << path << ":\n" << text;
    EXPECT_NE(text.find(h + ":" + o.Get("pid") + ":"), std::string::npos) << text;
    EXPECT_NE(text.find("[" + std::to_string(r) + "] dlpg"), std::string::npos) << text;
    unlink(path.c_str());
  }
  // The store server's process logged to its own file; the folder is this entry's.
  std::string rm = "rm -f '" + dir + "'/dlpg.*";
  EXPECT_EQ(system(rm.c_str()), 0);
}

// A file that cannot be opened: one line on stderr says so, and the log stays on stderr.
TEST(StallEnv, UnwritableDebugFileFallsBackToStderr) {
  std::string pattern = Env("DLPG_DEBUG_FILE");
  if (pattern.find("/no-such-dir-") == std::string::npos)
    GTEST_SKIP() << "run by test_stall_file_unwritable";
  Trial t;
  RunTrial(2, UniqueName(), 60, [](FaultRank &c) {
    dlpg_group_t *g = nullptr;
    dlpg_status_t s = DLPG_OK;
    std::string err = CaptureStderr([&] {
      g = JoinTrialGroup(c, kTimeout);
      if (g) s = Allreduce(c, g, 64, 5);
    });
    c.Put("op", c.api->status_name(s));
    c.Put("cannot_open", std::to_string(Count(err, "cannot open")));
    c.Put("cannot_open_line", LineWith(err, "cannot open"));
    c.Put("info_lines", std::to_string(Count(err, " dlpg INFO ")));
    if (g) c.api->group_destroy(g);
  }, nullptr, &t);
  for (int r = 0; r < 2; r++) {
    const RankOutcome &o = t.out[r];
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(o.Get("op"), "DLPG_OK");
    EXPECT_EQ(o.Get("cannot_open"), "1");
    EXPECT_NE(o.Get("cannot_open_line").find("DLPG_DEBUG_FILE"), std::string::npos);
    EXPECT_NE(o.Get("cannot_open_line").find("logging to stderr"), std::string::npos);
    EXPECT_GT(atoi(o.Get("info_lines").c_str()), 0);
  }
}

void SignalSelfAfter(int sig, double delay_s) {
  std::thread([sig, delay_s] {
    usleep(static_cast<useconds_t>(delay_s * 1e6));
    raise(sig);
  }).detach();
}

// Rank 2 of 3 is killed in an allreduce: ranks 0 and 1 each write <dir>/<group>.<rank>.json
// with the documented fields; rank 2 writes none.
TEST(StallEnv, KilledRankSurvivorsDumpJson) {
  std::string dir = Env("DLPG_FLIGHT_RECORDER_DUMP");
  if (dir.find("stall_dump") == std::string::npos) GTEST_SKIP() << "run by test_stall_dump";
  std::string name = UniqueName();
  Trial t;
  RunTrial(3, name, 60, [](FaultRank &c) {
    dlpg_group_t *g = JoinTrialGroup(c, kTimeout);
    if (!g) return;
    c.Put("warm", c.api->status_name(Allreduce(c, g, 1000, 3)));
    if (c.rank == 2) SignalSelfAfter(SIGKILL, 0.05);
    else usleep(300000);
    c.Put("op", c.api->status_name(Allreduce(c, g, 1 << 20, 4)));
    c.Put("pid", std::to_string(getpid()));
    c.api->group_destroy(g);
  }, nullptr, &t);
  EXPECT_EQ(t.out[2].signal, SIGKILL);
  std::string base = dir + (dir.back() == '/' ? "" : "/") + name;
  for (int r = 0; r < 2; r++) {
    const RankOutcome &o = t.out[r];
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_NE(o.Get("op"), "DLPG_OK");
    std::string path = base + "." + std::to_string(r) + ".json";
    std::string j = ReadFile(path);
    ASSERT_FALSE(j.empty()) << path;
    for (const std::string &field : std::vector<std::string>{"\"format\": \"dlpg-flight-record\"", "\"group\": \"" + name + "\"",
          "\"rank\": " + std::to_string(r) + ",", "\"size\": 3,", "\"host\": \"",
          "\"pid\": " + o.Get("pid") + ",", "\"reason\": \"", "\"progress\": {",
          "\"coll_seq_started\": 2,", "\"seq_kind\": \"coll\", \"seq\": 2, \"kind\": \"allreduce\", "
          "\"dtype\": \"float32\", \"count\": 1048576", "\"backend\": \"", "\"state\": \"",
          "\"state\": \"done\", \"status\": \"DLPG_OK\"", "\"issued\": ", "\"ended\": "})
      EXPECT_NE(j.find(field), std::string::npos) << field << " in " << path << ":\n" << j;
    // Valid JSON, by an independent parser where one is installed.
    if (access("/usr/bin/python3", X_OK) == 0) {
      std::string cmd = "/usr/bin/python3 -m json.tool '" + path + "' > /dev/null";
      EXPECT_EQ(system(cmd.c_str()), 0) << j;
    }
    unlink(path.c_str());
  }
  struct stat st;
  EXPECT_NE(stat((base + ".2.json").c_str(), &st), 0);  // the killed rank wrote none
}

}  // namespace
