/* The public header compiled as plain C99 (-pedantic -Werror): takes the address of every
 * function and checks the size and field offsets of every public struct against values
 * written out for x86-64 (LP64), so an accidental layout change fails here. Exit status 0
 * on success; each failed check is printed. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "dlpg/dlpg.h"

static int failures = 0;

#define CHECK_EQ(what, got, want)                                                     \
  do {                                                                              \
    unsigned long g_ = (unsigned long)(got), w_ = (unsigned long)(want);            \
    if (g_ != w_) {                                                                 \
      fprintf(stderr, "FAIL %s: got %lu, want %lu\n", what, g_, w_);                \
      failures++;                                                                   \
    }                                                                               \
  } while (0)

#define OFF(type, field, want) CHECK_EQ("offsetof(" #type ", " #field ")", offsetof(type, field), want)

/* Every public function, by address (a missing export fails the link). */
typedef void (*any_fn)(void);
static const any_fn all_functions[] = {
    (any_fn)dlpg_status_name,      (any_fn)dlpg_last_error,        (any_fn)dlpg_get_version,
    (any_fn)dlpg_get_build_info,   (any_fn)dlpg_store_open,        (any_fn)dlpg_store_port,
    (any_fn)dlpg_store_from_ops,   (any_fn)dlpg_store_set,         (any_fn)dlpg_store_get,
    (any_fn)dlpg_store_add,        (any_fn)dlpg_store_wait,        (any_fn)dlpg_store_check,
    (any_fn)dlpg_store_delete_key, (any_fn)dlpg_store_close,       (any_fn)dlpg_group_create,
    (any_fn)dlpg_group_create_from_env, (any_fn)dlpg_group_rank,   (any_fn)dlpg_group_size,
    (any_fn)dlpg_group_abort,      (any_fn)dlpg_group_destroy,     (any_fn)dlpg_allreduce,
    (any_fn)dlpg_broadcast,        (any_fn)dlpg_reduce,            (any_fn)dlpg_allgather,
    (any_fn)dlpg_reduce_scatter,   (any_fn)dlpg_alltoall,          (any_fn)dlpg_send,
    (any_fn)dlpg_recv,             (any_fn)dlpg_barrier,           (any_fn)dlpg_group_start,
    (any_fn)dlpg_group_end,        (any_fn)dlpg_work_wait,         (any_fn)dlpg_work_test,
    (any_fn)dlpg_work_error,       (any_fn)dlpg_work_free,         (any_fn)dlpg_get_api,
    (any_fn)dlpg_group_flight_record, (any_fn)dlpg_reduce_supported,
    (any_fn)dlpg_recv_any,         (any_fn)dlpg_work_source,
};

