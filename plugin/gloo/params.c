/* The Gloo backend's variables and log subsystem (params.h), below everything in the folder
 * that reads or logs them. */
#include "gloo/params.h"

const dlpg__param_decl_t dlpg__gloo_params[DLPG__GLOO_PARAM_COUNT] = {
#define DLPG__GLOO_PARAM_DEF(id, env, def, flags, desc) {env, def, flags, desc},
    DLPG__GLOO_PARAM_MAP(DLPG__GLOO_PARAM_DEF)
#undef DLPG__GLOO_PARAM_DEF
};

/* The "GLOO" subsystem's bit: core registers the name with the table (backend.h); asking
 * again returns the same bit, looked up once. */
dlpg__log_subsys_t dlpg__gloo_log_subsys(void) {
  static int bit;
  int b = __atomic_load_n(&bit, __ATOMIC_RELAXED);
  if (!b) __atomic_store_n(&bit, b = dlpg__log_subsys_register("GLOO"), __ATOMIC_RELAXED);
  return b;
}
