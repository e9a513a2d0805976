/* The rooted and uneven collectives on NCCL: gather, scatter, allgatherv, alltoallv and
 * reduce_scatter_v, one tensor per rank on the group's communicator (NCCL rank = group rank).
 * NCCL has no verbs for most of them (its own guide builds them from ncclSend/ncclRecv), so
 * they are sends and receives inside the caller's ncclGroupStart/End: one per non-empty
 * block with each peer, this rank's own block by cudaMemcpyAsync on the same stream (a copy
 * engine's copy, with no NCCL connection to itself). Two forms become one NCCL collective
 * instead, decided alike by every rank from arrays all ranks share: an allgatherv or a
 * reduce_scatter_v whose counts are all equal and packed is ncclAllGather /
 * ncclReduceScatter. An uneven reduce_scatter_v is one ncclReduce per non-empty block, rooted
 * at the block's owner, grouped (NCCL runs them as one launch); its reduce ops, premul_sum's
 * cached op and avg (ncclAvg) are the reducing collectives' own (premul.c).
 *
 * NCCL 2.28 added ncclAlltoAll, but it is not used for an alltoallv with even blocks: a rank
 * sees only its own send and receive counts, not whether every other rank's are even too,
 * so ranks could pick different verbs (a collective on one, sends on another) and never meet.
 *
 * Cross-rank agreement of the arrays: the NCCL path checks no sizes across ranks (neither
 * does it for the other collectives: the door checks what one rank can, and NCCL trusts the
 * rest), so arrays that disagree are the caller's bug: transfers whose sizes do not match
 * may leave the work unfinished (a dlpg_work_wait on it ends in DLPG_ERR_TIMEOUT), or the
 * blocks may be short. */
#include <stdint.h>

#include "nccl/nccl_internal.h"

/* Whether every counts[r] equals counts[0] and displs[r] is r * counts[0] (packed). */
static int dlpg__v_even(const dlpg__be_op_t *op, int size) {
  if (!dlpg__be_op_counts(op)) return 0;
  for (int r = 0; r < size; r++)
    if (op->counts[r] != op->counts[0] || op->displs[r] != (int64_t)r * op->counts[0]) return 0;
  return 1;
}

dlpg__op_kind_t dlpg__nccl_v_runs_as(const dlpg__be_op_t *op, int size) {
  switch (op->kind) {
    case DLPG__OP_ALLGATHERV:
      return dlpg__v_even(op, size) ? DLPG__OP_ALLGATHER : DLPG__OP_ALLTOALL;
    case DLPG__OP_REDUCE_SCATTER_V:
      return dlpg__v_even(op, size) ? DLPG__OP_REDUCE_SCATTER : DLPG__OP_REDUCE_SCATTER_V;
    case DLPG__OP_GATHER:
    case DLPG__OP_SCATTER:
    case DLPG__OP_ALLTOALLV:
      return DLPG__OP_ALLTOALL;
    default:
      return op->kind;
  }
}

/* The transfers of one call, with what failed named in the message. */
typedef struct dlpg__v_ctx {
  const char *fn;
  ncclComm_t comm;
  cudaStream_t s;
} dlpg__v_ctx_t;

static dlpg_status_t dlpg__v_send(const dlpg__v_ctx_t *x, const void *p, size_t n, int peer) {
  if (n == 0) return DLPG_OK;
  return dlpg__nccl_result(ncclSend(p, n, ncclUint8, peer, x->comm, x->s), x->comm, x->fn,
                           "ncclSend");
}

static dlpg_status_t dlpg__v_recv(const dlpg__v_ctx_t *x, void *p, size_t n, int peer) {
  if (n == 0) return DLPG_OK;
  return dlpg__nccl_result(ncclRecv(p, n, ncclUint8, peer, x->comm, x->s), x->comm, x->fn,
                           "ncclRecv");
}

/* This rank's own block: a device-to-device copy on the op's stream (none when the caller
 * placed it already, as an in-place gather does). */
static dlpg_status_t dlpg__v_self(const dlpg__v_ctx_t *x, void *dst, const void *src, size_t n) {
  if (n == 0 || dst == src) return DLPG_OK;
  return dlpg__cuda_result(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, x->s), x->fn,
                           "cudaMemcpyAsync (this rank's own block)");
}

/* Reduce_scatter_v: the even form as one ncclReduceScatter, else one ncclReduce per
 * non-empty block to its owner. */
