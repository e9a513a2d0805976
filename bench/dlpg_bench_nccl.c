/* The NCCL baseline (--baseline nccl): the same loop over the same buffers and streams,
 * calling NCCL directly on its own communicator (one per local GPU, nparts ranks, NCCL rank
 * rank * gpus + i, as dlpg keys its own). Its unique id travels through the same dlpg store,
 * so dlpg and the baseline run in one invocation and can be interleaved size by size. */
#include <stdlib.h>
#include <string.h>
#include "dlpg_bench.h"

#ifndef DLPG_BENCH_NCCL

/* A build without the baseline (no NCCL, or a wheel's dlpg-bench, which must start where no
 * libnccl is on the loader's path): setup refuses the baseline, so issue is never reached,
 * and teardown (always called) has nothing to release. The signatures are the NCCL build's. */
int bench_nccl_setup(bench_ctx_t *x) {
  (void)x;
  fprintf(stderr, "dlpg-bench: --baseline nccl: this dlpg-bench was built without NCCL "
          "(a wheel's is: build the project with CMake for the baseline)\n");
  return -1;
}
int bench_nccl_issue(bench_ctx_t *x, size_t count) {
  (void)x;
  (void)count;
  return -1;
}
void bench_nccl_teardown(bench_ctx_t *x) { (void)x; }

#else
#include <cuda_runtime.h>
#include <nccl.h>

typedef struct nccl_state {
  ncclComm_t comm[BENCH_MAX_GPUS];
} nccl_state_t;

#define NCCL_UID_KEY "dlpg-bench/nccl-unique-id"

static int nccl_fail(const bench_ctx_t *x, const char *what, ncclResult_t r) {
  fprintf(stderr, "dlpg-bench: rank %d: %s: %s\n", x->rank, what, ncclGetErrorString(r));
  return -1;
}

#define NCCL_TRY(x, call)                                            \
  do {                                                               \
    ncclResult_t r_ = (call);                                        \
    if (r_ != ncclSuccess) return nccl_fail((x), #call, r_);         \
  } while (0)

static ncclDataType_t nccl_type(bench_dtype_t t) {
  switch (t) {
    case BENCH_F32: return ncclFloat32;
    case BENCH_F16: return ncclFloat16;
    case BENCH_BF16: return ncclBfloat16;
    case BENCH_I32: return ncclInt32;
    case BENCH_I64: return ncclInt64;
    case BENCH_F64: return ncclFloat64;
    case BENCH_I8: return ncclInt8;
    case BENCH_U8: return ncclUint8;
    case BENCH_U32: return ncclUint32;
    case BENCH_U64: return ncclUint64;
    default: return ncclFloat32;
  }
}

static ncclRedOp_t nccl_op(dlpg_reduce_op_t r) {
  switch (r) {
    case DLPG_PROD: return ncclProd;
    case DLPG_MIN: return ncclMin;
    case DLPG_MAX: return ncclMax;
    case DLPG_AVG: return ncclAvg;
    default: return ncclSum;
  }
}

int bench_nccl_setup(bench_ctx_t *x) {
  ncclUniqueId id;
  size_t len = 0;
  dlpg_status_t st;
  if (x->rank == 0) {
    NCCL_TRY(x, ncclGetUniqueId(&id));
    st = dlpg_store_set(x->store, NCCL_UID_KEY, &id, sizeof(id));
  } else {
    st = dlpg_store_get(x->store, NCCL_UID_KEY, x->o->timeout_s, &id, sizeof(id), &len);
    if (st == DLPG_OK && len != sizeof(id)) {
      fprintf(stderr, "dlpg-bench: rank %d: NCCL unique id in the store has %zu bytes, not %zu\n",
              x->rank, len, sizeof(id));
      return -1;
    }
  }
  if (st != DLPG_OK) {
    fprintf(stderr, "dlpg-bench: rank %d: NCCL unique id through the store: %s: %s\n", x->rank,
            dlpg_status_name(st), dlpg_last_error());
    return -1;
  }
  nccl_state_t *s = calloc(1, sizeof(*s));
  if (!s) return -1;
  x->nccl = s;
  /* One process with several GPUs must create its communicators inside one group, or the
   * first init would wait for the others forever. */
  NCCL_TRY(x, ncclGroupStart());
  for (int g = 0; g < x->o->gpus; g++) {
    if (cudaSetDevice(x->dev[g]) != cudaSuccess) {
      fprintf(stderr, "dlpg-bench: rank %d: cudaSetDevice(%d) failed\n", x->rank, x->dev[g]);
      ncclGroupEnd();
      return -1;
    }
    ncclResult_t r = ncclCommInitRank(&s->comm[g], x->nparts, id, x->rank * x->o->gpus + g);
    if (r != ncclSuccess) {
      ncclGroupEnd();
      return nccl_fail(x, "ncclCommInitRank", r);
    }
  }
  NCCL_TRY(x, ncclGroupEnd());
  return 0;
}

int bench_nccl_issue(bench_ctx_t *x, size_t count) {
  const bench_opts_t *o = x->o;
  nccl_state_t *s = x->nccl;
  ncclDataType_t t = nccl_type(o->dtype);
  ncclRedOp_t r = nccl_op(o->redop);
  int root = o->root * o->gpus;
  NCCL_TRY(x, ncclGroupStart());
  for (int g = 0; g < o->gpus; g++) {
    cudaStream_t st = (cudaStream_t)x->stream[g];
    ncclComm_t c = s->comm[g];
    const void *in = x->in[g];
    void *out = o->inplace ? x->in[g] : x->out[g];
    ncclResult_t res = ncclSuccess;
    switch (o->op) {
      case BENCH_ALLREDUCE: res = ncclAllReduce(in, out, count, t, r, c, st); break;
      case BENCH_BROADCAST: res = ncclBroadcast(in, out, count, t, root, c, st); break;
      case BENCH_REDUCE: res = ncclReduce(in, out, count, t, r, root, c, st); break;
      case BENCH_ALLGATHER: res = ncclAllGather(in, out, count, t, c, st); break;
      case BENCH_REDUCE_SCATTER: res = ncclReduceScatter(in, out, count, t, r, c, st); break;
      case BENCH_ALLTOALL: res = ncclAlltoAll(in, out, count, t, c, st); break;
      case BENCH_SENDRECV: {
        int next = (x->rank + 1) % x->world, prev = (x->rank - 1 + x->world) % x->world;
        res = ncclSend(in, count, t, next, c, st);
        if (res == ncclSuccess) res = ncclRecv(out, count, t, prev, c, st);
        break;
      }
      default: break;
    }
    if (res != ncclSuccess) {
      ncclGroupEnd();
      return nccl_fail(x, bench_op_name(o->op), res);
    }
  }
  NCCL_TRY(x, ncclGroupEnd());
  return 0;
}

void bench_nccl_teardown(bench_ctx_t *x) {
  nccl_state_t *s = x->nccl;
  if (!s) return;
  for (int g = 0; g < x->o->gpus; g++)
    if (s->comm[g]) ncclCommDestroy(s->comm[g]);
  free(s);
  x->nccl = NULL;
}

#endif
