// What it costs two processes on ONE GPU to wait for each other, by each mechanism a
// stream-ordered collective between them could use. Without MPS their CUDA contexts take
// turns on the GPU, so the cost of a wait is mostly how soon the GPU switches from a context
// that waits to the one that can proceed; this measures it instead of guessing.
//
// Each case is a ping-pong of R round trips between rank 0 and rank 1 (two processes forked
// before either touches CUDA, GPU 0), all R queued on the streams at once (as a run of
// back-to-back collectives would be), timed on rank 0 from after a host barrier to the
// stream's completion; median over 5 runs, microseconds per round trip:
//   memop-dev   cuStreamWriteValue64 into the peer's word (device memory, CUDA IPC) and
//               cuStreamWaitValue64 on one's own
//   memop-host  the same with both words in shared host memory (cudaHostRegister)
//   kernel-spin a 1-thread kernel writes the peer's word and spins on its own (bounded by the
//               GPU timer); every round trip is two kernels
//   host-poll   the host of each rank polls a host word its peer's stream wrote and only
//               then queues its own write: no stream ever waits (R queued one at a time)
//   ipc-event   cudaStreamWaitEvent on the peer's interprocess event, the hosts in lockstep
//               through shared host memory so each wait names the right record
//   one-proc    memop-dev's pattern between two streams of ONE process (no context switch)
//   idle-kernels: both processes launch R empty kernels with no dependency; us per kernel,
//               against one process alone (what taking turns costs when nobody waits)
//
// Build: nvcc -O2 -arch=sm_90 -o cuda-share-probe bench/cuda_share_probe.cu
// Run:   cuda-share-probe [R]   (R default 200)
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

struct Shared {
  std::atomic<int> barrier[64];
  std::atomic<unsigned long long> host_word[2];  // host-poll: written by each rank's stream
  std::atomic<unsigned long long> rec[2];        // ipc-event: records made so far
  unsigned long long memop_word[2][16];          // memop-host: rank r waits on [r][0]
  cudaIpcMemHandle_t dev_handle[2];
  cudaIpcEventHandle_t ev_handle[2];
  double result[2][16];
};

Shared *g;
int g_rank;

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "rank %d: %s:%d %s: %s\n", g_rank, __FILE__, __LINE__, #x, cudaGetErrorString(e_)); _exit(1); } } while (0)
#define CU(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { \
  fprintf(stderr, "rank %d: %s:%d %s: CUresult %d\n", g_rank, __FILE__, __LINE__, #x, (int)r_); _exit(1); } } while (0)

// The stream memory operations from the driver through the runtime (no libcuda to link).
typedef CUresult (*MemopFn)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
MemopFn cuStreamWaitValue64_p, cuStreamWriteValue64_p;
void LoadMemops() {
  void *w = nullptr, *v = nullptr;
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", &w, 12000, cudaEnableDefault, &q));
  CK(cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &v, 12000, cudaEnableDefault, &q));
  cuStreamWaitValue64_p = (MemopFn)w;
  cuStreamWriteValue64_p = (MemopFn)v;
}

int g_bar_n = 0;
void Barrier() {
  int i = g_bar_n++ % 64;
  g->barrier[i].fetch_add(1);
  while (g->barrier[i].load() < 2) {}
  // Reset a later slot for reuse (both ranks pass slot i before anyone reaches i+32).
  g->barrier[(i + 32) % 64].store(0);
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

__global__ void Empty() {}
__global__ void Copy8(unsigned long long *d, const unsigned long long *s) { if (threadIdx.x == 0 && blockIdx.x == 0) *d = *s; }

__global__ void SpinPing(volatile unsigned long long *peer, volatile unsigned long long *mine,
                         unsigned long long k, bool first, int *failed) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  if (first) { __threadfence_system(); *peer = k; __threadfence_system(); }
  while (*mine < k) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > 2000000000ull) { *failed = 1; return; }
  }
  if (!first) { __threadfence_system(); *peer = k; __threadfence_system(); }
}

