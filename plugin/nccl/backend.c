/* The NCCL backend's table and the module's entry point (core/group/backend_abi.h). Core loads
 * libdlpg_nccl.so with dlopen at the first CUDA tensor and calls dlpg_backend_init_v1, the
 * module's only exported symbol; everything else the module needs from core comes through
 * the host table it is handed (kept by host.c). */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include "nccl/nccl_internal.h"
#include "nccl/rules.h"

/* The NCCL the module runs on, as a version code (the smaller of the headers' and the
 * library's: fp8 types exist only if both have them). Set once by the entry point. */
static int dlpg__nccl_version;

/* The rules of rules.c for op, with the device's capability read only for fp8. */
static dlpg_status_t dlpg__nccl_check(const char *fn, const dlpg__be_op_t *op) {
  DLPG_CHECK(dlpg__nccl_p2p_rule(fn, op->kind, op->peer));
  if (op->kind != DLPG__OP_ALLREDUCE && op->kind != DLPG__OP_REDUCE &&
      op->kind != DLPG__OP_REDUCE_SCATTER && op->kind != DLPG__OP_REDUCE_SCATTER_V)
    return DLPG_OK;
  dlpg__dtype_t dt = op->in[0].dtype;
  int fp8 = dlpg__nccl_is_fp8(dt);
  for (int i = 0; i < op->ntensors; i++) {
    int dev = op->in[i].device_id;
    DLPG_CHECK(dlpg__nccl_reduce_rule(fn, dt, op->rop, dlpg__nccl_version, dev,
                                      fp8 ? dlpg__nccl_device_cc_major(dev) : 0));
  }
  return DLPG_OK;
}

static dlpg_status_t dlpg__nccl_state_create(const dlpg__be_group_t *g, void **state) {
  dlpg__nccl_t *st = NULL;
  dlpg_status_t s = dlpg__nccl_create(g, &st);
  *state = st;
  return s;
}

static void dlpg__nccl_abort_state(void *state) { dlpg__nccl_abort((dlpg__nccl_t *)state); }
static void dlpg__nccl_destroy_state(void *state) { dlpg__nccl_destroy((dlpg__nccl_t *)state); }

static const dlpg__backend_vtbl_t dlpg__nccl_backend = {
    .struct_size = sizeof(dlpg__backend_vtbl_t),
    .version = DLPG__BACKEND_ABI_VERSION,
    .host_size = sizeof(dlpg__host_t),
    .name = "nccl",
    .devices = DLPG__DEV_BIT(kDLCUDA) | DLPG__DEV_BIT(kDLCUDAManaged),
    .max_tensors = DLPG__MAX_LOCAL_DEVICES,
    .on_worker = 0,
    .check = dlpg__nccl_check,
    .state_create = dlpg__nccl_state_create,
    .issue = dlpg__nccl_issue,
    .abort = dlpg__nccl_abort_state,
    .destroy = dlpg__nccl_destroy_state,
    .build_info = dlpg__nccl_build_info,
    .params = dlpg__nccl_params,
    .nparams = DLPG__NCCL_NPARAMS,
    .log_subsys = "NCCL",
    /* What dlpg__enqueue (issue.c, issue_v.c) maps to NCCL calls; barriers run on host
     * memory. A module built before the rooted and uneven kinds lists none of them, and
     * core refuses those on CUDA tensors at validation. */
    .kinds = DLPG__KIND_BIT(DLPG__OP_ALLREDUCE) | DLPG__KIND_BIT(DLPG__OP_BROADCAST) |
             DLPG__KIND_BIT(DLPG__OP_REDUCE) | DLPG__KIND_BIT(DLPG__OP_ALLGATHER) |
             DLPG__KIND_BIT(DLPG__OP_REDUCE_SCATTER) | DLPG__KIND_BIT(DLPG__OP_ALLTOALL) |
             DLPG__KIND_BIT(DLPG__OP_SEND) | DLPG__KIND_BIT(DLPG__OP_RECV) |
             DLPG__KIND_BIT(DLPG__OP_GATHER) | DLPG__KIND_BIT(DLPG__OP_SCATTER) |
             DLPG__KIND_BIT(DLPG__OP_ALLGATHERV) | DLPG__KIND_BIT(DLPG__OP_ALLTOALLV) |
             DLPG__KIND_BIT(DLPG__OP_REDUCE_SCATTER_V),
    .state_split = dlpg__nccl_state_split,
};

/* A message through a host whose verror is known to lie inside its struct_size, before the
 * module keeps it (host.c's forwarders are not set yet). */
static dlpg_status_t dlpg__nccl_host_error(const dlpg__host_t *host, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  dlpg_status_t st = host->verror(DLPG_ERR_UNSUPPORTED, fmt, ap);
  va_end(ap);
  return st;
}

__attribute__((visibility("default"))) dlpg_status_t DLPG__BACKEND_INIT(
    const dlpg__host_t *host, const dlpg__backend_vtbl_t **out);

dlpg_status_t DLPG__BACKEND_INIT(const dlpg__host_t *host, const dlpg__backend_vtbl_t **out) {
  /* The table goes out whatever happens: on a mismatch its header tells core what this
   * module speaks, even when the host is too small to carry a message. */
  *out = &dlpg__nccl_backend;
  size_t reach = host ? host->struct_size : 0;
  if (!host || reach < offsetof(dlpg__host_t, verror) + sizeof host->verror)
    return DLPG_ERR_UNSUPPORTED;
  if (host->version != DLPG__BACKEND_ABI_VERSION || reach < sizeof(dlpg__host_t))
    return dlpg__nccl_host_error(host, "libdlpg_nccl.so: module speaks backend ABI v%d (a host "
                                 "table of %zu bytes), this libdlpg.so speaks v%d (%zu bytes) "
                                 "(rebuild the module from the same dlpg version)",
                                 DLPG__BACKEND_ABI_VERSION, sizeof(dlpg__host_t),
                                 host->version, reach);
  dlpg__nccl_host_set(host, dlpg__nccl_backend.log_subsys);
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) v = 0;
  dlpg__nccl_version = v < NCCL_VERSION_CODE ? v : NCCL_VERSION_CODE;
  return DLPG_OK;
}
