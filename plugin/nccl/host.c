/* The host table core handed the module's entry point, and the functions the module calls
 * instead of core's (host.h): each forwards to the table. The module's version script keeps
 * these names local. This file uses nothing else of the module: the others call it, the
 * entry point sets the table. */
#include "nccl/host.h"

#include <stdarg.h>

#include "base/status.h"

static const dlpg__host_t *dlpg__nccl_host;
static int dlpg__nccl_subsys;
#define H dlpg__nccl_host

void dlpg__nccl_host_set(const dlpg__host_t *host, const char *log_subsys) {
  dlpg__nccl_host = host;
  dlpg__nccl_subsys = host->log_subsys(log_subsys);
}

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

int dlpg__nccl_log_enabled(int level) { return H->log_enabled(level, dlpg__nccl_subsys); }

void dlpg__nccl_log(int level, int rank, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  H->vlog(level, dlpg__nccl_subsys, rank, fmt, ap);
  va_end(ap);
}

const char *dlpg__nccl_param_str(const dlpg__be_param_t *p) { return H->param_str(p); }
int dlpg__nccl_param_long(const dlpg__be_param_t *p, long *out) { return H->param_long(p, out); }
int dlpg__nccl_param_default_env(const dlpg__be_param_t *p, const char *value) {
  return H->param_default_env(p, value);
}

const char *dlpg__op_name(dlpg__op_kind_t kind) { return H->op_name(kind); }
const char *dlpg__dtype_name(dlpg__dtype_t dt) { return H->dtype_name(dt); }
const char *dlpg__reduce_op_name(dlpg_reduce_op_t op) { return H->reduce_op_name(op); }

void dlpg__nccl_work_complete(struct dlpg_work *w, dlpg_status_t status, const char *msg) {
  H->work_complete(w, status, msg);
}

void dlpg__nccl_work_set_backend(struct dlpg_work *w, const dlpg__work_backend_t *be,
                                 void *data) {
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
