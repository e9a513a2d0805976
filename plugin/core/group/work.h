/* Work: the completion record of one operation, shared by the caller's handle and the
 * executor (reference counted). CPU work is completed by the group's worker thread; CUDA
 * work carries a backend poll function (CUDA event + NCCL async error) instead. */
#ifndef DLPG_CORE_WORK_H_
#define DLPG_CORE_WORK_H_

#include "dlpg/dlpg.h"
#include "core/group/backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dlpg__work_backend_t, the poller a caller-thread backend attaches, is part of the
 * backend ABI (core/group/backend_abi.h). */

/* New pending work of group g (g's internals are retained). Two references: the caller's
 * handle and the executor's. */
dlpg_status_t dlpg__work_new(struct dlpg_group *g, struct dlpg_work **out);
/* Executor side: finish with status and message (msg may be NULL or "" on success), wake
 * waiters, and drop the executor's reference. A failure is the group's: it is told to the
 * group's observer first (its record for the peers, the abort), which may rewrite it (a
 * peer's earlier failure becomes DLPG_ERR_REMOTE naming it) and may wait on the store,
 * bounded; so call it without holding a lock the backend's abort takes. */
void dlpg__work_complete(struct dlpg_work *w, dlpg_status_t status, const char *msg);
/* A receive from any source: the sender that matched, set before dlpg__work_complete. */
void dlpg__work_set_source(struct dlpg_work *w, int rank);
/* Attach a CUDA-side poller; the executor's reference passes to it (no complete needed). */
void dlpg__work_set_backend(struct dlpg_work *w, const dlpg__work_backend_t *be, void *data);
/* Drop one reference. */
void dlpg__work_unref(struct dlpg_work *w);

#ifdef __cplusplus
}
#endif
#endif
