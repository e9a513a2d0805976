// The kernels of the CUDA IPC path (ipc.h says the protocol). CUDA C++ only because kernels
// need it: the host side is C (ipc_issue.c) and reaches these through the extern "C"
// launchers at the end. Every wait is bounded by the GPU's global timer; a failed wait is
// written to the host-mapped status block and every later kernel of the group returns at
// once, so no kernel spins without bound and none traps (a trap would poison the context).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "nccl/ipc.h"

namespace {

constexpr int kThreads = 512;
constexpr int kMaxBlocks = 132;

__device__ __forceinline__ unsigned long long Now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ unsigned long long Load(const unsigned long long *p) {
  return *(const volatile unsigned long long *)p;
}

// Whether this rank's group failed or was aborted (ipc.h's stop word): the kernel then does
// nothing. The host reports an op whose kernels were skipped from the status block.
__device__ __forceinline__ bool Stopped(const unsigned long long *stop) {
  return Load(stop) != 0;
}

__device__ void Fail(dlpg__ipc_status_t *st, unsigned long long *stop, int code, int peer,
                     unsigned long long step) {
  *(volatile unsigned long long *)stop = 1;
  if (st->failed) return;
  st->peer = peer;
  st->step = step;
  __threadfence_system();
  st->failed = code;
  __threadfence_system();
}

// One thread: wait until *p >= v, the group's abort, an earlier failure, or the deadline
// (timeout_ns from now). True when *p reached v.
__device__ bool WaitGe(const unsigned long long *p, unsigned long long v,
                       dlpg__ipc_status_t *st, unsigned long long *stop,
                       unsigned long long timeout_ns, int peer, unsigned long long step) {
  if (Load(p) >= v) {
    __threadfence_system();  // what the peer wrote before its counter, seen after it
    return true;
  }
  unsigned long long t0 = Now();
  for (unsigned n = 1;; n++) {
    if (Load(p) >= v) {
      __threadfence_system();
      return true;
    }
    if ((n & 63) == 0) {
      if (st->abort) {
        Fail(st, stop, DLPG__IPC_FAIL_ABORTED, -1, step);
        return false;
      }
      if (st->failed || Stopped(stop)) return false;
      if (Now() - t0 > timeout_ns) {
        Fail(st, stop, DLPG__IPC_FAIL_TIMEOUT, peer, step);
        return false;
      }
    }
    __nanosleep(n < 1024 ? 64 : 1000);
  }
}

// Copy bytes, 16 at a time when both ends and the size allow. Loads bypass L1 (__ldcg):
// the source may be a peer's buffer, written by another process since this SM last cached
// it.
__device__ void CopyBytes(char *dst, const char *src, long long n) {
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long nth = (long long)gridDim.x * blockDim.x;
  if ((((uintptr_t)dst | (uintptr_t)src | (uintptr_t)n) & 15) == 0) {
    uint4 *d = (uint4 *)dst;
    const uint4 *s = (const uint4 *)src;
    for (long long i = tid; i < n / 16; i += nth) d[i] = __ldcg(s + i);
    return;
  }
  for (long long i = tid; i < n; i += nth) dst[i] = __ldcg(src + i);
}

// 16- and 8-bit floats accumulate in float and round once at the end.
template <typename T> struct Acc { using type = T; };
template <> struct Acc<__half> { using type = float; };
template <> struct Acc<__nv_bfloat16> { using type = float; };
template <> struct Acc<__nv_fp8_e4m3> { using type = float; };
template <> struct Acc<__nv_fp8_e5m2> { using type = float; };

template <typename T> __device__ __forceinline__ typename Acc<T>::type ToAcc(T v) { return v; }
template <> __device__ __forceinline__ float ToAcc<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float ToAcc<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <> __device__ __forceinline__ float ToAcc<__nv_fp8_e4m3>(__nv_fp8_e4m3 v) { return (float)v; }
template <> __device__ __forceinline__ float ToAcc<__nv_fp8_e5m2>(__nv_fp8_e5m2 v) { return (float)v; }
template <typename T> __device__ __forceinline__ T FromAcc(typename Acc<T>::type v) { return (T)v; }
template <> __device__ __forceinline__ __half FromAcc<__half>(float v) { return __float2half(v); }
template <> __device__ __forceinline__ __nv_bfloat16 FromAcc<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);
}
// Out-of-range results saturate to the largest finite value (cuda_fp8.h's conversion).
template <> __device__ __forceinline__ __nv_fp8_e4m3 FromAcc<__nv_fp8_e4m3>(float v) {
  return __nv_fp8_e4m3(v);
}
template <> __device__ __forceinline__ __nv_fp8_e5m2 FromAcc<__nv_fp8_e5m2>(float v) {
  return __nv_fp8_e5m2(v);
}

