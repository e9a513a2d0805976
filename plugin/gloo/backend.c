/* The Gloo backend's table (core/lines/backend.h): host memory (cpu, cuda_host), one tensor per
 * call, collectives run on the group's worker thread, sends and receives issued on the
 * caller's thread to pairwise contexts (p2p.h), and the dtype/reduce-op rules of the Gloo path,
 * written once here. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>

#include "core/lines/backend.h"
#include "base/log.h"
#include "base/status.h"
#include "gloo/create.h"
#include "gloo/gloo.h"
#include "gloo/p2p.h"
#include "gloo/params.h"

#define R_(op) (1u << (op))
#define ARITH (R_(DLPG_SUM) | R_(DLPG_PROD) | R_(DLPG_MIN) | R_(DLPG_MAX))
#define AVG_ R_(DLPG_AVG)
#define BITW (R_(DLPG_BAND) | R_(DLPG_BOR) | R_(DLPG_BXOR))
#define NONE_ 0u /* explicit "unsupported": no reduce op on this dtype */
#define PREMUL_ R_(DLPG_PREMUL_SUM)
/* Complex tensors reduce as pairs of reals (ops_reduce.cc): the ops acting on each part. */
#define CPLX (R_(DLPG_SUM) | AVG_ | PREMUL_)

/* Reduce ops per dtype (model: UCC tl_nccl's tables). Bool reduces logically: SUM/MAX are
 * OR, PROD/MIN are AND (as torch does). Every dtype moves (broadcast, gathers, p2p) as bytes. */
static const unsigned dlpg__gloo_reduce[DLPG__DT_COUNT] = {
    [DLPG__DT_INT8] = ARITH | BITW,   [DLPG__DT_INT16] = ARITH | BITW,
    [DLPG__DT_INT32] = ARITH | BITW,  [DLPG__DT_INT64] = ARITH | BITW,
    [DLPG__DT_UINT8] = ARITH | BITW,  [DLPG__DT_UINT16] = ARITH | BITW,
    [DLPG__DT_UINT32] = ARITH | BITW, [DLPG__DT_UINT64] = ARITH | BITW,
    [DLPG__DT_FLOAT16] = ARITH | AVG_ | PREMUL_, [DLPG__DT_BFLOAT16] = ARITH | AVG_ | PREMUL_,
    [DLPG__DT_FLOAT32] = ARITH | AVG_ | PREMUL_, [DLPG__DT_FLOAT64] = ARITH | AVG_ | PREMUL_,
    [DLPG__DT_BOOL] = ARITH | BITW,
    [DLPG__DT_FLOAT8_E4M3FN] = NONE_, [DLPG__DT_FLOAT8_E5M2] = NONE_,
    [DLPG__DT_COMPLEX64] = CPLX, [DLPG__DT_COMPLEX128] = CPLX,
};

dlpg_status_t dlpg__gloo_check_reduce(const char *fn, dlpg__dtype_t dt, dlpg_reduce_op_t op) {
  unsigned mask = dlpg__gloo_reduce[dt];
  if (mask & R_(op)) return DLPG_OK;
  const char *opn = dlpg__reduce_op_name(op), *dtn = dlpg__dtype_name(dt);
  if (mask == NONE_)
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "%s: Gloo cannot reduce %s tensors (reduce op %s); use CUDA tensors (NCCL)",
                       fn, dtn, opn);
  if (dlpg__dtype_is_complex(dt))
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "%s: reduce op %s is not defined on complex tensors (%s); complex "
                       "dtypes reduce with sum, avg and premul_sum (Gloo)", fn, opn, dtn);
  if (op == DLPG_AVG || op == DLPG_PREMUL_SUM)
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "%s: reduce op %s needs a floating or complex dtype, got %s (Gloo)", fn,
                       opn, dtn);
  return dlpg__error(DLPG_ERR_UNSUPPORTED,
                     "%s: bitwise reduce op %s needs an integer or bool dtype, got %s (Gloo)", fn,
                     opn, dtn);
}

static dlpg_status_t dlpg__gloo_check(const char *fn, const dlpg__be_op_t *op) {
  if (op->kind == DLPG__OP_ALLREDUCE || op->kind == DLPG__OP_REDUCE ||
      op->kind == DLPG__OP_REDUCE_SCATTER || op->kind == DLPG__OP_REDUCE_SCATTER_V)
    return dlpg__gloo_check_reduce(fn, op->in[0].dtype, op->rop);
  return DLPG_OK;
}

/* Gloo's TCP transport writes with writev, which cannot ask for MSG_NOSIGNAL, so a peer that
 * dies mid-transfer would raise SIGPIPE and, under the default disposition, kill this
 * process instead of failing the operation with DLPG_ERR_REMOTE. A host that installed its
 * own handler (or ignores it, as Python does) is left alone. */
static pthread_once_t dlpg__sigpipe_once = PTHREAD_ONCE_INIT;
static void dlpg__sigpipe_default_ignore(void) {
  struct sigaction old;
  if (sigaction(SIGPIPE, NULL, &old) == 0 && !(old.sa_flags & SA_SIGINFO) &&
      old.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
    DLPG_INFO(GLOO, -1, "SIGPIPE was at its default (terminate): now ignored, so a peer that "
              "leaves mid-transfer fails the operation instead of killing the process");
  }
}

