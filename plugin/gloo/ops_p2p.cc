// Point-to-point transfers of the Gloo path: unbound buffers on a slot derived from the
// user tag. A batch posts every send and receive before waiting on any, so a batch that
// exchanges with several peers (a ring step, an alltoallv) cannot deadlock.
#include <chrono>
#include <memory>
#include <vector>

#include <gloo/types.h>

#include "gloo/ops_internal.h"

namespace dlpg_gloo {

uint64_t p2p_slot(int tag) {
  return ::gloo::Slot::build(0x10, static_cast<uint32_t>(tag));
}

namespace {

struct Posted {
  const dlpg__op_t *op;
  std::unique_ptr<::gloo::transport::UnboundBuffer> buf;
};

// Registers the posted buffers with the context while they are waited on, so that
// dlpg__gloo_ctx_abort can wake them; unregisters on every exit path.
class LiveSet {
 public:
  LiveSet(dlpg__gloo_ctx_t *ctx, std::vector<Posted> &posted) : ctx_(ctx), posted_(posted) {
    std::lock_guard<std::mutex> lk(ctx_->live_mu);
    for (auto &p : posted_) ctx_->live.insert(p.buf.get());
  }
  ~LiveSet() {
    std::lock_guard<std::mutex> lk(ctx_->live_mu);
    for (auto &p : posted_) ctx_->live.erase(p.buf.get());
  }

 private:
  dlpg__gloo_ctx_t *ctx_;
  std::vector<Posted> &posted_;
};

}  // namespace

void run_p2p(dlpg__gloo_ctx_t *ctx, dlpg__op_t *const *ops, int n) {
  std::vector<Posted> posted;
  for (int i = 0; i < n; i++) {
    const dlpg__op_t &op = *ops[i];
    if (op.kind != DLPG__OP_SEND && op.kind != DLPG__OP_RECV) continue;
    if (op.peer < 0 || op.peer >= ctx->size || op.peer == ctx->rank)
      throw StatusError(DLPG_ERR_INVALID_ARGUMENT,
                        std::string(dlpg__op_name(op.kind)) + ": peer " +
                            std::to_string(op.peer) + " is not another rank of [0, " +
                            std::to_string(ctx->size) + ")");
    const dlpg__tensor_t &t = op.kind == DLPG__OP_SEND ? op.in[0] : op.out[0];
    posted.push_back({&op, ctx->gloo->createUnboundBuffer(t.ptr, t.nbytes)});
  }
  if (posted.empty()) return;
  LiveSet live(ctx, posted);
  for (auto &p : posted) {
    if (p.op->kind == DLPG__OP_SEND)
      p.buf->send(p.op->peer, p2p_slot(p.op->tag));
    else
      p.buf->recv(p.op->peer, p2p_slot(p.op->tag));
  }
  // One deadline for the whole batch.
  const auto deadline = std::chrono::steady_clock::now() + ctx->timeout;
  for (auto &p : posted) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() < 1) left = std::chrono::milliseconds(1);
    const bool send = p.op->kind == DLPG__OP_SEND;
    const bool done = send ? p.buf->waitSend(left) : p.buf->waitRecv(left);
    if (!done)
      throw StatusError(DLPG_ERR_ABORTED,
                        std::string(dlpg__op_name(p.op->kind)) + " with peer " +
                            std::to_string(p.op->peer) + ", tag " + std::to_string(p.op->tag) +
                            ": the group was aborted");
  }
}

}  // namespace dlpg_gloo
