// Harness of the shm engine's tests: N ranks as forked processes that meet through a real
// dlpg TCP store on loopback (served by the test process on port 0, its port read back),
// each creating the engine and running a body; the parent waits with a deadline and kills
// every rank that overruns it. Random per-rank data comes from a seed of (test, rank), so
// every rank can compute every other rank's input and the reference independently.
#pragma once

#include <gtest/gtest.h>

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

extern "C" {
#include "base/status.h"
#include "shm/shm.h"
#include "time_scale.h"
}

namespace shmtest {

struct Rank {
  int rank, size;
  dlpg_store_t *store;
  dlpg__shm_t *sh;
};

inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A serving store on an ephemeral port; the port is read back, never guessed.
struct Store {
  dlpg_store_t *s = nullptr;
  int port = 0;
  Store() {
    EXPECT_EQ(dlpg_store_open("tcp://127.0.0.1:0?serve=1", 30, &s), DLPG_OK) << dlpg_last_error();
    if (s) dlpg_store_port(s, &port);
  }
  ~Store() { dlpg_store_close(s); }
  std::string Url() const { return "tcp://127.0.0.1:" + std::to_string(port); }
};

struct Opts {
  size_t slot = 0, stream = 0;
  long yield_us = 0;  // 0: the engine's default; < 0: never yield
  int threads = 0;    // 0: the engine's default; 1: no helper threads
  double timeout = Scaled(20);
  double deadline = Scaled(40);   // the parent kills ranks still running after this
  std::string name = "shmtest";
  bool create = true;     // false: the body creates the engine itself (sh == nullptr)
  // Called in the parent with the children's pids once they run (fault injection); the
  // parent then waits for them as usual.
  std::function<void(const std::vector<pid_t> &, Store &)> parent;
};

// The engine's configuration that opts describe (the defaults' spin).
inline dlpg__shm_config_t Config(const Opts &o) {
  dlpg__shm_config_t cfg{};
  cfg.slot_bytes = o.slot, cfg.timeout_s = o.timeout;
  cfg.spin = -1, cfg.stream_bytes = o.stream, cfg.yield_us = o.yield_us;
  cfg.threads = o.threads;
  return cfg;
}

// Run body on `size` forked ranks; returns the exit codes (0: body passed). A body fails
// through gtest assertions (the child's exit code reflects HasFailure()).
inline std::vector<int> RunRanks(int size, const Opts &o, const std::function<void(Rank &)> &body) {
  Store st;
  std::vector<pid_t> pids;
  for (int r = 0; r < size; r++) {
    pid_t p = fork();
    if (p == 0) {
      Rank rk{r, size, nullptr, nullptr};
      if (dlpg_store_open(st.Url().c_str(), 30, &rk.store) != DLPG_OK) {
        fprintf(stderr, "rank %d: store: %s\n", r, dlpg_last_error());
        _exit(3);
      }
      if (o.create) {
        dlpg__shm_config_t cfg = Config(o);
        dlpg_status_t s = dlpg__shm_create(rk.store, o.name.c_str(), r, size, &cfg, &rk.sh);
        if (s != DLPG_OK) {
          fprintf(stderr, "rank %d: create: %s: %s\n", r, dlpg_status_name(s), dlpg_last_error());
          _exit(4);
        }
      }
      body(rk);
      dlpg__shm_destroy(rk.sh);
      dlpg_store_close(rk.store);
      fflush(stdout);
      fflush(stderr);
      _exit(::testing::Test::HasFailure() ? 1 : 0);
    }
    pids.push_back(p);
  }
  if (o.parent) o.parent(pids, st);
  std::vector<int> codes(size, -1);
  double end = Now() + o.deadline;
  int left = size;
  while (left > 0) {
    for (int r = 0; r < size; r++) {
      if (codes[r] != -1) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        left--;
      }
    }
    if (left > 0 && Now() > end) {
      for (int r = 0; r < size; r++)
        if (codes[r] == -1) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], nullptr, 0);
          codes[r] = 200;  // overran the deadline
        }
      break;
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return codes;
}

inline void ExpectAllPass(const std::vector<int> &codes) {
  for (size_t r = 0; r < codes.size(); r++) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// Deterministic random bytes of (seed, rank): every rank can make every rank's input.
inline std::vector<uint8_t> Bytes(uint64_t seed, int rank, size_t n) {
  std::mt19937_64 g(seed * 1000003u + static_cast<uint64_t>(rank) * 7919u + 1);
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; i++) v[i] = static_cast<uint8_t>(g() >> 17);
  return v;
}

// Every rank's Bytes(seed, q, n) end to end: what an allgather of them gives.
inline std::vector<uint8_t> AllRanksBytes(uint64_t seed, int size, size_t n) {
  std::vector<uint8_t> all;
  for (int q = 0; q < size; q++) {
    auto b = Bytes(seed, q, n);
    all.insert(all.end(), b.begin(), b.end());
  }
  return all;
}

// An alltoall of n-byte blocks where block j of rank q's input is Bytes(seed + j, q): this
// rank's input and the output it must get.
struct AlltoallCase {
  std::vector<uint8_t> in, want;
  AlltoallCase(uint64_t seed, int rank, int size, size_t n) {
    for (int j = 0; j < size; j++) {
      auto b = Bytes(seed + j, rank, n);
      in.insert(in.end(), b.begin(), b.end());
      auto w = Bytes(seed + rank, j, n);
      want.insert(want.end(), w.begin(), w.end());
    }
  }
};

// Publish a hash of this rank's result and compare with rank 0's.
inline void ExpectSameBits(Rank &k, const std::string &key, const std::vector<uint8_t> &v) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t b : v) h = (h ^ b) * 1099511628211ull;
  std::string mine = std::to_string(h), k0 = key + "/0";
  if (k.rank == 0) {
    ASSERT_EQ(dlpg_store_set(k.store, k0.c_str(), mine.data(), mine.size()), DLPG_OK);
    return;
  }
  char buf[64];
  size_t len = 0;
  ASSERT_EQ(dlpg_store_get(k.store, k0.c_str(), 20, buf, sizeof buf, &len), DLPG_OK);
  EXPECT_EQ(std::string(buf, len), mine) << key << ": rank " << k.rank << " differs from rank 0";
}

// Entries of /dev/shm whose name mentions dlpg (there must never be any).
inline std::vector<std::string> DevShmDlpg() {
  std::vector<std::string> out;
  if (DIR *d = opendir("/dev/shm")) {
    while (struct dirent *e = readdir(d))
      if (strstr(e->d_name, "dlpg")) out.push_back(e->d_name);
    closedir(d);
  }
  return out;
}

}  // namespace shmtest