// One element, bypassing L1 like CopyBytes (fp8 types have no __ldcg of their own).
template <typename T> __device__ __forceinline__ T LoadCg(const T *p) { return __ldcg(p); }
template <> __device__ __forceinline__ __nv_fp8_e4m3 LoadCg(const __nv_fp8_e4m3 *p) {
  __nv_fp8_e4m3 v;
  v.__x = __ldcg((const unsigned char *)p);
  return v;
}
template <> __device__ __forceinline__ __nv_fp8_e5m2 LoadCg(const __nv_fp8_e5m2 *p) {
  __nv_fp8_e5m2 v;
  v.__x = __ldcg((const unsigned char *)p);
  return v;
}

template <typename A> __device__ __forceinline__ A Combine(int rop, A a, A b) {
  switch (rop) {
    case DLPG__IPC_PROD: return a * b;
    case DLPG__IPC_MAX: return a > b ? a : b;
    case DLPG__IPC_MIN: return a < b ? a : b;
    default: return a + b;  // sum, avg
  }
}

// One element's result from its accumulated value: avg divides, bool normalises to 0 or 1.
template <typename T, bool kBool>
__device__ __forceinline__ T Finish(const dlpg__ipc_step_t &p, typename Acc<T>::type a) {
  using A = typename Acc<T>::type;
  if (p.rop == DLPG__IPC_AVG) a = (A)(a / (A)p.size);
  if (kBool) a = a != 0;
  return FromAcc<T>(a);
}

// dst[i] = reduce over ranks q (in rank order, so every rank computes the same bits) of
// buf[q][off + i], for i < len: 16 bytes per load where every address allows it (the scalar
// loop alone moved about 1.1 TB/s at 16 MiB on an H100), then the tail one by one.
// kBool: bytes that are 0 or 1, the result normalised to 0 or 1 (a sum is an or).
template <typename T, bool kBool = false>
__device__ void ReduceInto(const dlpg__ipc_step_t &p, char *const *buf, long long off, T *dst) {
  using A = typename Acc<T>::type;
  constexpr int V = 16 / sizeof(T);
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long nth = (long long)gridDim.x * blockDim.x;
  bool vec = ((uintptr_t)dst & 15) == 0 && ((off * (long long)sizeof(T)) & 15) == 0;
  for (int q = 0; q < p.size; q++) vec = vec && ((uintptr_t)buf[q] & 15) == 0;
  long long head = 0;
  if (vec) {
    const long long nv = p.len / V;
    for (long long i = tid; i < nv; i += nth) {
      uint4 raw = __ldcg((const uint4 *)((const T *)buf[0] + off) + i);
      const T *v = (const T *)&raw;
      A a[V];
      for (int j = 0; j < V; j++) a[j] = ToAcc<T>(v[j]);
      for (int q = 1; q < p.size; q++) {
        raw = __ldcg((const uint4 *)((const T *)buf[q] + off) + i);
        for (int j = 0; j < V; j++) a[j] = Combine<A>(p.rop, a[j], ToAcc<T>(v[j]));
      }
      alignas(16) T o[V];
      for (int j = 0; j < V; j++) o[j] = Finish<T, kBool>(p, a[j]);
      ((uint4 *)dst)[i] = *(const uint4 *)o;
    }
    head = nv * V;
  }
  for (long long i = head + tid; i < p.len; i += nth) {
    A a = ToAcc<T>(LoadCg((const T *)buf[0] + off + i));
    for (int q = 1; q < p.size; q++)
      a = Combine<A>(p.rop, a, ToAcc<T>(LoadCg((const T *)buf[q] + off + i)));
    dst[i] = Finish<T, kBool>(p, a);
  }
}

