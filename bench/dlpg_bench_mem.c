/* Buffers and streams: one input and one output of max_bytes per local tensor (host memory
 * for -D cpu, device memory for -D cuda), allocated once and reused by every size, plus one
 * host staging buffer for checks. Inputs are filled once: element i of contribution c has
 * the same value at every size, so each size uses a prefix of the same data, and operations
 * run out of place, so inputs never change. */

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "dlpg_bench.h"
#ifdef DLPG_BENCH_CUDA
#include <cuda_runtime.h>
#endif

double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#ifdef DLPG_BENCH_CUDA
#define CUDA_TRY(call)                                                                   \
  do {                                                                                   \
    cudaError_t e_ = (call);                                                             \
    if (e_ != cudaSuccess) {                                                             \
      fprintf(stderr, "dlpg-bench: %s failed: %s%s\n", #call, cudaGetErrorString(e_),    \
              e_ == cudaErrorInsufficientDriver || e_ == cudaErrorNoDevice                 \
                  ? " (--device cuda needs a usable GPU and driver, which this host lacks)"   \
                  : "");                                                                 \
      return -1;                                                                         \
    }                                                                                    \
  } while (0)
#endif

/* The largest buffer any size needs: every op's counted bytes are at most one buffer
 * (allgather counts its output, reduce_scatter its input), rounded up to whole blocks; but
 * a skewed alltoallv's heavy receiver gets up to --skew times the counted (mean) bytes. */
static size_t buffer_bytes(const bench_ctx_t *x) {
  size_t es = bench_dtype_size(x->o->dtype), b = x->o->max_bytes;
  if (x->o->op == BENCH_ALLTOALLV) b *= (size_t)x->o->skew;
  size_t align = es * (size_t)x->nparts;
  b = (b + align - 1) / align * align;
  return b ? b : align;
}

int bench_mem_setup(bench_ctx_t *x) {
  const bench_opts_t *o = x->o;
  size_t bytes = buffer_bytes(x), es = bench_dtype_size(o->dtype);
  x->host = malloc(bytes);
  if (!x->host) {
    fprintf(stderr, "dlpg-bench: rank %d: cannot allocate %zu host bytes\n", x->rank, bytes);
    return -1;
  }
  for (int g = 0; g < o->gpus; g++) {
    int c = x->rank * o->gpus + g;
    bench_fill(o->dtype, o->redop, c, x->host, bytes / es);
    if (!o->cuda) {
      x->in[g] = malloc(bytes);
      x->out[g] = malloc(bytes);
      if (!x->in[g] || !x->out[g]) {
        fprintf(stderr, "dlpg-bench: rank %d: cannot allocate 2 x %zu bytes\n", x->rank, bytes);
        return -1;
      }
      memcpy(x->in[g], x->host, bytes);
      memset(x->out[g], 0, bytes);
      continue;
    }
#ifdef DLPG_BENCH_CUDA
    cudaStream_t s;
    CUDA_TRY(cudaSetDevice(x->dev[g]));
    CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    x->stream[g] = s;
    CUDA_TRY(cudaMalloc(&x->in[g], bytes));
    CUDA_TRY(cudaMalloc(&x->out[g], bytes));
    CUDA_TRY(cudaMemcpy(x->in[g], x->host, bytes, cudaMemcpyHostToDevice));
    CUDA_TRY(cudaMemset(x->out[g], 0, bytes));
    CUDA_TRY(cudaDeviceSynchronize());
#else
    fprintf(stderr, "dlpg-bench: -D cuda: this dlpg-bench was built without CUDA\n");
    return -1;
#endif
  }
  return 0;
}

void bench_mem_teardown(bench_ctx_t *x) {
  for (int g = 0; g < x->o->gpus; g++) {
    if (!x->o->cuda) {
      free(x->in[g]);
      free(x->out[g]);
      continue;
    }
#ifdef DLPG_BENCH_CUDA
    cudaSetDevice(x->dev[g]);
    if (x->in[g]) cudaFree(x->in[g]);
    if (x->out[g]) cudaFree(x->out[g]);
    if (x->stream[g]) cudaStreamDestroy((cudaStream_t)x->stream[g]);
#endif
    x->in[g] = x->out[g] = x->stream[g] = NULL;
  }
  free(x->host);
  x->host = NULL;
}

int bench_mem_clear_out(bench_ctx_t *x, size_t bytes) {
  for (int g = 0; g < x->o->gpus; g++) {
    if (!x->o->cuda) {
      memset(x->out[g], 0, bytes);
      continue;
    }
#ifdef DLPG_BENCH_CUDA
    CUDA_TRY(cudaSetDevice(x->dev[g]));
    CUDA_TRY(cudaMemsetAsync(x->out[g], 0, bytes, (cudaStream_t)x->stream[g]));
    CUDA_TRY(cudaStreamSynchronize((cudaStream_t)x->stream[g]));
#endif
  }
  return 0;
}

int bench_mem_fetch_out(bench_ctx_t *x, int g, size_t bytes) {
  const void *src = x->o->inplace ? x->in[g] : x->out[g];
  if (!x->o->cuda) {
    memcpy(x->host, src, bytes);
    return 0;
  }
#ifdef DLPG_BENCH_CUDA
  CUDA_TRY(cudaSetDevice(x->dev[g]));
  CUDA_TRY(cudaMemcpy(x->host, src, bytes, cudaMemcpyDeviceToHost));
#endif
  return 0;
}

int bench_mem_restore_in(bench_ctx_t *x, size_t count) {
  const bench_opts_t *o = x->o;
  for (int g = 0; g < o->gpus; g++) {
    int c = x->rank * o->gpus + g;
    if (!o->cuda) {
      bench_fill(o->dtype, o->redop, c, x->in[g], count);
      continue;
    }
#ifdef DLPG_BENCH_CUDA
    bench_fill(o->dtype, o->redop, c, x->host, count);
    CUDA_TRY(cudaSetDevice(x->dev[g]));
    /* On the operations' stream, and waited for: a cudaMemcpy from pageable memory may return
     * before its DMA lands, and the legacy stream it uses does not order the bench's
     * non-blocking stream, so the next operation could read the old input. */
    CUDA_TRY(cudaMemcpyAsync(x->in[g], x->host, count * bench_dtype_size(o->dtype),
                             cudaMemcpyHostToDevice, (cudaStream_t)x->stream[g]));
    CUDA_TRY(cudaStreamSynchronize((cudaStream_t)x->stream[g]));
#endif
  }
  return 0;
}

/* Wait for everything issued on the bench's streams (CPU: operations issued with work ==
 * NULL have already completed). */
int bench_sync(bench_ctx_t *x) {
  if (!x->o->cuda) return 0;
#ifdef DLPG_BENCH_CUDA
  for (int g = 0; g < x->o->gpus; g++) {
    CUDA_TRY(cudaSetDevice(x->dev[g]));
    CUDA_TRY(cudaStreamSynchronize((cudaStream_t)x->stream[g]));
  }
#endif
  return 0;
}
