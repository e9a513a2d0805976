/* The mechanics of a group's abort (private to core), below everything that aborts: the
 * failure records and the group's full abort (failure.c, dlpg__group_abort), the watcher
 * thread, work waits, the worker. */
#ifndef DLPG_CORE_ABORT_H_
#define DLPG_CORE_ABORT_H_

#ifdef __cplusplus
extern "C" {
#endif

struct dlpg_group;

/* Set the group's abort flag. 1 the first time (logged at WARN when log), 0 when it was
 * aborted already. */
int dlpg__group_set_aborted(struct dlpg_group *g, int log);

/* Cut the group's operations short: queued CPU work completes now with DLPG_ERR_ABORTED,
 * and the worker's running operation and the caller-thread backends' state (NCCL
 * communicators) are aborted. Repeating it is harmless, and catches work that raced past
 * the flag. */
void dlpg__group_cut(struct dlpg_group *g);

#ifdef __cplusplus
}
#endif
#endif
