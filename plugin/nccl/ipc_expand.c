/* The rooted and uneven collectives on the CUDA IPC path, as the path's own operations (the
 * way issue_v.c builds them from NCCL's sends and receives): gather, scatter, allgatherv and
 * alltoallv become a send and a receive per peer (zero-byte ones skipped alike on both
 * sides, since every rank knows every count) plus the rank's own block as one device copy on
 * the op's stream; reduce_scatter_v becomes one reduce per rank, of that rank's block, to
 * that rank. The parts carry no work: the caller completes the op's work after them. */
#include <string.h>

#include "nccl/ipc_host.h"

int dlpg__ipc_expands(const dlpg__be_op_t *op) {
  switch (op->kind) {
    case DLPG__OP_GATHER: case DLPG__OP_SCATTER: case DLPG__OP_ALLGATHERV:
    case DLPG__OP_ALLTOALLV: case DLPG__OP_REDUCE_SCATTER_V:
      return 1;
    default:
      return 0;
  }
}

/* A part of op: a copy with another kind, peer or root and one tensor of bytes at p. */
static dlpg__be_op_t *dlpg__part(const dlpg__be_op_t *op, dlpg__op_kind_t kind, dlpg__be_op_t *parts,
                                 int *n) {
  dlpg__be_op_t *p = &parts[(*n)++];
  *p = *op;
  p->kind = kind;
  p->work = NULL;
  p->in_place = 0;
  p->counts = p->displs = p->recv_counts = p->recv_displs = NULL;
  return p;
}

static void dlpg__part_p2p(const dlpg__be_op_t *op, int send, int peer, char *ptr, size_t bytes,
                           dlpg__be_op_t *parts, int *n) {
  if (bytes == 0) return;
  dlpg__be_op_t *p = dlpg__part(op, send ? DLPG__OP_SEND : DLPG__OP_RECV, parts, n);
  p->peer = peer;
  p->in[0].ptr = ptr;
  p->in[0].nbytes = bytes;
  p->in[0].numel = (int64_t)bytes;
  p->out[0] = p->in[0];
}

/* This rank's own block, on the op's stream. */
static dlpg_status_t dlpg__self_copy(const char *fn, const dlpg__be_op_t *op, char *dst,
                                     const char *src, size_t bytes) {
  if (bytes == 0 || dst == src) return DLPG_OK;
  return dlpg__cuda_result(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                           (cudaStream_t)op->streams[0]),
                           fn, "cudaMemcpyAsync (this rank's own block)");
}

dlpg_status_t dlpg__ipc_expand(const char *fn, const dlpg__be_op_t *op, int me, int size,
                               dlpg__be_op_t *parts, int *n) {
  const dlpg__tensor_t *in = &op->in[0], *out = &op->out[0];
  char *src = in->ptr, *dst = out->ptr;
  size_t E = dlpg__nccl_elem_size(op->kind == DLPG__OP_SCATTER ? out->dtype : in->dtype);
  if (E == 0)
    return dlpg__error(DLPG_ERR_UNSUPPORTED, "%s: dtype %s is unknown to the CUDA IPC path", fn,
                       dlpg__dtype_name(in->dtype));
  int counted = op->kind == DLPG__OP_ALLGATHERV || op->kind == DLPG__OP_ALLTOALLV ||
                op->kind == DLPG__OP_REDUCE_SCATTER_V;
  if (counted && !dlpg__be_op_counts(op))
    return dlpg__error(DLPG_ERR_INTERNAL, "%s: the operation carries no per-rank counts", fn);
  const int64_t *c = op->counts, *d = op->displs;
  switch (op->kind) {
    case DLPG__OP_GATHER: {
      size_t blk = in->nbytes;
      if (me != op->root) {
        dlpg__part_p2p(op, 1, op->root, src, blk, parts, n);
        return DLPG_OK;
      }
      for (int p = 0; p < size; p++)
        if (p != me) dlpg__part_p2p(op, 0, p, dst + (size_t)p * blk, blk, parts, n);
      return dlpg__self_copy(fn, op, dst + (size_t)me * blk, src, blk);
    }
    case DLPG__OP_SCATTER: {
      size_t blk = out->nbytes;
      if (me != op->root) {
        dlpg__part_p2p(op, 0, op->root, dst, blk, parts, n);
        return DLPG_OK;
      }
      for (int p = 0; p < size; p++)
        if (p != me) dlpg__part_p2p(op, 1, p, src + (size_t)p * blk, blk, parts, n);
      return dlpg__self_copy(fn, op, dst, src + (size_t)me * blk, blk);
    }
    case DLPG__OP_ALLGATHERV:
      for (int p = 0; p < size; p++) {
        if (p == me) continue;
        dlpg__part_p2p(op, 1, p, src, (size_t)c[me] * E, parts, n);
        dlpg__part_p2p(op, 0, p, dst + (size_t)d[p] * E, (size_t)c[p] * E, parts, n);
      }
      return dlpg__self_copy(fn, op, dst + (size_t)d[me] * E, src, (size_t)c[me] * E);
    case DLPG__OP_ALLTOALLV: {
      const int64_t *rc = op->recv_counts, *rd = op->recv_displs;
      for (int p = 0; p < size; p++) {
        if (p == me) continue;
        dlpg__part_p2p(op, 1, p, src + (size_t)d[p] * E, (size_t)c[p] * E, parts, n);
        dlpg__part_p2p(op, 0, p, dst + (size_t)rd[p] * E, (size_t)rc[p] * E, parts, n);
      }
      return dlpg__self_copy(fn, op, dst + (size_t)rd[me] * E, src + (size_t)d[me] * E,
                             (size_t)c[me] * E);
    }
    case DLPG__OP_REDUCE_SCATTER_V:
      for (int r = 0; r < size; r++) {
        if (c[r] == 0) continue;
        dlpg__be_op_t *p = dlpg__part(op, DLPG__OP_REDUCE, parts, n);
        p->root = r;
        p->in[0].ptr = src + (size_t)d[r] * E;
        p->in[0].numel = c[r];
        p->in[0].nbytes = (size_t)c[r] * E;
        p->out[0] = p->in[0];
        if (r == me) p->out[0].ptr = dst;
      }
      return DLPG_OK;
    default:
      return DLPG_OK;
  }
}