__device__ void Reduce(const dlpg__ipc_step_t &p, char *const *buf, long long off, char *dst) {
  switch (p.type) {
    case DLPG__IPC_F32: ReduceInto<float>(p, buf, off, (float *)dst); break;
    case DLPG__IPC_F16: ReduceInto<__half>(p, buf, off, (__half *)dst); break;
    case DLPG__IPC_BF16: ReduceInto<__nv_bfloat16>(p, buf, off, (__nv_bfloat16 *)dst); break;
    case DLPG__IPC_F64: ReduceInto<double>(p, buf, off, (double *)dst); break;
    case DLPG__IPC_I32: ReduceInto<int>(p, buf, off, (int *)dst); break;
    case DLPG__IPC_I64: ReduceInto<long long>(p, buf, off, (long long *)dst); break;
    case DLPG__IPC_U8: ReduceInto<unsigned char>(p, buf, off, (unsigned char *)dst); break;
    case DLPG__IPC_I8: ReduceInto<signed char>(p, buf, off, (signed char *)dst); break;
    case DLPG__IPC_BOOL: ReduceInto<unsigned char, true>(p, buf, off, (unsigned char *)dst); break;
    case DLPG__IPC_U32: ReduceInto<unsigned>(p, buf, off, (unsigned *)dst); break;
    case DLPG__IPC_U64: ReduceInto<unsigned long long>(p, buf, off, (unsigned long long *)dst); break;
    case DLPG__IPC_F8E4M3: ReduceInto<__nv_fp8_e4m3>(p, buf, off, (__nv_fp8_e4m3 *)dst); break;
    case DLPG__IPC_F8E5M2: ReduceInto<__nv_fp8_e5m2>(p, buf, off, (__nv_fp8_e5m2 *)dst); break;
  }
}

// Step seq's number, from thread 0 into shared memory: the host's, or for a captured op
// this rank's done + 1 (the step before it finished on this stream, so done is settled).
__device__ __forceinline__ unsigned long long StepSeq(const dlpg__ipc_step_t &p) {
  return p.devseq ? Load(&p.flags[p.rank]->done) + 1 : p.seq;
}

// dst[i] = src[i] * s in T (16-bit floats through float), for i < n: premul_sum's factor,
// this rank's own, applied to its input before the peers sum it.
template <typename T>
__device__ void ScaleInto(T *dst, const T *src, long long n, double s) {
  using A = typename Acc<T>::type;
  const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long nth = (long long)gridDim.x * blockDim.x;
  for (long long i = tid; i < n; i += nth) dst[i] = FromAcc<T>((A)(ToAcc<T>(LoadCg(src + i)) * (A)s));
}

__device__ void Scale(const dlpg__ipc_step_t &p, char *dst, const char *src) {
  switch (p.type) {
    case DLPG__IPC_F32: ScaleInto((float *)dst, (const float *)src, p.len, p.scalar); break;
    case DLPG__IPC_F16: ScaleInto((__half *)dst, (const __half *)src, p.len, p.scalar); break;
    case DLPG__IPC_BF16:
      ScaleInto((__nv_bfloat16 *)dst, (const __nv_bfloat16 *)src, p.len, p.scalar);
      break;
    case DLPG__IPC_F64: ScaleInto((double *)dst, (const double *)src, p.len, p.scalar); break;
    case DLPG__IPC_F8E4M3:
      ScaleInto((__nv_fp8_e4m3 *)dst, (const __nv_fp8_e4m3 *)src, p.len, p.scalar);
      break;
    case DLPG__IPC_F8E5M2:
      ScaleInto((__nv_fp8_e5m2 *)dst, (const __nv_fp8_e5m2 *)src, p.len, p.scalar);
      break;
    default: CopyBytes(dst, src, p.len * p.esize); break;  // rules.c: premul_sum on floats only
  }
}

// This rank's part of step seq into its buffer (every thread of the grid takes a share).
__device__ void PutBody(const dlpg__ipc_step_t &p, unsigned long long seq) {
  const long long seg = p.len * p.esize;
  char *mine = p.buf[seq & 1][p.rank];
  const bool premul = p.rop == DLPG__IPC_PREMUL &&
                      (p.kind == DLPG__IPC_ALLREDUCE || p.kind == DLPG__IPC_REDUCE ||
                       p.kind == DLPG__IPC_REDUCE_SCATTER);
  if (p.kind == DLPG__IPC_REDUCE_SCATTER || p.kind == DLPG__IPC_ALLTOALL) {
    for (int q = 0; q < p.size; q++) {
      const char *from = p.src + q * p.src_stride * p.esize;
      if (premul) Scale(p, mine + q * seg, from);
      else CopyBytes(mine + q * seg, from, seg);
    }
  } else if (premul) {
    Scale(p, mine, p.src);
  } else {
    CopyBytes(mine, p.src, seg);
  }
}

