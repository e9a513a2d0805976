/* Issue one dlpg operation over the bench's buffers. By default every call passes work ==
 * NULL: a CPU operation has completed when the call returns, a CUDA one is enqueued on the
 * bench's streams (the caller synchronises them after the timed loop). With --async each
 * call asks for a work handle and waits on it (dlpg_work_wait) before returning, so the
 * time includes the asynchronous path's hand-off and completion. */
#include <string.h>
#include "dlpg_bench.h"

typedef struct tensors {
  DLTensor in[BENCH_MAX_GPUS], out[BENCH_MAX_GPUS];
  DLTensor *pin[BENCH_MAX_GPUS], *pout[BENCH_MAX_GPUS];
  int64_t in_shape[BENCH_MAX_GPUS], out_shape[BENCH_MAX_GPUS];
} tensors_t;

static void describe(const bench_ctx_t *x, DLTensor *t, int64_t *shape, void *data, int g,
                     int64_t n) {
  memset(t, 0, sizeof(*t));
  t->data = data;
  t->device.device_type = x->o->cuda ? kDLCUDA : kDLCPU;
  t->device.device_id = x->o->cuda ? x->dev[g] : 0;
  t->ndim = 1;
  *shape = n;
  t->shape = shape;
  t->strides = NULL;
  t->byte_offset = 0;
  t->dtype = bench_dtype_dl(x->o->dtype);
}

/* Input and output element counts of one tensor for count (per-block for allgather,
 * reduce_scatter and alltoall). */
static void counts(const bench_ctx_t *x, size_t count, int64_t *nin, int64_t *nout) {
  int64_t c = (int64_t)count, n = x->nparts, W = x->world;
  int64_t wsum = (int64_t)bench_weight_sum(x->o, x->world);
  int64_t wme = bench_weight(x->o, x->world, x->rank);
  switch (x->o->op) {
    case BENCH_ALLGATHER: *nin = c; *nout = c * n; break;
    case BENCH_REDUCE_SCATTER: *nin = c * n; *nout = c; break;
    case BENCH_ALLTOALL: *nin = c * W; *nout = c * W; break;
    case BENCH_GATHER: *nin = c; *nout = c * W; break;
    case BENCH_SCATTER: *nin = c * W; *nout = c; break;
    case BENCH_ALLGATHERV: *nin = c * wme; *nout = c * wsum; break;
    case BENCH_ALLTOALLV: *nin = c * wsum; *nout = c * wme * W; break;
    default: *nin = c; *nout = c; break;
  }
}

/* The per-rank arrays of allgatherv and alltoallv (packed: displacements NULL). counts[r]:
 * allgatherv, rank r's block; alltoallv, what every rank sends rank r. recv: alltoallv's
 * receive counts (this rank's block from every sender). */
static void vcounts(const bench_ctx_t *x, size_t count, int64_t *cnt, int64_t *recv) {
  int64_t wme = bench_weight(x->o, x->world, x->rank);
  for (int r = 0; r < x->world; r++) {
    cnt[r] = (int64_t)count * bench_weight(x->o, x->world, r);
    recv[r] = (int64_t)count * wme;
  }
}

static int fail(const bench_ctx_t *x, const char *what, dlpg_status_t st) {
  fprintf(stderr, "dlpg-bench: rank %d: %s: %s: %s\n", x->rank, what, dlpg_status_name(st),
          dlpg_last_error());
  return -1;
}

