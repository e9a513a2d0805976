// Collectives of the Gloo path on CPU tensors (ntensors == 1). Every collective starts with
// the header exchange of ops_small.cc, which checks that all ranks run the same operation on
// matching tensors; inputs of at most kSmallBytes finish there (run_small), larger ones then
// run Gloo's algorithms below. Allreduce uses gloo::allreduce(AllreduceOptions) like torch
// 1.13's ProcessGroupGloo, so its bandwidth matches torch's. A zero-element tensor and a
// barrier take part through the header exchange alone, so peers never wait for them.
#include <chrono>
#include <cstring>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/broadcast.h>
#include <gloo/reduce.h>
#include <gloo/types.h>

#include "gloo/ops_internal.h"
#include "gloo/reduce_fns.h"

namespace dlpg_gloo {

namespace {

// In-place allreduce of numel elements at ptr (dtype of t).
void allreduce_buffer(dlpg__gloo_ctx_t *ctx, const dlpg__op_t &op, void *ptr, size_t numel,
                      uint32_t tag) {
  ReduceFn fn = op_reduce_fn(op);
  with_elem_type(dlpg__dtype_size(op.in[0].dtype), [&](auto e) {
    using T = typename decltype(e)::type;
    ::gloo::AllreduceOptions opts(ctx->gloo);
    opts.setOutput<T>(static_cast<T *>(ptr), numel);
    opts.setReduceFunction(fn);
    opts.setTag(tag);
    opts.setTimeout(ctx->timeout);
    ::gloo::allreduce(opts);
  });
  if (op.rop == DLPG_AVG) average(op.in[0], ptr, numel, ctx->size);
}

void copy_in_to_out(const dlpg__op_t &op) {
  if (!op.in_place && op.out[0].ptr != op.in[0].ptr && op.in[0].nbytes)
    memcpy(op.out[0].ptr, op.in[0].ptr, op.in[0].nbytes);
}

void do_allreduce(dlpg__gloo_ctx_t *ctx, const dlpg__op_t &op, uint32_t tag) {
  // Copy, then reduce in place on the output (torch's path), so the input stays intact.
  copy_in_to_out(op);
  allreduce_buffer(ctx, op, op.out[0].ptr, static_cast<size_t>(op.out[0].numel), tag);
}

void do_broadcast(dlpg__gloo_ctx_t *ctx, const dlpg__op_t &op, uint32_t tag) {
  // The root's output is the source: copy its input there first (out of place).
  if (ctx->rank == op.root) copy_in_to_out(op);
  with_elem_type(dlpg__dtype_size(op.out[0].dtype), [&](auto e) {
    using T = typename decltype(e)::type;
    ::gloo::BroadcastOptions opts(ctx->gloo);
    opts.setOutput<T>(static_cast<T *>(op.out[0].ptr), static_cast<size_t>(op.out[0].numel));
    opts.setRoot(op.root);
    opts.setTag(tag);
    opts.setTimeout(ctx->timeout);
    ::gloo::broadcast(opts);
  });
}

void do_reduce(dlpg__gloo_ctx_t *ctx, const dlpg__op_t &op, uint32_t tag) {
  ReduceFn fn = op_reduce_fn(op);
  const size_t numel = static_cast<size_t>(op.in[0].numel);
  const bool root = ctx->rank == op.root;
  // Gloo uses every rank's output as its accumulator; a non-root rank reduces into scratch
  // so that neither its input (in place) nor its output is disturbed.
  std::vector<char> scratch;
  void *out = op.out[0].ptr;
  if (!root) {
    scratch.resize(op.in[0].nbytes);
    out = scratch.data();
  }
  with_elem_type(dlpg__dtype_size(op.in[0].dtype), [&](auto e) {
    using T = typename decltype(e)::type;
    ::gloo::ReduceOptions opts(ctx->gloo);
    opts.setInput<T>(static_cast<T *>(op.in[0].ptr), numel);
    opts.setOutput<T>(static_cast<T *>(out), numel);
    opts.setRoot(op.root);
    opts.setReduceFunction(fn);
    opts.setTag(tag);
    opts.setTimeout(ctx->timeout);
    ::gloo::reduce(opts);
  });
  if (root && op.rop == DLPG_AVG) average(op.in[0], op.out[0].ptr, numel, ctx->size);
}

void do_allgather(dlpg__gloo_ctx_t *ctx, const dlpg__op_t &op, uint32_t tag) {
  const size_t numel = static_cast<size_t>(op.in[0].numel);
  with_elem_type(dlpg__dtype_size(op.in[0].dtype), [&](auto e) {
    using T = typename decltype(e)::type;
    ::gloo::AllgatherOptions opts(ctx->gloo);
    opts.setInput<T>(static_cast<T *>(op.in[0].ptr), numel);
    opts.setOutput<T>(static_cast<T *>(op.out[0].ptr), numel * ctx->size);
    opts.setTag(tag);
    opts.setTimeout(ctx->timeout);
    ::gloo::allgather(opts);
  });
}

void do_reduce_scatter(dlpg__gloo_ctx_t *ctx, const dlpg__op_t &op, uint32_t tag) {
  // Gloo 0.5 has no reduce-scatter in its options API. A ring over unbound buffers moves
  // (n-1)/n of the input per rank, half of what an allreduce of the whole input would:
  // at step s rank r sends its partial block (r-1-s) to r+1 and adds the block (r-2-s)
  // received from r-1 into its copy; after n-1 steps block r holds every contribution.
  const int n = ctx->size, r = ctx->rank;
  const size_t block = op.out[0].nbytes;
  const size_t belems = static_cast<size_t>(op.out[0].numel);
  dlpg__op_t sum = op;
  if (sum.rop == DLPG_AVG) sum.rop = DLPG_SUM;  // average only the kept block
  if (n > 255) {
    // Slot deltas are 8 bits wide: fall back to allreduce of a scratch copy.
    std::vector<char> scratch(op.in[0].nbytes);
    memcpy(scratch.data(), op.in[0].ptr, op.in[0].nbytes);
    allreduce_buffer(ctx, sum, scratch.data(), static_cast<size_t>(op.in[0].numel), tag);
    memcpy(op.out[0].ptr, scratch.data() + block * r, block);
  } else {
    ReduceFn fn = op_reduce_fn(sum);
    std::vector<char> acc(op.in[0].nbytes), tmp(block);
    memcpy(acc.data(), op.in[0].ptr, op.in[0].nbytes);
    auto sendbuf = ctx->gloo->createUnboundBuffer(acc.data(), acc.size());
    auto recvbuf = ctx->gloo->createUnboundBuffer(tmp.data(), tmp.size());
    const auto slot = ::gloo::Slot::build(kReduceScatterSlotPrefix, tag);
    const auto deadline = std::chrono::steady_clock::now() + ctx->timeout;
    auto left = [&] {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      return ms.count() < 1 ? std::chrono::milliseconds(1) : ms;
    };
    for (int s = 0; s < n - 1; s++) {
      const size_t send_blk = static_cast<size_t>(((r - 1 - s) % n + n) % n);
      const size_t recv_blk = static_cast<size_t>(((r - 2 - s) % n + n) % n);
      recvbuf->recv((r + n - 1) % n, slot + static_cast<uint8_t>(s), 0, block);
      sendbuf->send((r + 1) % n, slot + static_cast<uint8_t>(s), send_blk * block, block);
      if (!recvbuf->waitRecv(left()) || !sendbuf->waitSend(left()))
        throw StatusError(DLPG_ERR_ABORTED, "the group was aborted");
      char *dst = acc.data() + recv_blk * block;
      fn(dst, dst, tmp.data(), belems);
    }
    memcpy(op.out[0].ptr, acc.data() + block * r, block);
  }
  if (op.rop == DLPG_AVG)
    average(op.out[0], op.out[0].ptr, static_cast<size_t>(op.out[0].numel), ctx->size);
}

void do_alltoall(dlpg__gloo_ctx_t *ctx, const dlpg__op_t &op, uint32_t tag) {
  with_elem_type(dlpg__dtype_size(op.in[0].dtype), [&](auto e) {
    using T = typename decltype(e)::type;
    ::gloo::AlltoallOptions opts(ctx->gloo);
    opts.setInput<T>(static_cast<T *>(op.in[0].ptr), static_cast<size_t>(op.in[0].numel));
    opts.setOutput<T>(static_cast<T *>(op.out[0].ptr), static_cast<size_t>(op.out[0].numel));
    opts.setTag(tag);
    opts.setTimeout(ctx->timeout);
    ::gloo::alltoall(opts);
  });
}

}  // namespace

void run_collective(dlpg__gloo_ctx_t *ctx, const dlpg__op_t &op) {
  // Every rank runs the same collectives in the same order, so the counter agrees; the
  // header carries it, so that a rank out of step is named rather than mismatched.
  const uint32_t tag = ctx->next_tag++;
  const WireHeader h = make_header(op, ctx->rank, tag);
  const bool tensors = op.kind != DLPG__OP_BARRIER && op.ntensors == 1;
  const size_t in_bytes = tensors ? op.in[0].nbytes : 0;
  const bool small = in_bytes <= kSmallBytes;
  PayloadTo to = PayloadTo::kAll;
  if (!small || !tensors) to = PayloadTo::kNone;
  else if (op.kind == DLPG__OP_BROADCAST) to = ctx->rank == op.root ? PayloadTo::kAll : PayloadTo::kNone;
  else if (op.kind == DLPG__OP_REDUCE) to = PayloadTo::kRoot;
  try {
    exchange_first(ctx, h, small ? op.in[0].ptr : nullptr, small ? in_bytes : 0, to, op.root, tag);
  } catch (const StatusError &e) {
    // A mismatch leaves the transport in step on every rank: keep the next one fast too.
    if (e.status() == DLPG_ERR_INVALID_ARGUMENT) prepost_next_first(ctx);
    throw;
  }
  // From here on every rank knows that all agree on the kind and the tensors, so they all
  // take the same branch below.
  if (op.kind == DLPG__OP_BARRIER || op.ntensors != 1 || !small) prepost_next_first(ctx);
  if (op.kind == DLPG__OP_BARRIER) return;
  if (op.ntensors != 1)
    throw StatusError(DLPG_ERR_INVALID_ARGUMENT,
                      "Gloo takes exactly 1 CPU tensor per call, got " +
                          std::to_string(op.ntensors));
  if (small) {
    // run_small reads the payloads in coll_recv, so the next receives wait until it is done.
    try {
      run_small(ctx, op);
    } catch (...) {
      prepost_next_first(ctx);
      throw;
    }
    prepost_next_first(ctx);
    return;
  }
  switch (op.kind) {
    case DLPG__OP_ALLREDUCE: do_allreduce(ctx, op, tag); break;
    case DLPG__OP_BROADCAST: do_broadcast(ctx, op, tag); break;
    case DLPG__OP_REDUCE: do_reduce(ctx, op, tag); break;
    case DLPG__OP_ALLGATHER: do_allgather(ctx, op, tag); break;
    case DLPG__OP_REDUCE_SCATTER: do_reduce_scatter(ctx, op, tag); break;
    case DLPG__OP_ALLTOALL: do_alltoall(ctx, op, tag); break;
    default:
      throw StatusError(DLPG_ERR_INTERNAL,
                        "operation kind " + std::to_string(static_cast<int>(op.kind)) +
                            " is not a collective");
  }
}

}  // namespace dlpg_gloo
