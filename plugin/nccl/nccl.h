/* The NCCL path: the module libdlpg_nccl.so, built when CUDA and NCCL are found and loaded
 * by core at the first CUDA tensor (core/lines/backend.h). backend.c puts these in its table. */
#ifndef DLPG_NCCL_NCCL_H_
#define DLPG_NCCL_NCCL_H_

#include "dlpg/dlpg.h"
#include "core/group/backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlpg__nccl dlpg__nccl_t; /* per-group state: communicator cache */

/* Cheap: no communicator is created here. */
dlpg_status_t dlpg__nccl_create(const dlpg__be_group_t *g, dlpg__nccl_t **out);

/* Enqueue ops[0..n) (all backend NCCL) on their streams; n > 1 is one NCCL group
 * (dlpg_group_start/end). The ops may belong to different groups: the batch of
 * dlpg_group_start/end is per thread and spans every group that thread issues to (like
 * ncclGroupStart), so one thread can drive several ranks, e.g. a send on one rank's group and
 * the matching recv on another's; communicators of all of them are created together first.
 * Core has set op->state to the group's dlpg__nccl_t (dlpg__nccl_create) for every op
 * before the call. Creates the communicator of each device list lazily (store
 * rendezvous, non-blocking init polled against the group's deadline). Attaches to each
 * op->work a poller (CUDA event + ncclCommGetAsyncError) through the host.
 * Returns once enqueued; never synchronises the host on the fast path.
 * CUDA graphs: when a stream of an op is being captured (cudaStreamIsCapturing), no event is
 * recorded and op->work completes with DLPG_OK as soon as the op is captured ("enqueued"):
 * completion of each replay is ordered by the caller's stream, as for any captured kernel.
 * The communicator must already exist (run the op once outside capture first), because
 * creating one is a host-side rendezvous that cannot be captured. */
dlpg_status_t dlpg__nccl_issue(dlpg__be_op_t *const *ops, int n);

/* Abort every communicator (any thread). */
void dlpg__nccl_abort(dlpg__nccl_t *st);
void dlpg__nccl_destroy(dlpg__nccl_t *st);

/* "nccl 2.28.9; cuda 13.0" of the build. */
const char *dlpg__nccl_build_info(void);

#ifdef __cplusplus
}
#endif
#endif
