/* The Gloo backend's own environment variables and log subsystem, declared here rather than
 * in core (base/params.h, base/log.h hold only core's) and handed to core in the backend's
 * table, which core registers with the registry's line (core/lines/backend.c), so dlpg-info
 * lists them and DLPG_DEBUG_SUBSYS=GLOO selects Gloo's lines. */
#ifndef DLPG_GLOO_PARAMS_H_
#define DLPG_GLOO_PARAMS_H_

#include "base/log.h"
#include "base/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(id, env name, default as a string or NULL, flags, description) */
#define DLPG__GLOO_PARAM_MAP(X)                                                              \
  X(HOSTNAME, "DLPG_GLOO_HOSTNAME", NULL, DLPG__PARAM_CACHED,                                \
    "address Gloo binds to (default: the store host's route)")                               \
  X(IFACE, "DLPG_GLOO_IFACE", NULL, DLPG__PARAM_CACHED, "network interface Gloo binds to")   \
  X(SOCKET_IFNAME, "GLOO_SOCKET_IFNAME", NULL, 0,                                             \
    "torch's name for DLPG_GLOO_IFACE (its first interface, when it lists several)")

enum {
#define DLPG__GLOO_PARAM_ENUM(id, env, def, flags, desc) DLPG__GLOO_PARAM_##id,
  DLPG__GLOO_PARAM_MAP(DLPG__GLOO_PARAM_ENUM)
#undef DLPG__GLOO_PARAM_ENUM
  DLPG__GLOO_PARAM_COUNT
};

extern const dlpg__param_decl_t dlpg__gloo_params[DLPG__GLOO_PARAM_COUNT];
/* &dlpg__gloo_params[DLPG__GLOO_PARAM_<id>], for dlpg__param_get. */
#define DLPG__GLOO_PARAM(id) (&dlpg__gloo_params[DLPG__GLOO_PARAM_##id])

/* The bit of the "GLOO" log subsystem; DLPG_INFO(GLOO, ...) logs under it. */
dlpg__log_subsys_t dlpg__gloo_log_subsys(void);
#define DLPG__SUB_GLOO dlpg__gloo_log_subsys()

#ifdef __cplusplus
}
#endif
#endif
