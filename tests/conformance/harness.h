// The conformance harness: run a function as N ranks, either as N threads of this process
// or as N forked processes, that meet through the plugin's real TCP store on 127.0.0.1
// (rank 0 serves on an ephemeral port, the others connect to the port it reports). The
// plugin is reached only through dlpg_test_api() (dlopen + dlpg_get_api).
//
// Process mode: the parent forks the children before it touches the plugin for the run;
// each child runs one rank and forwards every failed googletest assertion to the parent
// through a pipe, which reports it as a failure of the test with the child's message. The
// parent collects results with a deadline and kills children that pass it.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "api_loader.h"
#include "reference.h"
#include "time_scale.h"

namespace dlpgt {

enum class Mode { kThreads, kProcesses };

inline const char *ModeName(Mode m) { return m == Mode::kThreads ? "threads" : "processes"; }

// What a rank function receives.
struct RankCtx {
  const dlpg_api_t *api = nullptr;
  int rank = 0;
  int size = 0;
  dlpg_store_t *store = nullptr;  // this rank's store; a function that closes it sets it NULL
  int port = 0;                   // the store's TCP port
  dlpg_group_t *group = nullptr;  // NULL when RunOptions::create_group is false
  std::string name;               // the group name (unique per run)
  std::string url;                // "tcp://127.0.0.1:PORT" for opening more client stores
  uint64_t seed = 0;              // per test (same on every rank)
  Mode mode = Mode::kThreads;
};

struct RunOptions {
  bool open_store = true;       // false: the function sets up its own rendezvous
  bool create_group = true;     // false: ctx.group stays NULL
  double group_timeout_s = 60;  // the group's option timeout_s
  double deadline_s = 0;        // whole run; 0: group_timeout_s + 60
};

// Run fn as ranks 0..n-1 and wait for all of them. Failures inside fn (gtest EXPECT/ASSERT)
// fail the current test in both modes.
void RunRanks(Mode mode, int n, const std::function<void(RankCtx &)> &fn, RunOptions opts = {});

// A group name unique in this process and run: the current test's name plus a counter.
std::string UniqueName(const char *tag = "");

// Seed derived from the current test's full name (identical on every rank).
uint64_t TestSeed();

// Value parameter of the rank-parameterised suites.
struct RankParam {
  Mode mode;
  int n;
  bool full;  // run the full dtype x op matrix (else a representative subset)
};
std::string RankParamName(const ::testing::TestParamInfo<RankParam> &info);
// {threads, processes} x {1, 2, 3, 4}; full matrix at 2 and 3 ranks.
std::vector<RankParam> StandardRankParams();

// ------------------------------------------------------------------ tensors

// A host tensor that owns its memory: shape, optional explicit strides, and a byte_offset
// into the buffer (the tensor's elements start byte_offset bytes after data).
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DT dt, std::vector<int64_t> shape, size_t offset_elems = 0,
             bool explicit_strides = false, int device_type = kDLCPU);
  HostTensor(const HostTensor &) = delete;
  HostTensor &operator=(const HostTensor &) = delete;
  HostTensor(HostTensor &&) = default;
  HostTensor &operator=(HostTensor &&) = default;

  DLTensor *dl();  // refreshed on every call (pointers into this object)
  void *elems() { return mem_.data() + offset_; }
  const void *elems() const { return mem_.data() + offset_; }
  size_t numel() const { return numel_; }
  size_t nbytes() const { return numel_ * ElemSize(dt_); }
  DT dt() const { return dt_; }
  void Fill(uint8_t byte) { memset(mem_.data(), byte, mem_.size()); }
  std::vector<int64_t> &shape() { return shape_; }
  std::vector<int64_t> &strides() { return strides_; }
  bool use_strides = false;
  int device_type = kDLCPU;
  int device_id = 0;
  DLDataType dtype{};

 private:
  DT dt_ = DT::F32;
  std::vector<int64_t> shape_, strides_;
  std::vector<uint8_t> mem_;
  size_t offset_ = 0, numel_ = 0;
  DLTensor t_{};
};

// Compact row-major strides of shape.
std::vector<int64_t> CompactStrides(const std::vector<int64_t> &shape);

// Check a status with the plugin's message in the failure text.
#define DLPG_EXPECT_OK(api, expr)                                                       \
  do {                                                                                \
    dlpg_status_t s_ = (expr);                                                        \
    EXPECT_EQ(s_, DLPG_OK) << #expr << " -> " << (api)->status_name(s_) << ": "       \
                           << (api)->last_error();                                    \
  } while (0)
#define DLPG_ASSERT_OK(api, expr)                                                       \
  do {                                                                                \
    dlpg_status_t s_ = (expr);                                                        \
    ASSERT_EQ(s_, DLPG_OK) << #expr << " -> " << (api)->status_name(s_) << ": "       \
                           << (api)->last_error();                                    \
  } while (0)

// The plugin's answer to its capability query (dlpg_reduce_supported) for dt and op on a
// device (default: the CPU): true for DLPG_OK, false for DLPG_ERR_UNSUPPORTED. Any other
// status, an UNSUPPORTED answer to a reduction dlpg.h promises (AbiRequiresReduce), or an
// UNSUPPORTED message that does not name the dtype and the op fails the current test.
bool ReduceSupported(const dlpg_api_t *api, DT dt, dlpg_reduce_op_t op,
                     DLDevice device = DLDevice{kDLCPU, 0});

double NowSeconds();  // CLOCK_MONOTONIC

// Whether this machine exposes an NVIDIA GPU (device node present).
bool MachineHasGpu();

// Every rank of c's job reaches Meet(c, tag) before any returns (keys under c.name).
void Meet(RankCtx &c, const std::string &tag);

// What the calls in fn write to stderr (the log), through a temporary file.
std::string CaptureStderr(const std::function<void()> &fn);

}  // namespace dlpgt