/* At the group's first CPU operation (on the worker, or on a caller's thread for a send or
 * receive, under the group's lock): an empty state, which connects nothing yet. The mesh is
 * rendezvoused by the worker at the first collective, each pairwise context by the first
 * transfer with that peer (p2p.h). */
static dlpg_status_t dlpg__gloo_state_create(const dlpg__be_group_t *g, void **state) {
  pthread_once(&dlpg__sigpipe_once, dlpg__sigpipe_default_ignore);
  dlpg__gloo_group_t *gg = NULL;
  dlpg_status_t st = dlpg__gloo_group_create(g->store, dlpg__be_group_keys(g), g->rank, g->size, g->timeout_s, &gg);
  /* dlpg_group_abort sets the flag before it aborts the states present under the group's
   * lock, which is held here: a state made after that is aborted at birth. */
  if (st == DLPG_OK && dlpg__be_group_aborted(g)) dlpg__gloo_group_abort(gg);
  *state = gg;
  return st;
}

/* Sends and receives arrive here on the caller's thread (p2p_direct) and go to the pairwise
 * path; everything else arrives on the worker and runs on the mesh. */
static dlpg_status_t dlpg__gloo_issue(dlpg__be_op_t *const *views, int n) {
  /* Built in, Gloo works on core's ops themselves (the views are their first member). */
  dlpg__op_t *const *ops = dlpg__ops_of_views(views);
  if (ops[0]->kind == DLPG__OP_SEND || ops[0]->kind == DLPG__OP_RECV)
    return dlpg__gloo_p2p_issue(ops, n);
  dlpg__gloo_ctx_t *mesh = NULL;
  DLPG_CHECK(dlpg__gloo_group_mesh((dlpg__gloo_group_t *)ops[0]->state, &mesh));
  return dlpg__gloo_run(mesh, ops, n);
}

static void dlpg__gloo_abort(void *state) { dlpg__gloo_group_abort((dlpg__gloo_group_t *)state); }
static void dlpg__gloo_destroy(void *state) { dlpg__gloo_group_destroy((dlpg__gloo_group_t *)state); }

static char dlpg__gloo_info[64];
static pthread_once_t dlpg__gloo_info_once = PTHREAD_ONCE_INIT;
static void dlpg__gloo_info_init(void) {
  snprintf(dlpg__gloo_info, sizeof dlpg__gloo_info, "gloo %s", dlpg__gloo_version());
}
static const char *dlpg__gloo_build_info(void) {
  pthread_once(&dlpg__gloo_info_once, dlpg__gloo_info_init);
  return dlpg__gloo_info;
}

const dlpg__backend_vtbl_t dlpg__gloo_backend = {
    .struct_size = sizeof(dlpg__backend_vtbl_t),
    .version = DLPG__BACKEND_ABI_VERSION,
    .host_size = sizeof(dlpg__host_t),
    .name = "gloo",
    .devices = DLPG__DEV_BIT(kDLCPU) | DLPG__DEV_BIT(kDLCUDAHost),
    .max_tensors = 1,
    .on_worker = 1,
    .p2p_direct = 1,
    .check = dlpg__gloo_check,
    .state_create = dlpg__gloo_state_create,
    .issue = dlpg__gloo_issue,
    .abort = dlpg__gloo_abort,
    .destroy = dlpg__gloo_destroy,
    .build_info = dlpg__gloo_build_info,
    /* Its variables, in base/params.h's declaration (the ABI's dlpg__be_param_t has the same
     * layout, asserted in core/lines/backend.c). */
    .params = (const dlpg__be_param_t *)(const void *)dlpg__gloo_params,
    .nparams = DLPG__GLOO_PARAM_COUNT,
    .log_subsys = "GLOO",
    /* Every kind: collectives and barriers on the mesh, sends and receives pairwise. */
    .kinds = DLPG__KIND_BIT(DLPG__OP_ALLREDUCE) | DLPG__KIND_BIT(DLPG__OP_BROADCAST) |
             DLPG__KIND_BIT(DLPG__OP_REDUCE) | DLPG__KIND_BIT(DLPG__OP_ALLGATHER) |
             DLPG__KIND_BIT(DLPG__OP_REDUCE_SCATTER) | DLPG__KIND_BIT(DLPG__OP_ALLTOALL) |
             DLPG__KIND_BIT(DLPG__OP_BARRIER) | DLPG__KIND_BIT(DLPG__OP_SEND) |
             DLPG__KIND_BIT(DLPG__OP_RECV) | DLPG__KIND_BIT(DLPG__OP_GATHER) |
             DLPG__KIND_BIT(DLPG__OP_SCATTER) | DLPG__KIND_BIT(DLPG__OP_ALLGATHERV) |
             DLPG__KIND_BIT(DLPG__OP_ALLTOALLV) | DLPG__KIND_BIT(DLPG__OP_REDUCE_SCATTER_V),
};
