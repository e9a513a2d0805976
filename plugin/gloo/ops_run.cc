// dlpg__gloo_run: the island's entry point for collectives on the group's mesh. A batch runs
// its collectives in order; the first failure ends the batch, because a Gloo context that
// saw an I/O error or a timeout is unusable. Sends and receives never come here: they run
// on pairwise contexts (p2p.h).
#include <vector>

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
  for (int i = 0; i < n; i++) {
    if (!ops[i]) return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "dlpg__gloo_run: ops[%d] is NULL", i);
    if (is_p2p(ops[i]))
      return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                         "dlpg__gloo_run: ops[%d] is a %s; sends and receives run on pairwise "
                         "contexts (dlpg__gloo_p2p_issue)", i, op_name(ops[i]));
  }
  if (ctx->aborted.load())
    return dlpg__error(DLPG_ERR_ABORTED, "%s: the group was aborted", n ? op_name(ops[0]) : "dlpg__gloo_run");
  for (int i = 0; i < n; i++) {
    try {
      dlpg__op_t view;
      std::vector<char> scratch;
      if (dlpg_gloo::is_vcollective(ops[i]->kind))
        dlpg_gloo::run_vcollective(ctx, *ops[i]);
      else
        dlpg_gloo::run_collective(ctx, dlpg_gloo::reduce_view(*ops[i], view, scratch));
    } catch (...) {
      return dlpg_gloo::run_failure_status(ctx, op_name(ops[i]));
    }
  }
  return DLPG_OK;
}
