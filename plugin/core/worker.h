/* The per-group CPU executor (private to core): one thread that runs the group's Gloo
 * operations in submission order, creating the Gloo context lazily at its first task. */
#ifndef DLPG_CORE_WORKER_H_
#define DLPG_CORE_WORKER_H_

#include "core/op.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dlpg_group;

/* Queue one task: ops[0..n) (heap-allocated, all of group g, an on_worker backend), run together by
 * one call of the backend's issue. Takes ownership of the array and of every op in it: each op's work
 * is completed (even on failure here) and the ops are freed. Starts the worker thread at
 * the group's first task. Returns non-OK only when the task could not be queued (its works
 * are then already completed with that status). A lone op whose backend has the eager path
 * (backend_abi.h start/progress) may instead be started on the calling thread when nothing
 * of the group is queued or running; its work is then finished by whichever thread gets
 * there first: dlpg_work_wait/test, the group's next operation, or the worker thread a
 * moment later. */
dlpg_status_t dlpg__worker_submit(struct dlpg_group *g, dlpg__op_t **ops, int n);

/* The same, for a caller that will block until the task completes (work == NULL): when
 * the worker is idle and nothing is queued, the task runs on the calling thread (a lone op
 * of the eager path is started there, and the caller's wait finishes it). */
dlpg_status_t dlpg__worker_submit_sync(struct dlpg_group *g, dlpg__op_t **ops, int n);

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
