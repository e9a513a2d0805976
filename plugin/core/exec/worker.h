/* The per-group CPU executor (private to core): the group's operations of on_worker
 * backends (CPU) run one at a time in submission order, on one thread per group or on the
 * caller's thread when that costs less; the backend's state is made at the first task. */
#ifndef DLPG_CORE_WORKER_H_
#define DLPG_CORE_WORKER_H_

#include "core/group/op.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dlpg_group;

/* Hand the worker one task: ops[0..n) (heap-allocated, all of group g, an on_worker
 * backend), run together by one call of the backend's issue. Takes ownership of every op
 * (not of the array): each op's work is completed (even on failure here) and the ops are
 * freed. Starts the worker thread at the group's first task. sync: the caller blocks until
 * the task completes (work == NULL), so when nothing of the group is queued or running the
 * task runs on the calling thread. A lone op whose backend has the eager path (backend_abi.h
 * start/progress) may instead be started on the calling thread; its work is then finished
 * by whichever thread gets there first: dlpg_work_wait/test, the group's next operation, or
 * the worker thread a moment later. Returns non-OK only when the task could not be queued
 * (its works are then already completed with that status). */
dlpg_status_t dlpg__worker_submit(struct dlpg_group *g, dlpg__op_t *const *ops, int n,
                                  int sync);

/* Any thread: complete queued tasks with DLPG_ERR_ABORTED and abort the running one. */
void dlpg__worker_abort(struct dlpg_group *g);

/* At destroy, first: stop the worker after its queue drains, waiting up to the group's
 * timeout for the thread to exit. 1 when it exited (or there is none); 0 (logged) when
 * operations are still running or queued: the caller then aborts the group, so that the
 * thread stuck in the backend returns, and shuts the worker down. */
int dlpg__worker_drain(struct dlpg_group *g);

/* Then: give the thread a grace period to exit, join it and free the worker; a thread that
 * still does not return is detached (it holds a group reference and frees its state when it
 * finishes). */
void dlpg__worker_shutdown(struct dlpg_group *g);

#ifdef __cplusplus
}
#endif
#endif