static dlpg_status_t dlpg__v_reduce_scatter(const dlpg__v_ctx_t *x, const dlpg__be_op_t *op,
                                            dlpg__nccl_comm_t *c, int i, int me, int size,
                                            size_t E) {
  ncclDataType_t type = ncclUint8;
  ncclRedOp_t rop = ncclSum;
  size_t mult = 1;
  DLPG_CHECK(dlpg__nccl_reduce_args(x->fn, op, c, i, x->comm, &type, &rop, &mult));
  const char *in = op->in[i].ptr;
  if (dlpg__v_even(op, size))
    return dlpg__nccl_result(ncclReduceScatter(in, op->out[i].ptr,
                                               (size_t)op->counts[0] * mult, type, rop,
                                               x->comm, x->s),
                             x->comm, x->fn, "ncclReduceScatter");
  for (int r = 0; r < size; r++) {
    if (op->counts[r] == 0) continue;
    /* recvbuff is read only on the root (NCCL's contract): NULL elsewhere. */
    void *dst = r == me ? op->out[i].ptr : NULL;
    ncclResult_t res = ncclReduce(in + (size_t)op->displs[r] * E, dst,
                                  (size_t)op->counts[r] * mult, type, rop, r, x->comm, x->s);
    DLPG_CHECK(dlpg__nccl_result(res, x->comm, x->fn, "ncclReduce (reduce_scatter_v block)"));
  }
  return DLPG_OK;
}

dlpg_status_t dlpg__nccl_enqueue_v(const char *fn, const dlpg__be_op_t *op,
                                   dlpg__nccl_comm_t *c, int i, ncclComm_t comm,
                                   cudaStream_t s) {
  /* One tensor per rank (the kinds' PAIR arguments): the group's communicator of one
   * device, whose NCCL ranks are the group ranks. */
  if (c->ndev != 1 || c->peer != DLPG__NCCL_GROUP || i != 0)
    return dlpg__error(DLPG_ERR_INTERNAL,
                       "%s: needs the group's single-device communicator (got '%s', %d devices)",
                       fn, c->key, c->ndev);
  const int me = c->member, size = c->nranks;
  const dlpg__tensor_t *in = &op->in[0], *out = &op->out[0];
  const char *src = in->ptr;
  char *dst = out->ptr;
  const dlpg__v_ctx_t x = {.fn = fn, .comm = comm, .s = s};
  int counted = op->kind == DLPG__OP_ALLGATHERV || op->kind == DLPG__OP_ALLTOALLV ||
                op->kind == DLPG__OP_REDUCE_SCATTER_V;
  if (counted && !dlpg__be_op_counts(op))
    return dlpg__error(DLPG_ERR_INTERNAL, "%s: the operation carries no per-rank counts", fn);
  size_t E = dlpg__nccl_elem_size(in->dtype);
  if (E == 0)
    return dlpg__error(DLPG_ERR_UNSUPPORTED, "%s: dtype %d is unknown to this NCCL module", fn,
                       (int)in->dtype);

  switch (op->kind) {
    case DLPG__OP_GATHER: {
      /* Every rank's input has the same size (the root's output holds size of them). */
      size_t blk = in->nbytes;
      if (me != op->root) return dlpg__v_send(&x, src, blk, op->root);
      for (int p = 0; p < size; p++)
        if (p != me) DLPG_CHECK(dlpg__v_recv(&x, dst + (size_t)p * blk, blk, p));
      return dlpg__v_self(&x, dst + (size_t)me * blk, src, blk);
    }
    case DLPG__OP_SCATTER: {
      size_t blk = out->nbytes;
      if (me != op->root) return dlpg__v_recv(&x, dst, blk, op->root);
      for (int p = 0; p < size; p++)
        if (p != me) DLPG_CHECK(dlpg__v_send(&x, src + (size_t)p * blk, blk, p));
      return dlpg__v_self(&x, dst, src + (size_t)me * blk, blk);
    }
    case DLPG__OP_ALLGATHERV: {
      if (dlpg__v_even(op, size))
        return dlpg__nccl_result(ncclAllGather(src, dst, (size_t)op->counts[0] * E, ncclUint8,
                                               comm, s),
                                 comm, fn, "ncclAllGather");
      size_t mine = (size_t)op->counts[me] * E;
      for (int p = 0; p < size; p++) {
        if (p == me) continue;
        DLPG_CHECK(dlpg__v_send(&x, src, mine, p));
        DLPG_CHECK(dlpg__v_recv(&x, dst + (size_t)op->displs[p] * E, (size_t)op->counts[p] * E, p));
      }
      return dlpg__v_self(&x, dst + (size_t)op->displs[me] * E, src, mine);
    }
    case DLPG__OP_ALLTOALLV:
      for (int p = 0; p < size; p++) {
        if (p == me) continue;
        DLPG_CHECK(dlpg__v_send(&x, src + (size_t)op->displs[p] * E, (size_t)op->counts[p] * E, p));
        DLPG_CHECK(dlpg__v_recv(&x, dst + (size_t)op->recv_displs[p] * E,
                                (size_t)op->recv_counts[p] * E, p));
      }
      /* Door rule: send_counts[me] == recv_counts[me]. */
      return dlpg__v_self(&x, dst + (size_t)op->recv_displs[me] * E,
                          src + (size_t)op->displs[me] * E, (size_t)op->counts[me] * E);
    case DLPG__OP_REDUCE_SCATTER_V:
      return dlpg__v_reduce_scatter(&x, op, c, i, me, size, E);
    default:
      return dlpg__error(DLPG_ERR_INTERNAL, "%s: operation kind %d is not a rooted or uneven "
                         "collective", fn, (int)op->kind);
  }
}
