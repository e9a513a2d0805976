/* The NCCL backend's table and the module's entry point (core/backend.h). Core loads
 * libdlpg_nccl.so with dlopen at the first CUDA tensor and calls dlpg_nccl_backend_init, the
 * module's only exported symbol; everything else the module needs from core comes through
 * the host services it is handed (host.c). */
#include <stdio.h>

#include "core/backend.h"
#include "nccl/nccl_internal.h"
#include "nccl/rules.h"

/* The NCCL the module runs on, as a version code (the smaller of the headers' and the
 * library's: fp8 types exist only if both have them). Set once by the entry point. */
static int dlpg__nccl_version;

/* The rules of rules.c for op, with the device's capability read only for fp8. */
static dlpg_status_t dlpg__nccl_check(const char *fn, const dlpg__op_t *op) {
  if (op->kind != DLPG__OP_ALLREDUCE && op->kind != DLPG__OP_REDUCE &&
      op->kind != DLPG__OP_REDUCE_SCATTER)
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

static dlpg_status_t dlpg__nccl_state_create(struct dlpg_group *g, void **state) {
  dlpg__nccl_t *st = NULL;
  dlpg_status_t s = dlpg__nccl_create(g, &st);
  *state = st;
  return s;
}

static void dlpg__nccl_abort_state(void *state) { dlpg__nccl_abort((dlpg__nccl_t *)state); }
static void dlpg__nccl_destroy_state(void *state) { dlpg__nccl_destroy((dlpg__nccl_t *)state); }

static const dlpg__backend_vtbl_t dlpg__nccl_backend = {
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
};

/* Set by the entry point, read by host.c's forwarders. */
const dlpg__host_t *dlpg__nccl_host;

const dlpg__param_decl_t dlpg__nccl_params[DLPG__NCCL_PARAM_COUNT] = {
#define DLPG__NCCL_PARAM_DEF(id, env, def, flags, desc) {env, def, flags, desc},
    DLPG__NCCL_PARAM_MAP(DLPG__NCCL_PARAM_DEF)
#undef DLPG__NCCL_PARAM_DEF
};
dlpg__log_subsys_t dlpg__nccl_log_subsys; /* 0 (filtered by level only) until registered */

__attribute__((visibility("default"))) dlpg_status_t dlpg_nccl_backend_init(
    const dlpg__host_t *host, const dlpg__backend_vtbl_t **out);

dlpg_status_t dlpg_nccl_backend_init(const dlpg__host_t *host, const dlpg__backend_vtbl_t **out) {
  if (!host || host->struct_size < sizeof(dlpg__host_t) || host->abi != DLPG__HOST_ABI) {
    /* Without a matching host there is no way to record a message: the loader reports the
     * status alone. */
    return DLPG_ERR_UNSUPPORTED;
  }
  dlpg__nccl_host = host;
  /* The module is never unloaded once initialised (-z nodelete), so its table may be kept. */
  host->params_register("nccl", dlpg__nccl_params, DLPG__NCCL_PARAM_COUNT);
  dlpg__nccl_log_subsys = host->log_subsys_register("NCCL");
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) v = 0;
  dlpg__nccl_version = v < NCCL_VERSION_CODE ? v : NCCL_VERSION_CODE;
  *out = &dlpg__nccl_backend;
  return DLPG_OK;
}
