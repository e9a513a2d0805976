/* The rule route.c applies to the published strings (a pure function: no CUDA, no store), so
 * unit tests drive it with made-up hosts and GPUs. A string is
 * "host=<name>,boot=<id>,pidns=<ns>|gpu=<uuid>|dev=<ordinal>": two ranks are on one host when
 * their first fields are equal, on one GPU when their gpu fields (the UUID) are. */
#ifndef DLPG_NCCL_ROUTE_RULE_H_
#define DLPG_NCCL_ROUTE_RULE_H_

#include <stddef.h>
#include "dlpg/dlpg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where a group's (or a pair's) CUDA operations go. */
#define DLPG__ROUTE_UNDECIDED 0
#define DLPG__ROUTE_NCCL 1
#define DLPG__ROUTE_IPC 2

/* forced: DLPG_CUDA_BACKEND (settings.h's dlpg__cuda_path_t: 0 auto, 1 nccl, 2 ipc). w[i]:
 * the string of ranks[i], i < nr; max_ipc: most ranks the IPC path serves. *route gets
 * DLPG__ROUTE_NCCL or _IPC and why the reason; or an error naming fn, the group, the ranks
 * and the GPU: DLPG_ERR_UNSUPPORTED when ranks share a GPU across hosts or are too many for
 * the IPC path, DLPG_ERR_INVALID_ARGUMENT when ipc is forced on ranks of several hosts. */
dlpg_status_t dlpg__route_rule(const char *fn, const char *group, int forced, const int *ranks,
                               int nr, const char *const *w, int max_ipc, int *route, char *why,
                               size_t cap);

#ifdef __cplusplus
}
#endif
#endif
