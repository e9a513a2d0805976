/* Fake backend modules that core must refuse, each with a message naming both sides (see
 * backend_module.cmake). One source, built once per DLPG_FAKE_KIND:
 *   1  a module of another backend ABI: it exports dlpg_backend_init_v2 only
 *   2  the right entry point, but its table says version 2 and 4096 bytes
 *   3  the right entry point and table, but it was built against a 65536-byte host table
 *   4  it finds the host table too small itself and says so through host->verror
 * None of them serves anything: core must never call past the entry point. */
#include <stdarg.h>
#include <stddef.h>

#include "core/group/backend_abi.h"

#define FAKE_EXPORT __attribute__((visibility("default")))

static dlpg_status_t fake_check(const char *fn, const dlpg__be_op_t *op) {
  (void)fn, (void)op;
  return DLPG_ERR_INTERNAL;
}
static dlpg_status_t fake_state_create(const dlpg__be_group_t *g, void **state) {
  (void)g, (void)state;
  return DLPG_ERR_INTERNAL;
}
static dlpg_status_t fake_issue(dlpg__be_op_t *const *ops, int n) {
  (void)ops, (void)n;
  return DLPG_ERR_INTERNAL;
}
static void fake_state(void *state) { (void)state; }
static const char *fake_build_info(void) { return "fake"; }

static dlpg__backend_vtbl_t fake_table = {
    .struct_size = sizeof(dlpg__backend_vtbl_t),
    .version = DLPG__BACKEND_ABI_VERSION,
    .host_size = sizeof(dlpg__host_t),
    .name = "nccl",
    .devices = DLPG__DEV_BIT(kDLCUDA) | DLPG__DEV_BIT(kDLCUDAManaged),
    .max_tensors = 1,
    .check = fake_check,
    .state_create = fake_state_create,
    .issue = fake_issue,
    .abort = fake_state,
    .destroy = fake_state,
    .build_info = fake_build_info,
};

#if DLPG_FAKE_KIND == 1
FAKE_EXPORT dlpg_status_t dlpg_backend_init_v2(const void *host, const void **out);
dlpg_status_t dlpg_backend_init_v2(const void *host, const void **out) {
  (void)host;
  *out = &fake_table;
  return DLPG_OK;
}
#else
static dlpg_status_t fake_error(const dlpg__host_t *host, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  dlpg_status_t st = host->verror(DLPG_ERR_UNSUPPORTED, fmt, ap);
  va_end(ap);
  return st;
}

FAKE_EXPORT dlpg_status_t dlpg_backend_init_v1(const dlpg__host_t *host,
                                               const dlpg__backend_vtbl_t **out);
dlpg_status_t dlpg_backend_init_v1(const dlpg__host_t *host, const dlpg__backend_vtbl_t **out) {
  *out = &fake_table;
#if DLPG_FAKE_KIND == 2
  fake_table.version = 2;
  fake_table.struct_size = 4096;
#elif DLPG_FAKE_KIND == 3
  fake_table.host_size = 65536;
#elif DLPG_FAKE_KIND == 4
  if (host->struct_size < 65536)
    return fake_error(host, "libdlpg_fake_verror.so: module needs a host table of 65536 bytes, "
                      "this libdlpg.so (backend ABI v%d) offers %zu", host->version,
                      host->struct_size);
#endif
  (void)fake_error, (void)host;
  return DLPG_OK;
}
#endif
