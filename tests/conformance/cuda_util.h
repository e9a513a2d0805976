// Helpers of the CUDA conformance tests (test_cuda.cc): scenarios run in forked children so
// the googletest parent never initialises CUDA (a process that forks after CUDA is
// initialised cannot use CUDA in the child). Failures inside a child are collected as text
// and sent to the parent through a pipe; the parent kills children that pass the deadline.
#pragma once

#include <cuda_runtime_api.h>
#include <dlpack/dlpack.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "api_loader.h"

namespace cudat {

// ------------------------------------------------------------------ failures in children

struct Fatal : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Every failed check of this child process (any thread).
void AddFailure(const std::string &msg);
std::vector<std::string> Failures();

#define CT_STR(x) (static_cast<std::ostringstream &&>(std::ostringstream() << x)).str()
// Record a failure and go on.
#define CT_EXPECT(cond, msg)                                                         \
  do {                                                                               \
    if (!(cond))                                                                     \
      ::cudat::AddFailure(CT_STR(__FILE__ << ":" << __LINE__ << ": " << #cond << ": " << msg)); \
  } while (0)
// Record a failure and leave the scenario (throws Fatal).
#define CT_ASSERT(cond, msg)                                                         \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::string m_ = CT_STR(__FILE__ << ":" << __LINE__ << ": " << #cond << ": " << msg); \
      ::cudat::AddFailure(m_);                                                       \
      throw ::cudat::Fatal(m_);                                                      \
    }                                                                                \
  } while (0)
#define CT_OK(api, expr)                                                              \
  do {                                                                                \
    dlpg_status_t s_ = (expr);                                                        \
    CT_ASSERT(s_ == DLPG_OK, #expr << " -> " << (api)->status_name(s_) << ": "        \
                                   << (api)->last_error());                           \
  } while (0)
#define CT_CUDA(expr)                                                                 \
  do {                                                                                \
    cudaError_t e_ = (expr);                                                          \
    CT_ASSERT(e_ == cudaSuccess, #expr << " -> " << cudaGetErrorString(e_));          \
  } while (0)

// ------------------------------------------------------------------ running ranks

struct GpuInfo {
  int count = 0;      // 0 when CUDA reports an error or no device
  int cc_major = 0;   // of device 0
};
// Probed once, in a forked child, so this process stays free of CUDA.
const GpuInfo &Gpus();

struct Env {
  const dlpg_api_t *api = nullptr;
  int rank = 0, size = 1;
  dlpg_store_t *store = nullptr;  // this rank's store (rank 0's serves)
  int port = 0;
};

// Run fn as ranks 0..nprocs-1 of world `world` (nprocs <= world: missing ranks are missing
// peers) in forked children meeting through a TCP store that child 0 serves. Returns the
// failure texts of all children (empty: success). deadline_s bounds the whole run.
std::vector<std::string> RunProcs(int nprocs, int world, double deadline_s,
                                  const std::function<void(Env &)> &fn);
// Run fn in one forked child (it may start threads, open stores, use several GPUs).
std::vector<std::string> RunChild(double deadline_s, const std::function<void()> &fn);
// Open the stores of `world` ranks for threads of one process: rank 0 serves.
dlpg_store_t *OpenServing(const dlpg_api_t *api, int *port);
dlpg_store_t *OpenClient(const dlpg_api_t *api, int port);

// ------------------------------------------------------------------ dtypes and data

enum class DT { F32, F16, BF16, I32, I64, U8, F64, I8, BOOL, F8E4M3, F8E5M2 };
const char *DTName(DT dt);
size_t DTSize(DT dt);
DLDataType DTDl(DT dt);
bool DTIsFloat(DT dt);
bool DTIsFp8(DT dt);
std::vector<uint8_t> Encode(DT dt, const std::vector<double> &v);
std::vector<double> Decode(DT dt, const std::vector<uint8_t> &b);

// The value of element j of contribution c in case k: small numbers every dtype holds
// exactly, so reductions compare exactly.
double Value(DT dt, dlpg_reduce_op_t op, uint64_t k, int c, int64_t j);
double Reduce(DT dt, dlpg_reduce_op_t op, const std::vector<double> &xs);

// A device buffer with its DLTensor.
struct DevTensor {
  void *ptr = nullptr;
  int dev = 0;
  int64_t shape = 0;
  DT dt = DT::F32;
  DLTensor t{};
  DevTensor() = default;
  DevTensor(int dev, DT dt, int64_t n);
  ~DevTensor();
  DevTensor(const DevTensor &) = delete;
  DevTensor &operator=(const DevTensor &) = delete;
  DLTensor *dl() { return &t; }
  size_t bytes() const { return (size_t)shape * DTSize(dt); }
  void Upload(const std::vector<double> &v);
  std::vector<double> Download();
};

}  // namespace cudat