// One round trip pattern per rank; rank 0 pings first.
template <typename F> double TimeRuns(int R, F queue_all, cudaStream_t s) {
  std::vector<double> t;
  for (int run = 0; run < 6; run++) {
    Barrier();
    double t0 = Now();
    queue_all(run);
    CK(cudaStreamSynchronize(s));
    double dt = (Now() - t0) / R * 1e6;
    if (run > 0) t.push_back(dt);  // the first is the warm-up
    Barrier();
  }
  return Median(t);
}

void Child(int rank, int R) {
  g_rank = rank;
  int peer = 1 - rank;
  CK(cudaSetDevice(0));
  LoadMemops();
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // Device words: each rank exports 64 words; run r uses fresh values (base + k).
  unsigned long long *mine_d;
  CK(cudaMalloc(&mine_d, 4096));
  CK(cudaMemset(mine_d, 0, 4096));
  CK(cudaDeviceSynchronize());
  CK(cudaIpcGetMemHandle(&g->dev_handle[rank], mine_d));
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventInterprocess));
  CK(cudaIpcGetEventHandle(&g->ev_handle[rank], ev));
  CK(cudaHostRegister((void *)g, sizeof(Shared), cudaHostRegisterPortable | cudaHostRegisterMapped));
  Barrier();
  unsigned long long *peer_d;
  CK(cudaIpcOpenMemHandle((void **)&peer_d, g->dev_handle[peer], cudaIpcMemLazyEnablePeerAccess));
  cudaEvent_t peer_ev;
  CK(cudaIpcOpenEventHandle(&peer_ev, g->ev_handle[peer]));
  int *failed;
  CK(cudaMallocManaged(&failed, sizeof(int)));
  *failed = 0;
  unsigned long long *host_mine, *host_peer;
  CK(cudaHostGetDevicePointer((void **)&host_mine, (void *)&g->memop_word[rank][0], 0));
  CK(cudaHostGetDevicePointer((void **)&host_peer, (void *)&g->memop_word[peer][0], 0));
  Barrier();
  int c = 0;  // case index

  auto memop = [&](unsigned long long *peer_w, unsigned long long *mine_w) {
    return TimeRuns(R, [&](int run) {
      unsigned long long b = (unsigned long long)run * R;
      for (int k = 1; k <= R; k++) {
        if (rank == 0) {
          CU(cuStreamWriteValue64_p((CUstream)s, (CUdeviceptr)peer_w, b + k, 0));
          CU(cuStreamWaitValue64_p((CUstream)s, (CUdeviceptr)mine_w, b + k, CU_STREAM_WAIT_VALUE_GEQ));
        } else {
          CU(cuStreamWaitValue64_p((CUstream)s, (CUdeviceptr)mine_w, b + k, CU_STREAM_WAIT_VALUE_GEQ));
          CU(cuStreamWriteValue64_p((CUstream)s, (CUdeviceptr)peer_w, b + k, 0));
        }
      }
    }, s);
  };
  // memop-dev
  g->result[rank][c++] = memop(peer_d, mine_d);
  CK(cudaMemset(mine_d, 0, 4096)); CK(cudaDeviceSynchronize()); Barrier();
  // memop-host
  g->result[rank][c++] = memop(host_peer, host_mine);
  Barrier();
  // kernel-spin (fewer round trips: each may cost a time slice without MPS)
  {
    int Rk = R / 10 < 10 ? 10 : R / 10;
    CK(cudaMemset(mine_d, 0, 4096)); CK(cudaDeviceSynchronize()); Barrier();
    g->result[rank][c++] = TimeRuns(Rk, [&](int run) {
      unsigned long long b = (unsigned long long)run * Rk;
      for (int k = 1; k <= Rk; k++)
        SpinPing<<<1, 1, 0, s>>>(peer_d, mine_d, b + k, rank == 0, failed);
    }, s);
    if (*failed) fprintf(stderr, "rank %d: kernel-spin timed out\n", rank);
  }
  Barrier();
  // host-poll: queue one write, poll for the answer
  {
    unsigned long long *hw_d;
    CK(cudaHostGetDevicePointer((void **)&hw_d, (void *)&g->host_word[peer], 0));
    g->result[rank][c++] = TimeRuns(R, [&](int run) {
      unsigned long long b = (unsigned long long)run * R;
      for (int k = 1; k <= R; k++) {
        if (rank == 0) {
          CU(cuStreamWriteValue64_p((CUstream)s, (CUdeviceptr)hw_d, b + k, 0));
          while (g->host_word[rank].load() < b + k) {}
        } else {
          while (g->host_word[rank].load() < b + k) {}
          CU(cuStreamWriteValue64_p((CUstream)s, (CUdeviceptr)hw_d, b + k, 0));
        }
      }
    }, s);
  }
  Barrier();
  // ipc-event: rank 0 records after waiting for rank 1's last record, and so on
  {
    g->rec[0] = g->rec[1] = 0;
    Barrier();
    g->result[rank][c++] = TimeRuns(R, [&](int run) {
      unsigned long long b = (unsigned long long)run * R;
      for (int k = 1; k <= R; k++) {
        if (rank == 1 || k > 1) {
          // Wait for the peer's record k (rank 1) or k-1 (rank 0), then order the stream on it.
          unsigned long long want = rank == 1 ? b + k : b + k - 1;
          while (g->rec[peer].load() < want) {}
          CK(cudaStreamWaitEvent(s, peer_ev, 0));
        }
        Empty<<<1, 1, 0, s>>>();
        CK(cudaEventRecord(ev, s));
        g->rec[rank].store(b + k);
      }
      if (rank == 0) {  // the last round trip: wait for rank 1's last record
        while (g->rec[peer].load() < b + R) {}
        CK(cudaStreamWaitEvent(s, peer_ev, 0));
      }
    }, s);
  }
  Barrier();
  // idle-kernels: both launch R empty kernels; then rank 0 alone
  {
    g->result[rank][c++] = TimeRuns(R * 5, [&](int) {
      for (int k = 0; k < R * 5; k++) Empty<<<1, 32, 0, s>>>();
    }, s) ;
    std::vector<double> t;
    for (int run = 0; run < 6; run++) {
      Barrier();
      if (rank == 0) {
        double t0 = Now();
        for (int k = 0; k < R * 5; k++) Empty<<<1, 32, 0, s>>>();
        CK(cudaStreamSynchronize(s));
        if (run) t.push_back((Now() - t0) / (R * 5) * 1e6);
      }
      Barrier();
    }
    g->result[rank][c++] = rank == 0 ? Median(t) : 0;
  }
  Barrier();
  // step patterns: one collective step as the IPC path's stream-wait mode queues it
  // (wait done >= k-2, put, write ready, wait ready, get, write done), with variants.
  {
    char *work;
    CK(cudaMalloc(&work, 1 << 20));
    cudaEvent_t own;
    CK(cudaEventCreateWithFlags(&own, cudaEventDisableTiming));
    // flags: 1 kernels (1x32), 2 kernels (132x512), 4 copy-engine 8 B copies instead of kernels,
    // 8 an event record + wait of this process's own per step, 16 no memops at all (kernels only)
    int variants[] = {16 | 1, 0, 1, 2, 4, 1 | 8};
    for (int v : variants) {
      CK(cudaMemset(mine_d, 0, 4096)); CK(cudaDeviceSynchronize()); Barrier();
      unsigned long long *in_ready = mine_d, *in_done = mine_d + 16;
      unsigned long long *peer_ready = peer_d, *peer_done = peer_d + 16;
      auto body = [&](unsigned long long kk, int k, int f) {
        auto work_step = [&]() {
          if (f & 1) Copy8<<<1, 32, 0, s>>>((unsigned long long *)work, (const unsigned long long *)(work + 64));
          if (f & 2) Copy8<<<132, 512, 0, s>>>((unsigned long long *)work, (const unsigned long long *)(work + 64));
          if (f & 4) CK(cudaMemcpyAsync(work, work + 64, 8, cudaMemcpyDeviceToDevice, s));
        };
        if (f & 8) CK(cudaStreamWaitEvent(s, own, 0));
        if (!(f & 16) && k > 2) CU(cuStreamWaitValue64_p((CUstream)s, (CUdeviceptr)in_done, kk - 2, CU_STREAM_WAIT_VALUE_GEQ));
        work_step();
        if (!(f & 16)) {
          CU(cuStreamWriteValue64_p((CUstream)s, (CUdeviceptr)peer_ready, kk, 0));
          CU(cuStreamWaitValue64_p((CUstream)s, (CUdeviceptr)in_ready, kk, CU_STREAM_WAIT_VALUE_GEQ));
        }
        work_step();
        if (!(f & 16)) CU(cuStreamWriteValue64_p((CUstream)s, (CUdeviceptr)peer_done, kk, 0));
        if (f & 8) CK(cudaEventRecord(own, s));
      };
      g->result[rank][c++] = TimeRuns(R, [&](int run) {
        unsigned long long b = (unsigned long long)run * (R + 4);
        for (int k = 1; k <= R; k++) body(b + k, k, v);
      }, s);
    }
    CK(cudaFree(work));
  }
  Barrier();
  // one-proc: rank 0 alone, two streams of its own context, memop ping-pong in device memory
  if (rank == 0) {
    cudaStream_t s2;
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    unsigned long long *w;
    CK(cudaMalloc(&w, 256));
    CK(cudaMemset(w, 0, 256));
    CK(cudaDeviceSynchronize());
    std::vector<double> t;
    for (int run = 0; run < 6; run++) {
      unsigned long long b = (unsigned long long)run * R;
      double t0 = Now();
      for (int k = 1; k <= R; k++) {
        CU(cuStreamWriteValue64_p((CUstream)s, (CUdeviceptr)(w + 16), b + k, 0));
        CU(cuStreamWaitValue64_p((CUstream)s, (CUdeviceptr)w, b + k, CU_STREAM_WAIT_VALUE_GEQ));
        CU(cuStreamWaitValue64_p((CUstream)s2, (CUdeviceptr)(w + 16), b + k, CU_STREAM_WAIT_VALUE_GEQ));
        CU(cuStreamWriteValue64_p((CUstream)s2, (CUdeviceptr)w, b + k, 0));
      }
      CK(cudaStreamSynchronize(s));
      if (run) t.push_back((Now() - t0) / R * 1e6);
    }
    g->result[rank][c++] = Median(t);
  }
  Barrier();
  CK(cudaIpcCloseMemHandle(peer_d));
  _exit(0);
}

}  // namespace