int main(void) {
  size_t i;
  const dlpg_api_t *api;
  int version = 0;
  dlpg_group_options_t defaults = DLPG_GROUP_OPTIONS_INIT;
  dlpg_get_api_fn get = dlpg_get_api;

  for (i = 0; i < sizeof all_functions / sizeof all_functions[0]; i++)
    if (!all_functions[i]) {
      fprintf(stderr, "FAIL function %lu has a NULL address\n", (unsigned long)i);
      failures++;
    }

  /* Enum values are part of the ABI. */
  CHECK_EQ("DLPG_OK", DLPG_OK, 0);
  CHECK_EQ("DLPG_ERR_INVALID_ARGUMENT", DLPG_ERR_INVALID_ARGUMENT, 1);
  CHECK_EQ("DLPG_ERR_UNSUPPORTED", DLPG_ERR_UNSUPPORTED, 2);
  CHECK_EQ("DLPG_ERR_TIMEOUT", DLPG_ERR_TIMEOUT, 3);
  CHECK_EQ("DLPG_ERR_REMOTE", DLPG_ERR_REMOTE, 4);
  CHECK_EQ("DLPG_ERR_ABORTED", DLPG_ERR_ABORTED, 5);
  CHECK_EQ("DLPG_ERR_SYSTEM", DLPG_ERR_SYSTEM, 6);
  CHECK_EQ("DLPG_ERR_INTERNAL", DLPG_ERR_INTERNAL, 7);
  CHECK_EQ("DLPG_SUM", DLPG_SUM, 0);
  CHECK_EQ("DLPG_PROD", DLPG_PROD, 1);
  CHECK_EQ("DLPG_MIN", DLPG_MIN, 2);
  CHECK_EQ("DLPG_MAX", DLPG_MAX, 3);
  CHECK_EQ("DLPG_AVG", DLPG_AVG, 4);
  CHECK_EQ("DLPG_BAND", DLPG_BAND, 5);
  CHECK_EQ("DLPG_BOR", DLPG_BOR, 6);
  CHECK_EQ("DLPG_BXOR", DLPG_BXOR, 7);
  CHECK_EQ("DLPG_DL_BOOL", DLPG_DL_BOOL, 6);
  CHECK_EQ("DLPG_DL_FLOAT8_E4M3FN", DLPG_DL_FLOAT8_E4M3FN, 10);
  CHECK_EQ("DLPG_DL_FLOAT8_E5M2", DLPG_DL_FLOAT8_E5M2, 12);
  CHECK_EQ("DLPG_VERSION_CODE", DLPG_VERSION_CODE,
           DLPG_VERSION_MAJOR * 10000 + DLPG_VERSION_MINOR * 100 + DLPG_VERSION_PATCH);
  CHECK_EQ("DLPG_ABI_MAJOR", DLPG_ABI_MAJOR, DLPG_VERSION_MAJOR);
  CHECK_EQ("DLPG_STORE_MAX_KEY_LEN", DLPG_STORE_MAX_KEY_LEN, 4096);
  CHECK_EQ("DLPG_STORE_MAX_VALUE_LEN", DLPG_STORE_MAX_VALUE_LEN, 64ul << 20);

  /* dlpg_group_options_t (x86-64). */
  CHECK_EQ("sizeof(dlpg_group_options_t)", sizeof(dlpg_group_options_t), 56);
  OFF(dlpg_group_options_t, struct_size, 0);
  OFF(dlpg_group_options_t, timeout_s, 8);
  OFF(dlpg_group_options_t, name, 16);
  /* Appended in 0.1: the NCCL communicator settings. */
  OFF(dlpg_group_options_t, nccl_cga_cluster_size, 24);
  OFF(dlpg_group_options_t, nccl_min_ctas, 28);
  OFF(dlpg_group_options_t, nccl_max_ctas, 32);
  OFF(dlpg_group_options_t, nccl_traffic_class, 36);
  OFF(dlpg_group_options_t, nccl_net_name, 40);
  OFF(dlpg_group_options_t, nccl_comm_name, 48);
  CHECK_EQ("DLPG_GROUP_OPTIONS_INIT.struct_size", defaults.struct_size, sizeof(dlpg_group_options_t));
  CHECK_EQ("DLPG_GROUP_OPTIONS_INIT.timeout_s == 0", defaults.timeout_s == 0.0, 1);
  CHECK_EQ("DLPG_GROUP_OPTIONS_INIT.name == NULL", defaults.name == NULL, 1);
  CHECK_EQ("DLPG_GROUP_OPTIONS_INIT.nccl_cga_cluster_size", defaults.nccl_cga_cluster_size,
           DLPG_NCCL_DEFAULT);
  CHECK_EQ("DLPG_GROUP_OPTIONS_INIT.nccl_min_ctas", defaults.nccl_min_ctas, DLPG_NCCL_DEFAULT);
  CHECK_EQ("DLPG_GROUP_OPTIONS_INIT.nccl_max_ctas", defaults.nccl_max_ctas, DLPG_NCCL_DEFAULT);
  CHECK_EQ("DLPG_GROUP_OPTIONS_INIT.nccl_traffic_class", defaults.nccl_traffic_class,
           DLPG_NCCL_DEFAULT);
  CHECK_EQ("DLPG_GROUP_OPTIONS_INIT.nccl_net_name == NULL", defaults.nccl_net_name == NULL, 1);
  CHECK_EQ("DLPG_GROUP_OPTIONS_INIT.nccl_comm_name == NULL", defaults.nccl_comm_name == NULL, 1);

  /* dlpg_store_ops_t. */
  CHECK_EQ("sizeof(dlpg_store_ops_t)", sizeof(dlpg_store_ops_t), 72);
  OFF(dlpg_store_ops_t, struct_size, 0);
  OFF(dlpg_store_ops_t, set, 8);
  OFF(dlpg_store_ops_t, get, 16);
  OFF(dlpg_store_ops_t, add, 24);
  OFF(dlpg_store_ops_t, wait, 32);
  OFF(dlpg_store_ops_t, release, 40);
  OFF(dlpg_store_ops_t, check, 48);
  OFF(dlpg_store_ops_t, delete_key, 56);
  OFF(dlpg_store_ops_t, host, 64);

  /* dlpg_api_t: only ever grows at its end. */
  CHECK_EQ("sizeof(dlpg_api_t)", sizeof(dlpg_api_t), 408);
  OFF(dlpg_api_t, struct_size, 0);
  OFF(dlpg_api_t, abi_major, 8);
  OFF(dlpg_api_t, version_code, 12);
  OFF(dlpg_api_t, status_name, 16);
  OFF(dlpg_api_t, last_error, 24);
  OFF(dlpg_api_t, get_version, 32);
  OFF(dlpg_api_t, get_build_info, 40);
  OFF(dlpg_api_t, store_open, 48);
  OFF(dlpg_api_t, store_port, 56);
  OFF(dlpg_api_t, store_from_ops, 64);
  OFF(dlpg_api_t, store_set, 72);
  OFF(dlpg_api_t, store_get, 80);
  OFF(dlpg_api_t, store_add, 88);
  OFF(dlpg_api_t, store_wait, 96);
  OFF(dlpg_api_t, store_check, 104);
  OFF(dlpg_api_t, store_delete_key, 112);
  OFF(dlpg_api_t, store_close, 120);
  OFF(dlpg_api_t, group_create, 128);
  OFF(dlpg_api_t, group_create_from_env, 136);
  OFF(dlpg_api_t, group_rank, 144);
  OFF(dlpg_api_t, group_size, 152);
  OFF(dlpg_api_t, group_abort, 160);
  OFF(dlpg_api_t, group_destroy, 168);
  OFF(dlpg_api_t, allreduce, 176);
  OFF(dlpg_api_t, broadcast, 184);
  OFF(dlpg_api_t, reduce, 192);
  OFF(dlpg_api_t, allgather, 200);
  OFF(dlpg_api_t, reduce_scatter, 208);
  OFF(dlpg_api_t, alltoall, 216);
  OFF(dlpg_api_t, send, 224);
  OFF(dlpg_api_t, recv, 232);
  OFF(dlpg_api_t, barrier, 240);
  OFF(dlpg_api_t, group_start, 248);
  OFF(dlpg_api_t, group_end, 256);
  OFF(dlpg_api_t, work_wait, 264);
  OFF(dlpg_api_t, work_test, 272);
  OFF(dlpg_api_t, work_error, 280);
  OFF(dlpg_api_t, work_free, 288);
  OFF(dlpg_api_t, group_flight_record, 296); /* appended after work_free */
  OFF(dlpg_api_t, reduce_supported, 304);    /* appended after group_flight_record */
  OFF(dlpg_api_t, recv_any, 312);            /* receive from any source, after it */
  OFF(dlpg_api_t, work_source, 320);
  OFF(dlpg_api_t, allreduce_ex, 328);        /* reduce descriptors, after it */
  OFF(dlpg_api_t, reduce_ex, 336);
  OFF(dlpg_api_t, reduce_scatter_ex, 344);
  OFF(dlpg_api_t, group_split, 352);         /* subgroups, then rooted and uneven collectives */
  OFF(dlpg_api_t, gather, 360);
  OFF(dlpg_api_t, scatter, 368);
  OFF(dlpg_api_t, allgatherv, 376);
  OFF(dlpg_api_t, alltoallv, 384);
  OFF(dlpg_api_t, reduce_scatter_v, 392);
  OFF(dlpg_api_t, group_create_subset, 400); /* members-only subgroups, after it */

  /* dlpg_reduce_desc_t: only ever grows at its end. */
  CHECK_EQ("sizeof(dlpg_reduce_desc_t)", sizeof(dlpg_reduce_desc_t), 24);
  OFF(dlpg_reduce_desc_t, struct_size, 0);
  OFF(dlpg_reduce_desc_t, op, 8);
  OFF(dlpg_reduce_desc_t, scalar, 16);
  CHECK_EQ("DLPG_PREMUL_SUM", DLPG_PREMUL_SUM, 8);
  CHECK_EQ("DLPG_ANY_SOURCE", DLPG_ANY_SOURCE, -1);

  /* The linked library agrees with the header. */
  if (dlpg_get_version(&version) != DLPG_OK) {
    fprintf(stderr, "FAIL dlpg_get_version: %s\n", dlpg_last_error());
    failures++;
  }
  CHECK_EQ("dlpg_get_version", version, DLPG_VERSION_CODE);
  api = get(DLPG_ABI_MAJOR);
  if (!api) {
    fprintf(stderr, "FAIL dlpg_get_api(DLPG_ABI_MAJOR) returned NULL\n");
    failures++;
  } else {
    CHECK_EQ("api->struct_size >= sizeof(dlpg_api_t)", api->struct_size >= sizeof(dlpg_api_t), 1);
    CHECK_EQ("api->abi_major", api->abi_major, DLPG_ABI_MAJOR);
    CHECK_EQ("api->version_code", api->version_code, DLPG_VERSION_CODE);
    CHECK_EQ("api->work_free != NULL", api->work_free != NULL, 1);
    CHECK_EQ("api->group_flight_record == dlpg_group_flight_record",
             api->group_flight_record == dlpg_group_flight_record, 1);
    CHECK_EQ("api->reduce_supported == dlpg_reduce_supported",
             api->reduce_supported == dlpg_reduce_supported, 1);
    CHECK_EQ("api->work_source == dlpg_work_source", api->work_source == dlpg_work_source, 1);
    if (api->status_name && strcmp(api->status_name(DLPG_ERR_TIMEOUT), "DLPG_ERR_TIMEOUT") != 0) {
      fprintf(stderr, "FAIL api->status_name(DLPG_ERR_TIMEOUT) = %s\n",
              api->status_name(DLPG_ERR_TIMEOUT));
      failures++;
    }
  }
  CHECK_EQ("dlpg_get_api(999) == NULL", get(999) == NULL, 1);

  if (failures) {
    fprintf(stderr, "test_abi_c: %d check(s) failed\n", failures);
    return 1;
  }
  printf("test_abi_c: all checks passed\n");
  return 0;
}
