/* Versions, the build string and the exported function table (dlpg_get_api). The table
 * only ever grows at its end, in the field order of dlpg_api_t. */
#include <pthread.h>
#include <stdio.h>

#include "core/lines/backend.h"
#include "base/status.h"

static const dlpg_api_t dlpg__api_v0 = {
    sizeof(dlpg_api_t),
    DLPG_ABI_MAJOR,
    DLPG_VERSION_CODE,
    dlpg_status_name,
    dlpg_last_error,
    dlpg_get_version,
    dlpg_get_build_info,
    dlpg_store_open,
    dlpg_store_port,
    dlpg_store_from_ops,
    dlpg_store_set,
    dlpg_store_get,
    dlpg_store_add,
    dlpg_store_wait,
    dlpg_store_check,
    dlpg_store_delete_key,
    dlpg_store_close,
    dlpg_group_create,
    dlpg_group_create_from_env,
    dlpg_group_rank,
    dlpg_group_size,
    dlpg_group_abort,
    dlpg_group_destroy,
    dlpg_allreduce,
    dlpg_broadcast,
    dlpg_reduce,
    dlpg_allgather,
    dlpg_reduce_scatter,
    dlpg_alltoall,
    dlpg_send,
    dlpg_recv,
    dlpg_barrier,
    dlpg_group_start,
    dlpg_group_end,
    dlpg_work_wait,
    dlpg_work_test,
    dlpg_work_error,
    dlpg_work_free,
    dlpg_group_flight_record,
    dlpg_reduce_supported,
    dlpg_recv_any,
    dlpg_work_source,
    dlpg_allreduce_ex,
    dlpg_reduce_ex,
    dlpg_reduce_scatter_ex,
    dlpg_group_split,
    dlpg_gather,
    dlpg_scatter,
    dlpg_allgatherv,
    dlpg_alltoallv,
    dlpg_reduce_scatter_v,
    dlpg_group_create_subset,
};

const dlpg_api_t *dlpg_get_api(uint32_t abi_major) {
  return abi_major == DLPG_ABI_MAJOR ? &dlpg__api_v0 : NULL;
}

dlpg_status_t dlpg_get_version(int *version_code) {
  if (!version_code)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "dlpg_get_version: version_code is NULL");
  *version_code = DLPG_VERSION_CODE;
  return DLPG_OK;
}

#define DLPG__STR2(x) #x
#define DLPG__STR(x) DLPG__STR2(x)

static char dlpg__build_info[2048];
static pthread_once_t dlpg__build_once = PTHREAD_ONCE_INIT;

/* Every backend with its versions; a module is loaded here if no operation has yet, so the
 * line says which modules were found and which loaded (and why not). Computed once: the
 * string stays valid for the life of the process. */
static void dlpg__build_info_init(void) {
  int n = snprintf(dlpg__build_info, sizeof dlpg__build_info,
                   "dlpg " DLPG__STR(DLPG_VERSION_MAJOR) "." DLPG__STR(
                       DLPG_VERSION_MINOR) "." DLPG__STR(DLPG_VERSION_PATCH) "; ");
  dlpg__backend_info(dlpg__build_info + n, sizeof dlpg__build_info - (size_t)n, 1);
}

dlpg_status_t dlpg_get_build_info(const char **info) {
  if (!info) return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "dlpg_get_build_info: info is NULL");
  pthread_once(&dlpg__build_once, dlpg__build_info_init);
  *info = dlpg__build_info;
  return DLPG_OK;
}