int main(int argc, char **argv) {
  int R = argc > 1 ? atoi(argv[1]) : 200;
  g = (Shared *)mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  memset((void *)g, 0, sizeof(Shared));
  pid_t pid[2];
  for (int r = 0; r < 2; r++) {
    pid[r] = fork();
    if (pid[r] == 0) {
      alarm(120);
      Child(r, R);
    }
  }
  int bad = 0;
  for (int r = 0; r < 2; r++) {
    int st = 0;
    waitpid(pid[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) { fprintf(stderr, "rank %d failed (status %d)\n", r, st); bad = 1; }
  }
  const char *names[] = {"memop-dev", "memop-host", "kernel-spin", "host-poll", "ipc-event",
                         "idle-kernels (us/kernel, both)", "idle-kernels (us/kernel, rank 0 alone)",
                         "step: kernels only, no memops (us/op)", "step: memops only", "step: memops + 1x32 kernels",
                         "step: memops + 132x512 kernels", "step: memops + copy-engine copies",
                         "step: memops + 1x32 kernels + own event", "one-proc (two streams)"};
  printf("| case | rank 0 (us per round trip) |\n|---|---:|\n");
  for (int c = 0; c < 14; c++) printf("| %s | %.2f |\n", names[c], g->result[0][c]);
  return bad;
}
