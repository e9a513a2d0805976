// In-place collectives of the CUDA IPC path (plugin/nccl/ipc_direct.c): ranks in forked
// processes on cuda:0 read each other's tensors where they are once a collective is large
// enough (DLPG_NCCL_IPC_DIRECT_BYTES; 1 here, so every case of the matrix does). Every op,
// dtype and in/out-of-place case against host references at 2 and 3 ranks (a new cudaMalloc
// per case, so freed and reused addresses too); tensors inside one allocation at several
// offsets, and a new allocation where a mapped one was; and the cases that must run staged
// on every rank with the reason in the INFO log: a tensor from a stream-ordered pool (not
// exportable through the legacy IPC API) and a peer whose host comes late. Skips without a
// GPU.
#include <unistd.h>

#include <fstream>
#include <random>
#include <sstream>

#include "cuda_matrix.h"

namespace {

// The NCCL module's INFO lines go to one file per process; each test sets this up in the
// parent, so the forked ranks read it at their first log line.
struct InfoLog {
  InfoLog() {
    setenv("DLPG_DEBUG", "INFO", 1);
    setenv("DLPG_DEBUG_SUBSYS", "NCCL", 1);
    setenv("DLPG_DEBUG_FILE", "/tmp/dlpg-ipc-direct.%p.log", 1);
  }
  ~InfoLog() {
    unsetenv("DLPG_DEBUG");
    unsetenv("DLPG_DEBUG_SUBSYS");
    unsetenv("DLPG_DEBUG_FILE");
  }
  // This process's log so far (then removed at the end of the rank).
  static std::string Mine() {
    std::string path = "/tmp/dlpg-ipc-direct." + std::to_string(getpid()) + ".log";
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  static void Remove() { unlink(("/tmp/dlpg-ipc-direct." + std::to_string(getpid()) + ".log").c_str()); }
};

const char kInPlace[] = "read the peers' tensors in place";

// A group of world ranks on cuda:0 whose every collective may read in place. The hosts wait
// for each other at such a collective for window_us: 5 s unless a test wants ranks late (on
// the GPU machine, forked ranks drifted past the default 10 ms between two operations).
dlpg_group_t *DirectGroup(Env &e, int world, const char *name, const char *window_us = "5000000") {
  setenv("DLPG_NCCL_IPC_DIRECT_BYTES", "1", 1);
  setenv("DLPG_NCCL_IPC_DIRECT_WAIT_US", window_us, 1);
  CT_CUDA(cudaSetDevice(0));
  return MakeGroup(e.api, e.store, e.rank, world, name, 30);
}

void EveryOpInPlace(int world) {
  NEED_GPUS(1);
  InfoLog log;
  EXPECT_NO_FAILURES(RunProcs(world, world, 240, [world](Env &e) {
    dlpg_group_t *g = DirectGroup(e, world, "ipc_direct_ops");
    Matrix m{e.api, g, Layout{world, e.rank, {0}}};
    m.Run(/*full=*/true, /*fp8=*/WantFp8());
    // Larger than the staging buffers' 16 MiB: one operation in place all the same.
    m.Allreduce(DT::F32, DLPG_SUM, true, 5000011, false);
    m.Allreduce(DT::BF16, DLPG_AVG, false, 9000007, true);
    e.api->group_destroy(g);
    std::string text = InfoLog::Mine();
    CT_EXPECT(text.find(kInPlace) != std::string::npos, "no in-place collective in the log:\n" << text);
    InfoLog::Remove();
  }));
}

TEST(CudaIpcDirect, EveryOpTwoRanks) { EveryOpInPlace(2); }
TEST(CudaIpcDirect, EveryOpThreeRanks) { EveryOpInPlace(3); }

// A float32 vector of n at p (cuda:0).
DLTensor View(void *p, int64_t *n) {
  DLTensor t{};
  t.data = p;
  t.device = {kDLCUDA, 0};
  t.ndim = 1;
  t.dtype = DTDl(DT::F32);
  t.shape = n;
  return t;
}

// Rank r's values of case k: small integers, so sums are exact in float32.
std::vector<float> Values(int r, int k, int64_t n) {
  std::mt19937 gen((unsigned)(r * 7919 + k));
  std::vector<float> v((size_t)n);
  for (auto &x : v) x = (float)(int)(gen() % 201) - 100.0f;
  return v;
}

// out (or in, in place) of an allreduce sum of world ranks' Values(., k, n) on this rank.
void AllreduceAt(Env &e, dlpg_group_t *g, int world, int k, float *in, float *out, int64_t n) {
  auto mine = Values(e.rank, k, n);
  CT_CUDA(cudaMemcpy(in, mine.data(), (size_t)n * 4, cudaMemcpyHostToDevice));
  int64_t shape = n;
  DLTensor ti = View(in, &shape), to = View(out, &shape);
  DLTensor *pi = &ti, *po = &to;
  dlpg_work_t *w = nullptr;
  CT_OK(e.api, e.api->allreduce(g, &pi, in == out ? nullptr : &po, 1, DLPG_SUM, nullptr, &w));
  Wait(e.api, w);
  std::vector<float> want((size_t)n, 0.0f), got((size_t)n);
  for (int r = 0; r < world; r++) {
    auto v = Values(r, k, n);
    for (size_t j = 0; j < want.size(); j++) want[j] += v[j];
  }
  CT_CUDA(cudaMemcpy(got.data(), out, (size_t)n * 4, cudaMemcpyDeviceToHost));
  for (size_t j = 0; j < want.size(); j++)
    if (got[j] != want[j]) {
      CT_EXPECT(false, "case " << k << ": element " << j << " is " << got[j] << ", expected " << want[j]);
      return;
    }
}

// Tensors inside one allocation, as a caching allocator hands them out: several offsets
// (one peer mapping serves them all), then the allocation freed and a new one made, which
// may reuse its addresses: the stale mapping must not be read.
TEST(CudaIpcDirect, SubAllocationsAndReusedAddresses) {
  NEED_GPUS(1);
  InfoLog log;
  EXPECT_NO_FAILURES(RunProcs(2, 2, 180, [](Env &e) {
    dlpg_group_t *g = DirectGroup(e, 2, "ipc_direct_suballoc");
    const int64_t n = 300001;  // 1.2 MB, odd: segments of unequal length
    int k = 0;
    for (int round = 0; round < 4; round++) {
      char *big = nullptr;
      CT_CUDA(cudaMalloc((void **)&big, 8u << 20));
      float *a = (float *)big, *b = (float *)(big + (2u << 20) + 256 * (size_t)round),
            *c = (float *)(big + (5u << 20) + 16);
      AllreduceAt(e, g, 2, k++, a, b, n);
      AllreduceAt(e, g, 2, k++, b, b, n);
      AllreduceAt(e, g, 2, k++, c, a, n);
      CT_CUDA(cudaFree(big));
    }
    e.api->group_destroy(g);
    std::string text = InfoLog::Mine();
    CT_EXPECT(text.find(kInPlace) != std::string::npos, "no in-place collective in the log:\n" << text);
    InfoLog::Remove();
  }));
}

// Rank 1's input comes from a stream-ordered pool (cudaMallocAsync), which the legacy IPC
// API cannot export: both ranks run the allreduce staged, say why, and get the sum; the next
// one, on cudaMalloc memory, reads in place.
TEST(CudaIpcDirect, PoolMemoryRunsStagedOnEveryRank) {
  NEED_GPUS(1);
  InfoLog log;
  EXPECT_NO_FAILURES(RunProcs(2, 2, 120, [](Env &e) {
    dlpg_group_t *g = DirectGroup(e, 2, "ipc_direct_pool");
    const int64_t n = 262147;
    float *in = nullptr, *out = nullptr;
    if (e.rank == 1) {
      CT_CUDA(cudaMallocAsync((void **)&in, (size_t)n * 4, nullptr));
      CT_CUDA(cudaStreamSynchronize(nullptr));
    } else {
      CT_CUDA(cudaMalloc((void **)&in, (size_t)n * 4));
    }
    CT_CUDA(cudaMalloc((void **)&out, (size_t)n * 4));
    AllreduceAt(e, g, 2, 1, in, out, n);
    std::string text = InfoLog::Mine();
    CT_EXPECT(text.find("rank 1's tensor cannot be exported") != std::string::npos,
              "no reason in the log:\n" << text);
    CT_EXPECT(text.find(kInPlace) == std::string::npos, "ran in place:\n" << text);
    AllreduceAt(e, g, 2, 2, out, out, n);
    text = InfoLog::Mine();
    CT_EXPECT(text.find(kInPlace) != std::string::npos, "second allreduce not in place:\n" << text);
    if (e.rank == 1) CT_CUDA(cudaFreeAsync(in, nullptr));
    else CT_CUDA(cudaFree(in));
    CT_CUDA(cudaFree(out));
    e.api->group_destroy(g);
    InfoLog::Remove();
  }));
}

// Rank 1's host reaches the allreduce 300 ms after rank 0's, far past the 20 ms rank 0 waits
// for it here: rank 0 runs it staged (so it does not block on a peer busy elsewhere), and so
// does rank 1, which finds rank 0's vote; the sums are right on both.
TEST(CudaIpcDirect, LatePeerRunsStaged) {
  NEED_GPUS(1);
  InfoLog log;
  EXPECT_NO_FAILURES(RunProcs(2, 2, 120, [](Env &e) {
    dlpg_group_t *g = DirectGroup(e, 2, "ipc_direct_late", "20000");
    const int64_t n = 100003;
    float *in = nullptr, *out = nullptr;
    CT_CUDA(cudaMalloc((void **)&in, (size_t)n * 4));
    CT_CUDA(cudaMalloc((void **)&out, (size_t)n * 4));
    AllreduceAt(e, g, 2, 1, in, out, n);  // maps the group's staging
    if (e.rank == 1) usleep(300000);
    AllreduceAt(e, g, 2, 2, in, out, n);
    std::string text = InfoLog::Mine();
    if (e.rank == 0)
      CT_EXPECT(text.find("rank 1's host did not reach it") != std::string::npos,
                "no reason in the log:\n" << text);
    else
      CT_EXPECT(text.find("rank 0 ran it staged") != std::string::npos, "no reason in the log:\n" << text);
    AllreduceAt(e, g, 2, 3, out, in, n);
    CT_CUDA(cudaFree(in));
    CT_CUDA(cudaFree(out));
    e.api->group_destroy(g);
    InfoLog::Remove();
  }));
}

}  // namespace
