// The shm engine's lifecycle and faults: the host identity, creation (a rank in another
// network namespace makes every rank fail with DLPG_ERR_UNSUPPORTED, the fallback signal),
// re-creation under the same name, nothing in /dev/shm, kill -9 of a rank mid-operation
// (survivors fail naming it within timeout + 1 s), SIGSTOP (a timeout naming the stopped
// rank), abort from another thread, a peer that leaves, mismatched collectives, and waiters
// that yield their CPU ending at the deadline; two ranks started on one CPU are parted.
#include "test_shm_util.h"

#include <sched.h>
#include <sys/stat.h>

#include <atomic>
#include <fstream>
#include <random>
#include <thread>

using namespace shmtest;

namespace {

bool Has(const char *hay, const std::string &needle) { return strstr(hay, needle.c_str()) != nullptr; }

TEST(ShmHost, IdentityIsStableAndNamesTheNamespaces) {
  char a[DLPG__SHM_HOST_ID_MAX], b[DLPG__SHM_HOST_ID_MAX];
  ASSERT_EQ(dlpg__shm_host_id(a, sizeof a), DLPG_OK) << dlpg_last_error();
  ASSERT_EQ(dlpg__shm_host_id(b, sizeof b), DLPG_OK);
  EXPECT_STREQ(a, b);
  struct stat st;
  ASSERT_EQ(stat("/proc/self/ns/net", &st), 0);
  EXPECT_TRUE(Has(a, "/net:" + std::to_string(st.st_ino) + "/")) << a;
  char tiny[4];
  EXPECT_EQ(dlpg__shm_host_id(tiny, sizeof tiny), DLPG_ERR_INVALID_ARGUMENT);
}

TEST(ShmLife, NothingInDevShmAndSameNameAgain) {
  ASSERT_TRUE(DevShmDlpg().empty());
  Opts o;
  o.create = false;
  o.name = "again";
  auto codes = RunRanks(3, o, [](Rank &k) {
    // First a group of 2 under the same name (rank 2 is not in it): the group of 3 after it
    // must not meet that one's keys.
    if (k.rank < 2) {
      dlpg__shm_config_t cfg{};
      cfg.slot_bytes = 4096, cfg.timeout_s = 20, cfg.spin = -1;
      dlpg__shm_t *sh = nullptr;
      ASSERT_EQ(dlpg__shm_create(k.store, "again", k.rank, 2, &cfg, &sh), DLPG_OK) << dlpg_last_error();
      ASSERT_EQ(dlpg__shm_barrier(sh), DLPG_OK) << dlpg_last_error();
      dlpg__shm_destroy(sh);
    }
    for (int round = 0; round < 3; round++) {
      dlpg__shm_config_t cfg{};
      cfg.slot_bytes = 4096, cfg.timeout_s = 20, cfg.spin = -1;
      dlpg__shm_t *sh = nullptr;
      ASSERT_EQ(dlpg__shm_create(k.store, "again", k.rank, k.size, &cfg, &sh), DLPG_OK) << dlpg_last_error();
      EXPECT_TRUE(DevShmDlpg().empty()) << "a segment has a name in /dev/shm";
      int64_t v = k.rank + round, out = 0;
      for (int i = 0; i < 3; i++) {
        ASSERT_EQ(dlpg__shm_allreduce(sh, &v, &out, 1, DLPG__DT_INT64, DLPG_SUM), DLPG_OK) << dlpg_last_error();
        EXPECT_EQ(out, 3 + 3 * round);
      }
      dlpg__shm_destroy(sh);
    }
  });
  ExpectAllPass(codes);
  EXPECT_TRUE(DevShmDlpg().empty());
}

// Rank 1 moves to a new network namespace after connecting to the store: rank 0's
// abstract socket is then out of its reach, as on another host.
TEST(ShmLife, OtherNetworkNamespaceIsUnsupportedEverywhere) {
  {
    pid_t p = fork();
    if (p == 0) _exit(unshare(CLONE_NEWNET) == 0 ? 0 : 1);
    int status = 0;
    waitpid(p, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) GTEST_SKIP() << "unshare(CLONE_NEWNET) not permitted";
  }
  Opts o;
  o.create = false;
  o.timeout = 10;
  auto codes = RunRanks(3, o, [](Rank &k) {
    if (k.rank == 1) {
      ASSERT_EQ(unshare(CLONE_NEWNET), 0);
    }
    dlpg__shm_config_t cfg{};
    cfg.timeout_s = 10, cfg.spin = -1;
    dlpg__shm_t *sh = nullptr;
    double t0 = Now();
    EXPECT_EQ(dlpg__shm_create(k.store, "netns", k.rank, k.size, &cfg, &sh), DLPG_ERR_UNSUPPORTED)
        << dlpg_last_error();
    EXPECT_TRUE(Has(dlpg_last_error(), "rank 1 cannot reach rank 0's socket")) << dlpg_last_error();
    EXPECT_LT(Now() - t0, 5.0) << "the failure must not wait for the deadline";
    EXPECT_EQ(sh, nullptr);
  });
  ExpectAllPass(codes);
}

// Survivors of a kill -9 fail with DLPG_ERR_REMOTE naming the dead rank and its pid,
// within the timeout + 1 s. The killed rank is not reaped meanwhile (a zombie counts as dead).
TEST(ShmFaults, KillNineMidAllreduce) {
  Opts o;
  o.timeout = 5;
  o.slot = 64 << 10;
  o.name = "kill9";
  o.parent = [](const std::vector<pid_t> &pids, Store &st) {
    size_t len;
    char buf[8];
    ASSERT_EQ(dlpg_store_get(st.s, "kill9/looping", 20, buf, sizeof buf, &len), DLPG_OK);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    kill(pids[2], SIGKILL);
  };
  auto codes = RunRanks(3, o, [](Rank &k) {
    std::vector<float> in(1 << 20, 1.0f + k.rank), out(1 << 20);
    if (k.rank == 0) dlpg_store_set(k.store, "kill9/looping", "1", 1);
    for (int i = 0;; i++) {
      double t0 = Now();
      dlpg_status_t s = dlpg__shm_allreduce(k.sh, in.data(), out.data(), in.size(), DLPG__DT_FLOAT32, DLPG_SUM);
      if (s == DLPG_OK) continue;
      EXPECT_EQ(s, DLPG_ERR_REMOTE) << dlpg_last_error();
      EXPECT_TRUE(Has(dlpg_last_error(), "rank 2 (pid ")) << dlpg_last_error();
      EXPECT_TRUE(Has(dlpg_last_error(), "died during allreduce #")) << dlpg_last_error();
      EXPECT_LT(Now() - t0, 5.0 + 1.0);
      // Broken from now on: the next call repeats the failure at once.
      EXPECT_EQ(dlpg__shm_barrier(k.sh), DLPG_ERR_REMOTE);
      EXPECT_TRUE(Has(dlpg_last_error(), "failed earlier")) << dlpg_last_error();
      break;
    }
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
  EXPECT_EQ(codes[2], 128 + SIGKILL);
  EXPECT_TRUE(DevShmDlpg().empty());
}

// A stopped rank is alive but does not progress: the others time out naming it.
TEST(ShmFaults, StoppedRankTimesOutNamingIt) {
  Opts o;
  o.timeout = 2;
  o.name = "stop";
  o.parent = [](const std::vector<pid_t> &pids, Store &st) {
    size_t len;
    char buf[8];
    ASSERT_EQ(dlpg_store_get(st.s, "stop/ready", 20, buf, sizeof buf, &len), DLPG_OK);
    kill(pids[1], SIGSTOP);
    ASSERT_EQ(dlpg_store_get(st.s, "stop/done", 20, buf, sizeof buf, &len), DLPG_OK);
    kill(pids[1], SIGKILL);
    kill(pids[1], SIGCONT);
  };
  auto codes = RunRanks(2, o, [](Rank &k) {
    if (k.rank == 1) {
      dlpg_store_set(k.store, "stop/ready", "1", 1);
      pause();  // stopped, then killed
      return;
    }
    size_t len;
    char buf[8];
    ASSERT_EQ(dlpg_store_get(k.store, "stop/ready", 20, buf, sizeof buf, &len), DLPG_OK);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    int32_t v = 1, out;
    double t0 = Now();
    EXPECT_EQ(dlpg__shm_allreduce(k.sh, &v, &out, 1, DLPG__DT_INT32, DLPG_SUM), DLPG_ERR_TIMEOUT);
    double took = Now() - t0;
    EXPECT_TRUE(Has(dlpg_last_error(), "rank 1 (pid ")) << dlpg_last_error();
    EXPECT_TRUE(Has(dlpg_last_error(), "did not reach allreduce #1 within 2 s")) << dlpg_last_error();
    EXPECT_GE(took, 1.9);
    EXPECT_LT(took, 3.0);
    dlpg_store_set(k.store, "stop/done", "1", 1);
  });
  EXPECT_EQ(codes[0], 0);
}

// Abort from another thread ends a wait at once; the peer then sees the abort.
TEST(ShmFaults, AbortFromAnotherThread) {
  Opts o;
  o.timeout = 30;
  o.name = "abort";
  auto codes = RunRanks(2, o, [](Rank &k) {
    if (k.rank == 1) {
      size_t len;
      char buf[8];
      ASSERT_EQ(dlpg_store_get(k.store, "abort/done", 20, buf, sizeof buf, &len), DLPG_OK);
      // Rank 0 had posted its input before it was aborted: this one may still complete.
      std::vector<double> v(1000, 1.0), out(1000);
      dlpg_status_t s = dlpg__shm_allreduce(k.sh, v.data(), out.data(), v.size(), DLPG__DT_FLOAT64, DLPG_SUM);
      EXPECT_TRUE(s == DLPG_OK || s == DLPG_ERR_REMOTE) << dlpg_last_error();
      double t0 = Now();
      EXPECT_EQ(dlpg__shm_barrier(k.sh), DLPG_ERR_REMOTE);
      EXPECT_TRUE(Has(dlpg_last_error(), "rank 0 (pid ")) << dlpg_last_error();
      EXPECT_TRUE(Has(dlpg_last_error(), "was aborted")) << dlpg_last_error();
      EXPECT_LT(Now() - t0, 2.0);
      return;
    }
    std::thread t([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      dlpg__shm_abort(k.sh);
    });
    double t0 = Now();
    std::vector<double> v(1000, 1.0), out(1000);
    EXPECT_EQ(dlpg__shm_allreduce(k.sh, v.data(), out.data(), v.size(), DLPG__DT_FLOAT64, DLPG_SUM),
              DLPG_ERR_ABORTED);
    double took = Now() - t0;
    t.join();
    EXPECT_TRUE(Has(dlpg_last_error(), "aborted during allreduce #1")) << dlpg_last_error();
    EXPECT_LT(took, 1.5);
    EXPECT_EQ(dlpg__shm_barrier(k.sh), DLPG_ERR_ABORTED);
    dlpg_store_set(k.store, "abort/done", "1", 1);
  });
  ExpectAllPass(codes);
}

// Waiters that yield their CPU (forced here for far longer than the timeout; by default only
// where ranks outnumber the CPUs) get the same sums and still end at the deadline, naming
// the rank that did not come.
TEST(ShmFaults, YieldingWaitersStillEndOnTime) {
  Opts o;
  o.timeout = 2;
  o.yield_us = 10 * 1000 * 1000;
  o.name = "yield";
  auto codes = RunRanks(3, o, [](Rank &k) {
    std::mt19937 gen(1234);
    std::uniform_int_distribution<int32_t> d(-1000, 1000);
    for (int round = 0; round < 200; round++) {
      std::vector<std::vector<int32_t>> all(3, std::vector<int32_t>(1 + round % 37));
      for (auto &v : all)
        for (auto &x : v) x = d(gen);
      std::vector<int32_t> out(all[0].size());
      ASSERT_EQ(dlpg__shm_allreduce(k.sh, all[k.rank].data(), out.data(), out.size(),
                                    DLPG__DT_INT32, DLPG_SUM), DLPG_OK) << dlpg_last_error();
      for (size_t i = 0; i < out.size(); i++)
        ASSERT_EQ(out[i], all[0][i] + all[1][i] + all[2][i]) << "round " << round << " element " << i;
    }
    if (k.rank == 2) {
      std::this_thread::sleep_for(std::chrono::duration<double>(Scaled(4.0)));
      return;  // never comes to the next one
    }
    int32_t v = 1, out;
    double t0 = Now();
    EXPECT_EQ(dlpg__shm_allreduce(k.sh, &v, &out, 1, DLPG__DT_INT32, DLPG_SUM), DLPG_ERR_TIMEOUT);
    double took = Now() - t0;
    EXPECT_TRUE(Has(dlpg_last_error(), "rank 2 (pid ")) << dlpg_last_error();
    EXPECT_GE(took, 1.9);
    EXPECT_LT(took, 2.0 + 1.0);
  });
  ExpectAllPass(codes);
}

// A rank that destroys its engine while a peer waits: the peer fails naming it.
TEST(ShmFaults, PeerLeaves) {
  Opts o;
  o.name = "leave";
  auto codes = RunRanks(2, o, [](Rank &k) {
    if (k.rank == 1) {
      dlpg__shm_destroy(k.sh);
      k.sh = nullptr;
      return;
    }
    uint8_t b = 0;
    double t0 = Now();
    EXPECT_EQ(dlpg__shm_broadcast(k.sh, &b, 1, 1), DLPG_ERR_REMOTE);
    EXPECT_TRUE(Has(dlpg_last_error(), "rank 1 (pid ")) << dlpg_last_error();
    EXPECT_TRUE(Has(dlpg_last_error(), "left the group")) << dlpg_last_error();
    EXPECT_LT(Now() - t0, 2.0);
  });
  ExpectAllPass(codes);
}

// Ranks that were aborted, destroyed their handles and exited are not "dead": a rank that
// arrives later is told they failed and left, not that they died.
TEST(ShmFaults, FailedRanksThatLeftAreNotCalledDead) {
  Opts o;
  o.name = "failleft";
  o.timeout = Scaled(10);
  o.parent = [](const std::vector<pid_t> &pids, Store &st) {
    char buf[8];
    size_t len;
    for (const char *k : {"failleft/r1", "failleft/r2"})
      ASSERT_EQ(dlpg_store_get(st.s, k, Scaled(20), buf, sizeof buf, &len), DLPG_OK);
    // Both processes have exited (zombies until reaped: dead to the engine too).
    for (int r : {1, 2}) {
      std::string path = "/proc/" + std::to_string(pids[r]) + "/stat";
      for (double t0 = Now(); Now() - t0 < Scaled(20);) {
        std::ifstream f(path);
        std::string line;
        std::getline(f, line);
        size_t p = line.rfind(')');
        if (!f || p == std::string::npos || line.compare(p, 3, ") Z") == 0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    dlpg_store_set(st.s, "failleft/gone", "1", 1);
  };
  auto codes = RunRanks(3, o, [](Rank &k) {
    std::vector<float> in(1024, 1.0f), out(1024);
    char buf[8];
    size_t len;
    if (k.rank != 0) {
      dlpg__shm_abort(k.sh);
    } else {
      ASSERT_EQ(dlpg_store_get(k.store, "failleft/gone", Scaled(30), buf, sizeof buf, &len), DLPG_OK);
      EXPECT_EQ(dlpg__shm_allreduce(k.sh, in.data(), out.data(), in.size(), DLPG__DT_FLOAT32,
                                    DLPG_SUM), DLPG_ERR_REMOTE);
      std::string m = dlpg_last_error();
      printf("rank 0: %s\n", m.c_str());
      EXPECT_EQ(m.find("died"), std::string::npos) << m;
      EXPECT_NE(m.find("left the group"), std::string::npos) << m;
      return;
    }
    dlpg__shm_destroy(k.sh);
    k.sh = nullptr;
    std::string key = "failleft/r" + std::to_string(k.rank);
    dlpg_store_set(k.store, key.c_str(), "1", 1);
  });
  ExpectAllPass(codes);
}

// Different collectives (or counts) at the same position are named, not silently mixed.
// A mismatch fails the operation on every rank alike, naming both sides as rank 0 and the
// rank that differs, and leaves the handle usable: the next, matching allreduce is right.
TEST(ShmFaults, MismatchedCollectivesAreNamedAndRecoverable) {
  Opts o;
  o.timeout = 5;
  o.name = "mismatch";
  auto codes = RunRanks(2, o, [](Rank &k) {
    int32_t v[4] = {1, 2, 3, 4}, out[4];
    dlpg_status_t s = k.rank == 0 ? dlpg__shm_allreduce(k.sh, v, out, 4, DLPG__DT_INT32, DLPG_SUM)
                                  : dlpg__shm_broadcast(k.sh, v, 16, 0);
    EXPECT_EQ(s, DLPG_ERR_INVALID_ARGUMENT) << dlpg_last_error();
    EXPECT_TRUE(Has(dlpg_last_error(), "rank 0 called allreduce but rank 1 called broadcast"))
        << dlpg_last_error();
    // Counts differ, as the caller names them.
    dlpg__shm_describe_next(k.sh, DLPG__OP_ALLREDUCE, DLPG__DT_INT32, 3 + k.rank, 3 + k.rank);
    s = dlpg__shm_allreduce(k.sh, v, out, 3 + (size_t)k.rank, DLPG__DT_INT32, DLPG_SUM);
    EXPECT_EQ(s, DLPG_ERR_INVALID_ARGUMENT) << dlpg_last_error();
    EXPECT_TRUE(Has(dlpg_last_error(), "rank 0 has 3 elements of int32 but rank 1 has 4 elements "
                                       "of int32")) << dlpg_last_error();
    ASSERT_EQ(dlpg__shm_allreduce(k.sh, v, out, 4, DLPG__DT_INT32, DLPG_SUM), DLPG_OK)
        << dlpg_last_error();
    for (int i = 0; i < 4; i++) EXPECT_EQ(out[i], 2 * v[i]);
  });
  ExpectAllPass(codes);
}

// Two ranks that start on one CPU of a mask of several (as the scheduler sometimes places
// them) are parted by the waiter, which moves itself off the CPU it shares with the rank it
// waits for: within the first 100 allreduces they are seen on different CPUs, every sum is
// right, and each rank's affinity mask is the one it had.
TEST(ShmWaits, RanksOnOneCpuPartAndKeepTheirMasks) {
  cpu_set_t mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof mask, &mask), 0);
  if (CPU_COUNT(&mask) < 2) GTEST_SKIP() << "one CPU in this process's affinity mask";
  Opts o;
  o.yield_us = -1;  // never yield: the ranks do not outnumber the CPUs
  o.name = "onecpu";
  o.create = false;
  auto codes = RunRanks(2, o, [&](Rank &k) {
    int first = 0;
    while (!CPU_ISSET(first, &mask)) first++;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    // On `first` alone, then the whole mask again: the kernel leaves the thread where it is.
    ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
    ASSERT_EQ(sched_setaffinity(0, sizeof mask, &mask), 0);
    dlpg__shm_config_t cfg = Config(o);
    ASSERT_EQ(dlpg__shm_create(k.store, o.name.c_str(), k.rank, 2, &cfg, &k.sh), DLPG_OK)
        << dlpg_last_error();
    std::string cpus;
    for (int i = 0; i < 100; i++) {
      int32_t v = 1000 * k.rank + i, out = 0;
      ASSERT_EQ(dlpg__shm_allreduce(k.sh, &v, &out, 1, DLPG__DT_INT32, DLPG_SUM), DLPG_OK)
          << dlpg_last_error();
      ASSERT_EQ(out, 1000 + 2 * i) << "allreduce " << i;
      cpus += static_cast<char>('A' + sched_getcpu() % 26);
    }
    cpu_set_t now;
    ASSERT_EQ(sched_getaffinity(0, sizeof now, &now), 0);
    EXPECT_TRUE(CPU_EQUAL(&now, &mask)) << "rank " << k.rank << "'s affinity mask changed";
    std::string key = "onecpu/" + std::to_string(k.rank);
    ASSERT_EQ(dlpg_store_set(k.store, key.c_str(), cpus.data(), cpus.size()), DLPG_OK);
    char peer[128];
    size_t len = 0;
    std::string pk = "onecpu/" + std::to_string(1 - k.rank);
    ASSERT_EQ(dlpg_store_get(k.store, pk.c_str(), 20, peer, sizeof peer, &len), DLPG_OK);
    bool parted = false;
    for (size_t i = 0; i < len && i < cpus.size(); i++) parted |= peer[i] != cpus[i];
    EXPECT_TRUE(parted) << "rank " << k.rank << " on CPUs " << cpus << ", its peer on "
                        << std::string(peer, len);
  });
  ExpectAllPass(codes);
}

}  // namespace