// Step seq's result from the buffers into the output.
__device__ void GetBody(const dlpg__ipc_step_t &p, unsigned long long seq) {
  const long long seg = p.len * p.esize;
  char *const *buf = p.buf[seq & 1];
  switch (p.kind) {
    case DLPG__IPC_ALLREDUCE:
      Reduce(p, buf, 0, p.dst);
      break;
    case DLPG__IPC_REDUCE:
      if (p.rank == p.root) Reduce(p, buf, 0, p.dst);
      break;
    case DLPG__IPC_BROADCAST:
      if (p.rank != p.root) CopyBytes(p.dst, buf[p.root], seg);
      else if (p.dst != p.src) CopyBytes(p.dst, p.src, seg);
      break;
    case DLPG__IPC_ALLGATHER:
      // In place and read where it is (ipc_direct.c), this rank's own part is there already.
      for (int q = 0; q < p.size; q++)
        if (buf[q] != p.dst + q * p.dst_stride * p.esize)
          CopyBytes(p.dst + q * p.dst_stride * p.esize, buf[q], seg);
      break;
    case DLPG__IPC_REDUCE_SCATTER:
      Reduce(p, buf, (long long)p.rank * p.len, p.dst);
      break;
    case DLPG__IPC_ALLTOALL:
      for (int q = 0; q < p.size; q++)
        CopyBytes(p.dst + q * p.dst_stride * p.esize, buf[q] + p.rank * seg, seg);
      break;
  }
}

// Stream-wait mode, one block (p.tell): every thread's writes are in memory, then thread q
// writes this rank's word in peer q's flags block (a stream write would do the same). Like
// the stream write, it is written whether or not the group stopped.
__device__ void Tell(const dlpg__ipc_step_t &p, unsigned long long seq, bool done) {
  __threadfence();
  __syncthreads();
  const int q = threadIdx.x;
  if (q >= p.size || q == p.rank) return;
  dlpg__ipc_flags_t *f = p.flags[q];
  __threadfence_system();
  *(volatile unsigned long long *)(done ? &f->in_done[p.rank] : &f->in_ready[p.rank]) = seq;
  __threadfence_system();
}

__global__ void PutKernel(dlpg__ipc_step_t p) {
  __shared__ int ok;
  __shared__ unsigned long long seq;
  if (!dlpg__ipc_writes(&p)) {
    if (p.tell) Tell(p, p.seq, false);
    return;
  }
  // Thread 0 alone reads the status and waits; the block follows its verdict (threads that
  // read the status apart could disagree, and a barrier must see them all).
  if (threadIdx.x == 0) {
    seq = StepSeq(p);
    ok = !Stopped(p.stop);
    // Buffer s%2 last held step s-2: every peer must have read it.
    if (seq > 2 && !p.nowait)
      for (int q = 0; q < p.size && ok; q++)
        if (q != p.rank)
          ok = WaitGe(&p.flags[q]->done, seq - 2, p.status, p.stop, p.timeout_ns, q, seq);
  }
  __syncthreads();
  if (ok) PutBody(p, seq);
  if (p.tell) Tell(p, seq, false);
}

__global__ void GetKernel(dlpg__ipc_step_t p) {
  __shared__ int ok;
  __shared__ unsigned long long seq;
  // The put kernel before this one on the stream finished: this rank's part is in place.
  // Every block publishes (the same value), so no block's progress hangs on another's being
  // scheduled (with MPS, peers' spinning blocks may hold the other SMs).
  if (threadIdx.x == 0) {
    seq = StepSeq(p);
    ok = !Stopped(p.stop);
    if (ok && !p.nowait) {
      __threadfence_system();
      *(volatile unsigned long long *)&p.flags[p.rank]->ready = seq;
      __threadfence_system();
    }
    for (int q = 0; q < p.size && ok && !p.nowait; q++)
      if (q != p.rank && dlpg__ipc_reads(&p, q))
        ok = WaitGe(&p.flags[q]->ready, seq, p.status, p.stop, p.timeout_ns, q, seq);
  }
  __syncthreads();
  if (ok) GetBody(p, seq);
  if (p.tell) Tell(p, seq, true);
}

// A whole collective step in one block (kernel-wait mode, small steps): wait until the
// peers read this buffer's previous step, put, publish ready, wait for the peers' ready,
// get, publish done. One launch instead of three: under MPS a step is then mostly the
// peers' answer, not launches.
__global__ void StepKernel(dlpg__ipc_step_t p) {
  __shared__ int ok;
  __shared__ unsigned long long seq;
  dlpg__ipc_flags_t *mine = p.flags[p.rank];
  if (threadIdx.x == 0) {
    seq = StepSeq(p);
    ok = !Stopped(p.stop);
    if (seq > 2 && dlpg__ipc_writes(&p))
      for (int q = 0; q < p.size && ok; q++)
        if (q != p.rank) ok = WaitGe(&p.flags[q]->done, seq - 2, p.status, p.stop, p.timeout_ns, q, seq);
  }
  __syncthreads();
  if (!ok) return;
  if (dlpg__ipc_writes(&p)) PutBody(p, seq);
  // Every thread's part is in memory before thread 0 says so.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    *(volatile unsigned long long *)&mine->ready = seq;
    __threadfence_system();
    for (int q = 0; q < p.size && ok; q++)
      if (q != p.rank && dlpg__ipc_reads(&p, q))
        ok = WaitGe(&p.flags[q]->ready, seq, p.status, p.stop, p.timeout_ns, q, seq);
  }
  __syncthreads();
  if (!ok) return;
  GetBody(p, seq);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    *(volatile unsigned long long *)&mine->done = seq;
    __threadfence_system();
  }
}

