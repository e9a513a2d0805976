/* Core's functions as the NCCL module sees them: each forwards to the host services core
 * handed to dlpg_nccl_backend_init (backend.c), so the module keeps no copy of core's state
 * (last error, log configuration, parameter cache) and a message set here reaches the user
 * through dlpg_last_error. The module's version script keeps these names local. */
#include <stdarg.h>

#include "core/backend.h"
#include "base/status.h"
#include "core/tensor.h"
#include "nccl/nccl_internal.h"

extern const dlpg__host_t *dlpg__nccl_host;
#define H dlpg__nccl_host

dlpg_status_t dlpg__verror(dlpg_status_t status, const char *fmt, va_list ap) {
  return H->verror(status, fmt, ap);
}

dlpg_status_t dlpg__error(dlpg_status_t status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  dlpg_status_t st = H->verror(status, fmt, ap);
  va_end(ap);
  return st;
}

dlpg_status_t dlpg__error_prefix(dlpg_status_t status, const char *prefix) {
  return H->error_prefix(status, prefix);
}

const char *dlpg__last_error(void) { return H->last_error(); }
void dlpg__clear_error(void) { H->clear_error(); }

int dlpg__log_enabled(dlpg__log_level_t level, dlpg__log_subsys_t sub) {
  return H->log_enabled(level, sub);
}

void dlpg__log(dlpg__log_level_t level, dlpg__log_subsys_t sub, int rank, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  H->vlog(level, sub, rank, fmt, ap);
  va_end(ap);
}

const char *dlpg__param_get(const dlpg__param_decl_t *p) { return H->param_get(p); }
int dlpg__param_get_long(const dlpg__param_decl_t *p, long *out) {
  return H->param_get_long(p, out);
}
int dlpg__param_set_default_env(const dlpg__param_decl_t *p, const char *value) {
  return H->param_set_default_env(p, value);
}

const char *dlpg__op_name(dlpg__op_kind_t kind) { return H->op_name(kind); }
const char *dlpg__dtype_name(dlpg__dtype_t dt) { return H->dtype_name(dt); }
const char *dlpg__reduce_op_name(dlpg_reduce_op_t op) { return H->reduce_op_name(op); }

void dlpg__work_complete(struct dlpg_work *w, dlpg_status_t status, const char *msg) {
  H->work_complete(w, status, msg);
}

void dlpg__work_set_backend(struct dlpg_work *w, const dlpg__work_backend_t *be, void *data) {
  H->work_set_backend(w, be, data);
}

dlpg_status_t dlpg__nccl_store_set(dlpg_store_t *s, const char *key, const void *value,
                                   size_t len) {
  return H->store_set(s, key, value, len);
}

dlpg_status_t dlpg__nccl_store_get(dlpg_store_t *s, const char *key, double timeout_s,
                                   void *buf, size_t cap, size_t *len) {
  return H->store_get(s, key, timeout_s, buf, cap, len);
}
