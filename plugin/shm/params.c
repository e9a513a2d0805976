/* The shared-memory backend's variables and log subsystem (params.h), below everything in
 * the folder that reads or logs them. */
#include "shm/params.h"

const dlpg__param_decl_t dlpg__shm_params[DLPG__SHM_PARAM_COUNT] = {
#define DLPG__SHM_PARAM_DEF(id, env, def, flags, desc) {env, def, flags, desc},
    DLPG__SHM_PARAM_MAP(DLPG__SHM_PARAM_DEF)
#undef DLPG__SHM_PARAM_DEF
};

/* The "SHM" subsystem's bit: core registers the name with the table; asking again returns
 * the same bit, looked up once. */
dlpg__log_subsys_t dlpg__shm_log_subsys(void) {
  static int bit;
  int b = __atomic_load_n(&bit, __ATOMIC_RELAXED);
  if (!b) __atomic_store_n(&bit, b = dlpg__log_subsys_register("SHM"), __ATOMIC_RELAXED);
  return b;
}