__global__ void FlagKernel(unsigned long long *flag, unsigned long long v, const unsigned long long *stop) {
  if (Stopped(stop)) return;
  if (v == 0) v = Load(flag) + 1;
  __threadfence_system();
  *(volatile unsigned long long *)flag = v;
  __threadfence_system();
}

__global__ void SendKernel(dlpg__ipc_chunk_t c) {
  __shared__ int ok;
  __shared__ unsigned long long k;
  if (threadIdx.x == 0) {
    k = c.devseq ? Load(&c.mine->sent[c.peer]) + 1 : c.k;
    ok = !Stopped(c.stop) && (k <= 2 || c.nowait || WaitGe(&c.theirs->taken[c.rank], k - 2, c.status, c.stop, c.timeout_ns, c.peer, k));
  }
  __syncthreads();
  if (ok) CopyBytes(c.box[k & 1], c.user, c.bytes);
}

__global__ void RecvKernel(dlpg__ipc_chunk_t c) {
  __shared__ int ok;
  __shared__ unsigned long long k;
  if (threadIdx.x == 0) {
    k = c.devseq ? Load(&c.mine->taken[c.peer]) + 1 : c.k;
    ok = !Stopped(c.stop) && (c.nowait || WaitGe(&c.theirs->sent[c.rank], k, c.status, c.stop, c.timeout_ns, c.peer, k));
  }
  __syncthreads();
  if (ok) CopyBytes(c.user, c.box[k & 1], c.bytes);
}

int Blocks(long long bytes) {
  long long b = (bytes + 16LL * kThreads - 1) / (16LL * kThreads);
  return b < 1 ? 1 : b > kMaxBlocks ? kMaxBlocks : (int)b;
}

}  // namespace

extern "C" cudaError_t dlpg__ipc_launch_put(const dlpg__ipc_step_t *p, cudaStream_t s) {
  long long bytes = p->len * p->esize;
  if (p->kind == DLPG__IPC_REDUCE_SCATTER || p->kind == DLPG__IPC_ALLTOALL) bytes *= p->size;
  PutKernel<<<p->tell ? 1 : Blocks(bytes), kThreads, 0, s>>>(*p);
  return cudaGetLastError();
}

extern "C" cudaError_t dlpg__ipc_launch_get(const dlpg__ipc_step_t *p, cudaStream_t s) {
  long long bytes = p->len * p->esize;
  if (p->kind == DLPG__IPC_ALLGATHER || p->kind == DLPG__IPC_ALLTOALL) bytes *= p->size;
  GetKernel<<<p->tell ? 1 : Blocks(bytes), kThreads, 0, s>>>(*p);
  return cudaGetLastError();
}

extern "C" cudaError_t dlpg__ipc_launch_step(const dlpg__ipc_step_t *p, cudaStream_t s) {
  StepKernel<<<1, kThreads, 0, s>>>(*p);
  return cudaGetLastError();
}

extern "C" cudaError_t dlpg__ipc_launch_flag(unsigned long long *flag, unsigned long long v,
                                             const unsigned long long *stop, cudaStream_t s) {
  FlagKernel<<<1, 1, 0, s>>>(flag, v, stop);
  return cudaGetLastError();
}

extern "C" cudaError_t dlpg__ipc_launch_send(const dlpg__ipc_chunk_t *c, cudaStream_t s) {
  SendKernel<<<Blocks(c->bytes), kThreads, 0, s>>>(*c);
  return cudaGetLastError();
}

extern "C" cudaError_t dlpg__ipc_launch_recv(const dlpg__ipc_chunk_t *c, cudaStream_t s) {
  RecvKernel<<<Blocks(c->bytes), kThreads, 0, s>>>(*c);
  return cudaGetLastError();
}

extern "C" cudaError_t dlpg__ipc_preload(void) {
  const void *kernels[] = {(const void *)PutKernel, (const void *)GetKernel, (const void *)StepKernel,
                           (const void *)FlagKernel, (const void *)SendKernel, (const void *)RecvKernel};
  for (const void *k : kernels) {
    cudaFuncAttributes a;
    cudaError_t e = cudaFuncGetAttributes(&a, k);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}
