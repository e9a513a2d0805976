/* The per-rank arrays of the uneven collectives at the door (dlpg_allgatherv,
 * dlpg_alltoallv, dlpg_reduce_scatter_v): every rule one rank can check alone -- arrays
 * given, no negative entry, every block inside its tensor, this rank's own count matching
 * its tensor -- and the copies the op keeps, displacements resolved, so a backend (and
 * asynchronous work) never reads the caller's arrays. What must agree across ranks is the
 * backends' to compare (core/group/vcounts.h). */
#include <stdint.h>
#include <string.h>

#include "base/status.h"
#include "core/door/ops_impl.h"

size_t dlpg__op_counts_space(const dlpg__op_args_t *a) {
  const dlpg__op_kind_info_t *k = dlpg__op_kind_info(a->kind);
  if (!k || k->shape != DLPG__SHAPE_COUNTS || !a->g || a->g->size <= 0) return 0;
  return 4 * (size_t)a->g->size * sizeof(int64_t);
}

/* One side's blocks (counts[i] elements at displs[i] of tensor t, named tname): copies
 * them into cnt/dsp, packed displacements where displs is NULL. */
static dlpg_status_t dlpg__blocks(const char *fn, int size, const int64_t *counts,
                                  const int64_t *displs, const char *cname, const char *dname,
                                  const dlpg__tensor_t *t, const char *tname, int64_t *cnt,
                                  int64_t *dsp) {
  DLPG_ARG_CHECK(counts != NULL, "%s: %s is NULL (it needs world_size = %d entries)", fn, cname,
                 size);
  int64_t packed = 0;
  for (int i = 0; i < size; i++) {
    DLPG_ARG_CHECK(counts[i] >= 0, "%s: %s[%d] is %lld (counts must be >= 0)", fn, cname, i,
                   (long long)counts[i]);
    int64_t d = displs ? displs[i] : packed;
    DLPG_ARG_CHECK(d >= 0, "%s: %s[%d] is %lld (displacements must be >= 0)", fn, dname, i,
                   (long long)d);
    int64_t end = 0;
    if (__builtin_add_overflow(d, counts[i], &end) || end > t->numel) {
      if (displs)
        return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                           "%s: %s[%d] = %lld with %s[%d] = %lld overruns %s (%lld elements)",
                           fn, dname, i, (long long)d, cname, i, (long long)counts[i], tname,
                           (long long)t->numel);
      return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                         "%s: %s has %lld elements but %s[0..%d] packed need %s%lld (%s is "
                         "NULL: blocks packed in rank order)", fn, tname, (long long)t->numel,
                         cname, i, end < d ? "more than " : "", (long long)(end < d ? INT64_MAX : end),
                         dname);
    }
    cnt[i] = counts[i];
    dsp[i] = d;
    packed = end;
  }
  return DLPG_OK;
}

dlpg_status_t dlpg__op_build_counts(const dlpg__op_args_t *a, const char *fn, dlpg__op_t *op) {
  int size = a->g->size, rank = a->g->rank;
  int64_t *space = (int64_t *)(void *)(op + 1);
  int64_t *cnt = space, *dsp = space + size, *rcnt = space + 2 * size, *rdsp = space + 3 * size;
  const dlpg__tensor_t *in = &op->in[0], *out = &op->out[0];
  switch (a->kind) {
    case DLPG__OP_ALLGATHERV:
      /* Rank r's block r of every output: this rank's input is its own block. */
      DLPG_CHECK(dlpg__blocks(fn, size, a->counts, a->displs, "counts", "displs", out, "output",
                              cnt, dsp));
      DLPG_ARG_CHECK(in->numel == cnt[rank],
                     "%s: input has %lld elements but counts[%d] (this rank's) is %lld", fn,
                     (long long)in->numel, rank, (long long)cnt[rank]);
      break;
    case DLPG__OP_REDUCE_SCATTER_V:
      /* Block r of every input reduces into rank r's output. */
      DLPG_CHECK(dlpg__blocks(fn, size, a->counts, a->displs, "counts", "displs", in, "input",
                              cnt, dsp));
      DLPG_ARG_CHECK(out->numel == cnt[rank],
                     "%s: output has %lld elements but counts[%d] (this rank's) is %lld", fn,
                     (long long)out->numel, rank, (long long)cnt[rank]);
      break;
    case DLPG__OP_ALLTOALLV:
      DLPG_CHECK(dlpg__blocks(fn, size, a->counts, a->displs, "send_counts", "send_displs", in,
                              "input", cnt, dsp));
      DLPG_CHECK(dlpg__blocks(fn, size, a->recv_counts, a->recv_displs, "recv_counts",
                              "recv_displs", out, "output", rcnt, rdsp));
      /* What this rank sends itself is its own affair: checked here, once. */
      DLPG_ARG_CHECK(cnt[rank] == rcnt[rank],
                     "%s: send_counts[%d] is %lld but recv_counts[%d] is %lld (rank %d sends "
                     "itself what it receives from itself)", fn, rank, (long long)cnt[rank],
                     rank, (long long)rcnt[rank], rank);
      /* Blocks are read from the input while others are written into the output. */
      DLPG_ARG_CHECK(in->nbytes == 0 || out->nbytes == 0 ||
                         (uintptr_t)in->ptr + in->nbytes <= (uintptr_t)out->ptr ||
                         (uintptr_t)out->ptr + out->nbytes <= (uintptr_t)in->ptr,
                     "%s: input and output overlap (alltoallv needs distinct buffers)", fn);
      op->recv_counts = rcnt;
      op->recv_displs = rdsp;
      break;
    default:
      return dlpg__error(DLPG_ERR_INTERNAL, "%s: %s has no per-rank arrays", fn,
                         dlpg__op_name(a->kind));
  }
  op->counts = cnt;
  op->displs = dsp;
  return DLPG_OK;
}
