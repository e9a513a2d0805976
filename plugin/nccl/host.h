/* What the NCCL module gets from core, all through the host table core hands its entry
 * point (core/group/backend_abi.h): host.c keeps the table and defines these, so the module links
 * no part of core and keeps no copy of core's state (last error, log configuration,
 * parameter cache). The ground floor's error functions (base/status.h: dlpg__error,
 * dlpg__error_prefix, dlpg__last_error, ...) are defined by host.c the same way, so a message
 * recorded here reaches the user through dlpg_last_error. host.c uses nothing else of the
 * module. */
#ifndef DLPG_NCCL_HOST_H_
#define DLPG_NCCL_HOST_H_

#include "core/group/backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Keep host (the entry point, once, before anything else runs) and resolve the log
 * subsystem log_subsys under which the module logs. */
void dlpg__nccl_host_set(const dlpg__host_t *host, const char *log_subsys);

/* Names of core's enums (the same names core defines, so nccl/rules.c compiles in core's
 * unit tests as well as in the module). */
const char *dlpg__op_name(dlpg__op_kind_t kind);
const char *dlpg__dtype_name(dlpg__dtype_t dt);
const char *dlpg__reduce_op_name(dlpg_reduce_op_t op);

/* Completion of an op's work (opaque: core's). */
void dlpg__nccl_work_complete(struct dlpg_work *w, dlpg_status_t status, const char *msg);
void dlpg__nccl_work_set_backend(struct dlpg_work *w, const dlpg__work_backend_t *be,
                                 void *data);

/* Core's store of the group (its view's store). */
dlpg_status_t dlpg__nccl_store_set(dlpg_store_t *s, const char *key, const void *value,
                                   size_t len);
dlpg_status_t dlpg__nccl_store_get(dlpg_store_t *s, const char *key, double timeout_s,
                                   void *buf, size_t cap, size_t *len);

/* The module's own variables (declared in nccl/settings.c, listed in its table). */
const char *dlpg__nccl_param_str(const dlpg__be_param_t *p);
int dlpg__nccl_param_long(const dlpg__be_param_t *p, long *out);
int dlpg__nccl_param_default_env(const dlpg__be_param_t *p, const char *value);

/* Logging under the module's subsystem ("NCCL"): the level is checked before formatting. */
int dlpg__nccl_log_enabled(int level);
void dlpg__nccl_log(int level, int rank, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
#define DLPG_NCCL_LOG(level, rank, ...)                                                  \
  do {                                                                                   \
    if (dlpg__nccl_log_enabled(DLPG__BE_LOG_##level))                                    \
      dlpg__nccl_log(DLPG__BE_LOG_##level, (rank), __VA_ARGS__);                         \
  } while (0)
#define DLPG_NCCL_WARN(rank, ...) DLPG_NCCL_LOG(WARN, rank, __VA_ARGS__)
#define DLPG_NCCL_INFO(rank, ...) DLPG_NCCL_LOG(INFO, rank, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
