/* The executor's door (ops_dispatch.c): how a validated operation is issued, and what the
 * executor says of a call validation refused or of an aborted group. */
#ifndef DLPG_CORE_DISPATCH_H_
#define DLPG_CORE_DISPATCH_H_

#include "dlpg/dlpg.h"
#include "core/group/op.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dlpg_group;

/* How deep the calling thread is in dlpg_group_start/end batches (0: outside any). Read by
 * validation: a send or receive to this rank itself is matched only inside a batch. */
int dlpg__batch_depth(void);

/* Issue a heap-allocated op built by dlpg__op_build (takes ownership). work == NULL: a CPU
 * operation is waited for (the group's timeout) and its status returned; a CUDA one
 * returns once enqueued. Inside dlpg_group_start/end the op is only queued on the thread's
 * batch. */
dlpg_status_t dlpg__op_issue(dlpg__op_t *op, dlpg_work_t **work);

/* The error of an operation fn on the aborted group g: DLPG_ERR_REMOTE naming the rank
 * whose failure aborted it, else DLPG_ERR_ABORTED. */
dlpg_status_t dlpg__op_aborted(const char *fn, struct dlpg_group *g);

/* Validation refused a call of kind (peer: a send's or receive's) with st, its message the
 * last error: a refusal only this rank makes leaves its peers blocked in the operation, so
 * the group's observer is told. Returns st with the message kept. */
dlpg_status_t dlpg__op_refused(struct dlpg_group *g, dlpg__op_kind_t kind, int peer,
                               dlpg_status_t st);

#ifdef __cplusplus
}
#endif
#endif
