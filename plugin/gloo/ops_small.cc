// The first step of every collective and the small-message path (header.h). Every rank
// sends one message of at most kBlockBytes to every peer and posts one receive of exactly
// kBlockBytes per peer, so no size a peer chose can overflow a receive here: the headers
// are compared before any transfer sized from a tensor. When every input is at most
// kSmallBytes the payloads travel in the same message and each rank computes the result
// locally, in rank order, so every rank gets bitwise identical results: one exchange instead
// of the 2(n-1) steps of Gloo's ring.
#include <cstring>

#include <gloo/types.h>

#include "gloo/ops_internal.h"
#include "gloo/reduce_fns.h"

namespace dlpg_gloo {

namespace {

void ensure_first_buffers(dlpg__gloo_ctx_t *ctx) {
  if (ctx->coll_recv_buf) return;
  ctx->coll_recv.assign(static_cast<size_t>(ctx->size) * kBlockBytes, 0);
  ctx->coll_send.assign(kBlockBytes, 0);
  ctx->coll_recv_buf = ctx->gloo->createUnboundBuffer(ctx->coll_recv.data(), ctx->coll_recv.size());
  ctx->coll_send_buf = ctx->gloo->createUnboundBuffer(ctx->coll_send.data(), ctx->coll_send.size());
}

const WireHeader *first_header(const dlpg__gloo_ctx_t *ctx, int r) {
  const char *p = r == ctx->rank ? ctx->coll_send.data()
                                 : ctx->coll_recv.data() + static_cast<size_t>(r) * kBlockBytes;
  return reinterpret_cast<const WireHeader *>(p);
}

void post_first_recvs(dlpg__gloo_ctx_t *ctx, uint32_t tag) {
  const uint64_t slot = ::gloo::Slot::build(kCollFirstSlotPrefix, tag);
  for (int p = 0; p < ctx->size; p++)
    if (p != ctx->rank)
      ctx->coll_recv_buf->recv(p, slot, static_cast<size_t>(p) * kBlockBytes, kBlockBytes);
  ctx->coll_posted_tag = tag;
}

// out = payload(0)[off..] op payload(1)[off..] op ... for numel elements, in rank order.
void reduce_ranks(dlpg__gloo_ctx_t *ctx, const dlpg__op_t &op, void *out, size_t off,
                  size_t nbytes, size_t numel) {
  ReduceFn fn = op_reduce_fn(op);
  memcpy(out, first_payload(ctx, 0) + off, nbytes);
  for (int r = 1; r < ctx->size; r++) fn(out, out, first_payload(ctx, r) + off, numel);
  if (op.rop == DLPG_AVG) average(op.in[0], out, numel, ctx->size);
}

}  // namespace

const char *first_payload(const dlpg__gloo_ctx_t *ctx, int r) {
  return reinterpret_cast<const char *>(first_header(ctx, r)) + kHeaderBytes;
}

void exchange_first(dlpg__gloo_ctx_t *ctx, const WireHeader &h, const void *payload,
                    size_t payload_bytes, PayloadTo to, int root, uint32_t tag) {
  if (payload_bytes > kSmallBytes)
    throw StatusError(DLPG_ERR_INTERNAL, "inline payload of " + std::to_string(payload_bytes) +
                                             " bytes exceeds " + std::to_string(kSmallBytes));
  ensure_first_buffers(ctx);
  // This rank's own block doubles as its input copy for run_small (the input may be the
  // output, in place, and be overwritten before the reduction reads it).
  memcpy(ctx->coll_send.data(), &h, kHeaderBytes);
  if (payload_bytes) memcpy(ctx->coll_send.data() + kHeaderBytes, payload, payload_bytes);
  const int n = ctx->size, self = ctx->rank;
  if (n > 1) {
    const uint64_t slot = ::gloo::Slot::build(kCollFirstSlotPrefix, tag);
    auto *rbuf = ctx->coll_recv_buf.get();
    auto *sbuf = ctx->coll_send_buf.get();
    LiveGuard live(ctx);
    live.add(rbuf);
    live.add(sbuf);
    if (ctx->coll_posted_tag != static_cast<int64_t>(tag)) post_first_recvs(ctx, tag);
    ctx->coll_posted_tag = -1;
    for (int p = 0; p < n; p++) {
      if (p == self) continue;
      const bool with = to == PayloadTo::kAll || (to == PayloadTo::kRoot && p == root);
      sbuf->send(p, slot, 0, kHeaderBytes + (with ? payload_bytes : 0));
    }
    const auto deadline = std::chrono::steady_clock::now() + ctx->timeout;
    for (int i = 0; i < n - 1; i++)
      if (!rbuf->waitRecv(time_left(deadline)))
        throw StatusError(DLPG_ERR_ABORTED, "the group was aborted");
    for (int i = 0; i < n - 1; i++)
      if (!sbuf->waitSend(time_left(deadline)))
        throw StatusError(DLPG_ERR_ABORTED, "the group was aborted");
  }
  std::vector<const WireHeader *> hdrs(static_cast<size_t>(n));
  for (int r = 0; r < n; r++) hdrs[static_cast<size_t>(r)] = first_header(ctx, r);
  std::string why = compare_collective_headers(hdrs.data(), n);
  if (!why.empty()) throw StatusError(DLPG_ERR_INVALID_ARGUMENT, why);
}

void prepost_next_first(dlpg__gloo_ctx_t *ctx) noexcept {
  if (ctx->size < 2 || !ctx->coll_recv_buf || ctx->aborted.load()) return;
  try {
    post_first_recvs(ctx, ctx->next_tag);
  } catch (...) {
    ctx->coll_posted_tag = -1;
  }
}

void run_small(dlpg__gloo_ctx_t *ctx, const dlpg__op_t &op) {
  const int n = ctx->size, self = ctx->rank;
  const dlpg__tensor_t &in = op.in[0], &out = op.out[0];
  char *dst = static_cast<char *>(out.ptr);
  switch (op.kind) {
    case DLPG__OP_ALLREDUCE:
      if (in.nbytes) reduce_ranks(ctx, op, dst, 0, in.nbytes, static_cast<size_t>(in.numel));
      break;
    case DLPG__OP_REDUCE:
      // Only the root receives payloads; the others' outputs stay untouched.
      if (self == op.root && in.nbytes)
        reduce_ranks(ctx, op, dst, 0, in.nbytes, static_cast<size_t>(in.numel));
      break;
    case DLPG__OP_BROADCAST:
      if (out.nbytes) memcpy(dst, first_payload(ctx, op.root), out.nbytes);
      break;
    case DLPG__OP_ALLGATHER:
      if (in.nbytes)
        for (int r = 0; r < n; r++)
          memcpy(dst + static_cast<size_t>(r) * in.nbytes, first_payload(ctx, r), in.nbytes);
      break;
    case DLPG__OP_REDUCE_SCATTER:
      if (out.nbytes)
        reduce_ranks(ctx, op, dst, static_cast<size_t>(self) * out.nbytes, out.nbytes,
                     static_cast<size_t>(out.numel));
      break;
    case DLPG__OP_ALLTOALL: {
      const size_t block = in.nbytes / static_cast<size_t>(n);
      if (block)
        for (int r = 0; r < n; r++)
          memcpy(dst + static_cast<size_t>(r) * block,
                 first_payload(ctx, r) + static_cast<size_t>(self) * block, block);
      break;
    }
    default:
      throw StatusError(DLPG_ERR_INTERNAL,
                        "operation kind " + std::to_string(static_cast<int>(op.kind)) +
                            " has no small-message path");
  }
}

}  // namespace dlpg_gloo