int bench_dlpg_issue(bench_ctx_t *x, size_t count) {
  const bench_opts_t *o = x->o;
  tensors_t t;
  int64_t nin, nout;
  counts(x, count, &nin, &nout);
  for (int g = 0; g < o->gpus; g++) {
    describe(x, &t.in[g], &t.in_shape[g], x->in[g], g, nin);
    describe(x, &t.out[g], &t.out_shape[g], x->out[g], g, nout);
    t.pin[g] = &t.in[g];
    t.pout[g] = &t.out[g];
  }
  void *const *streams = o->cuda ? (void *const *)x->stream : NULL;
  DLTensor *const *outs = o->inplace ? NULL : t.pout; /* in place: results in the inputs */
  dlpg_group_t *gr = x->group;
  dlpg_status_t st = DLPG_OK;
  dlpg_work_t *w = NULL, **pw = o->async ? &w : NULL;
  switch (o->op) {
    case BENCH_ALLREDUCE:
      st = dlpg_allreduce(gr, t.pin, outs, o->gpus, o->redop, streams, pw);
      break;
    case BENCH_BROADCAST:
      st = dlpg_broadcast(gr, t.pin, outs, o->gpus, o->root, streams, pw);
      break;
    case BENCH_REDUCE:
      st = dlpg_reduce(gr, t.pin, outs, o->gpus, o->redop, o->root, streams, pw);
      break;
    case BENCH_ALLGATHER:
      st = dlpg_allgather(gr, t.pin, t.pout, o->gpus, streams, pw);
      break;
    case BENCH_REDUCE_SCATTER:
      st = dlpg_reduce_scatter(gr, t.pin, t.pout, o->gpus, o->redop, streams, pw);
      break;
    case BENCH_ALLTOALL:
      st = dlpg_alltoall(gr, t.pin[0], t.pout[0], o->cuda ? x->stream[0] : NULL, pw);
      break;
    case BENCH_GATHER:
    case BENCH_SCATTER: {
      /* Only the root's gather output / scatter input is used: NULL elsewhere. */
      int root = x->rank == o->root;
      void *s = o->cuda ? x->stream[0] : NULL;
      st = o->op == BENCH_GATHER
               ? dlpg_gather(gr, t.pin[0], root ? t.pout[0] : NULL, o->root, s, pw)
               : dlpg_scatter(gr, root ? t.pin[0] : NULL, t.pout[0], o->root, s, pw);
      break;
    }
    case BENCH_ALLGATHERV:
    case BENCH_ALLTOALLV: {
      int64_t cnt[BENCH_MAX_RANKS], recv[BENCH_MAX_RANKS];
      vcounts(x, count, cnt, recv);
      void *s = o->cuda ? x->stream[0] : NULL;
      st = o->op == BENCH_ALLGATHERV
               ? dlpg_allgatherv(gr, t.pin[0], t.pout[0], cnt, NULL, s, pw)
               : dlpg_alltoallv(gr, t.pin[0], cnt, NULL, t.pout[0], recv, NULL, s, pw);
      break;
    }
    case BENCH_SENDRECV: {
      /* A ring: send to the next rank, receive from the previous one, posted together so
       * neither side waits for the other. work == NULL as everywhere here: dlpg_group_end
       * returns once CPU operations completed, CUDA ones are ordered on the bench's stream. */
      int next = (x->rank + 1) % x->world, prev = (x->rank - 1 + x->world) % x->world;
      void *s = o->cuda ? x->stream[0] : NULL;
      st = dlpg_group_start(gr);
      if (st != DLPG_OK) return fail(x, "dlpg_group_start", st);
      dlpg_status_t s1 = dlpg_send(gr, t.pin[0], next, 0, s, NULL);
      if (s1 != DLPG_OK) fail(x, "dlpg_send", s1);
      dlpg_status_t s2 = dlpg_recv(gr, t.pout[0], prev, 0, s, NULL);
      if (s2 != DLPG_OK) fail(x, "dlpg_recv", s2);
      st = dlpg_group_end(gr);
      if (st != DLPG_OK) fail(x, "dlpg_group_end", st);
      if (st == DLPG_OK && (s1 != DLPG_OK || s2 != DLPG_OK)) st = s1 != DLPG_OK ? s1 : s2;
      return st == DLPG_OK ? 0 : -1;
    }
    default: break;
  }
  if (st == DLPG_OK && w) {
    st = dlpg_work_wait(w, o->timeout_s);
    if (st != DLPG_OK) {
      fprintf(stderr, "dlpg-bench: rank %d: dlpg_work_wait(%s): %s: %s\n", x->rank,
              bench_op_name(o->op), dlpg_status_name(st), dlpg_work_error(w));
      dlpg_work_free(w);
      return -1;
    }
  }
  dlpg_work_free(w);
  if (st != DLPG_OK) return fail(x, bench_op_name(o->op), st);
  return 0;
}
