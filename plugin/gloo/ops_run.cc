// dlpg__gloo_run: the island's entry point for operations. A batch runs its sends and
// receives first (posted together), then its collectives in order; the first failure ends
// the batch, because a Gloo context that saw an I/O error or a timeout is unusable.
#include <string>

#include "gloo/ops_internal.h"
#include "gloo/peers.h"

namespace {

bool is_p2p(const dlpg__op_t *op) {
  return op->kind == DLPG__OP_SEND || op->kind == DLPG__OP_RECV;
}

const char *op_name(const dlpg__op_t *op) {
  return op->kind >= 0 && op->kind < DLPG__OP_COUNT ? dlpg__op_name(op->kind) : "dlpg__gloo_run";
}

}  // namespace

extern "C" dlpg_status_t dlpg__gloo_run(dlpg__gloo_ctx_t *ctx, dlpg__op_t *const *ops, int n) {
  if (!ctx || !ctx->gloo) return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "dlpg__gloo_run: ctx is NULL");
  if (n < 0 || (n > 0 && !ops))
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "dlpg__gloo_run: %d operations at %p", n,
                       static_cast<const void *>(ops));
  for (int i = 0; i < n; i++)
    if (!ops[i]) return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "dlpg__gloo_run: ops[%d] is NULL", i);
  if (ctx->aborted.load())
    return dlpg__error(DLPG_ERR_ABORTED, "%s: the group was aborted", n ? op_name(ops[0]) : "dlpg__gloo_run");

  // Send/receive phase: one name for the message, the first p2p op's.
  const dlpg__op_t *first_p2p = nullptr;
  for (int i = 0; i < n && !first_p2p; i++)
    if (is_p2p(ops[i])) first_p2p = ops[i];
  // A mismatch with a peer's send or receive (INVALID_ARGUMENT, its message beginning with
  // the name of the operation that failed) leaves the transport in step, and the peer may
  // not have seen it (a small send does not wait for its receiver), so the batch's
  // collectives still run; the mismatch is reported at the end.
  dlpg_status_t deferred = DLPG_OK;
  std::string deferred_msg;
  if (first_p2p) {
    try {
      dlpg_gloo::run_p2p(ctx, ops, n);
    } catch (const dlpg_gloo::StatusError &e) {
      if (e.status() != DLPG_ERR_INVALID_ARGUMENT || ctx->aborted.load())
        return dlpg_gloo::run_failure_status(ctx, op_name(first_p2p));
      deferred = e.status();
      deferred_msg = e.what();
    } catch (...) {
      return dlpg_gloo::run_failure_status(ctx, op_name(first_p2p));
    }
  }
  for (int i = 0; i < n; i++) {
    if (is_p2p(ops[i])) continue;
    try {
      dlpg_gloo::run_collective(ctx, *ops[i]);
    } catch (...) {
      return dlpg_gloo::run_failure_status(ctx, op_name(ops[i]));
    }
  }
  if (deferred != DLPG_OK)
    return dlpg__error(deferred, "%s", deferred_msg.c_str());  // names its operation
  return DLPG_OK;
}
