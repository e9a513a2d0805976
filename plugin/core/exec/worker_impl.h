/* The per-group CPU executor's state (private to the executor). Three files share it, each
 * one way of running the group's operations: worker.c the thread, its queue and the inline
 * run of a task whose caller waits; worker_eager.c an op started on its caller's thread and
 * finished by whichever thread gets there first; worker_run.c one task run to its end. How
 * tasks end and the abort that empties the queue are worker_queue.c's, below them all. */
#ifndef DLPG_CORE_WORKER_IMPL_H_
#define DLPG_CORE_WORKER_IMPL_H_

#include <pthread.h>

#include "core/group/backend_abi.h"
#include "core/group/group.h"
#include "core/group/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlpg__task {
  struct dlpg__task *next;
  int n;
  dlpg__op_t *ops[]; /* n ops, run by one call of their backend's issue */
} dlpg__task_t;

typedef struct dlpg__worker {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC: new task, stop, thread exit */
  dlpg__task_t *head, *tail;
  int stop, aborted, running, exited, detached;
  pthread_t thread;
  struct dlpg_group *g; /* retained by the thread for its whole life */
  int running_slot;     /* backend of the running task (under mu, with running) */
  /* Per first line of a device: the slot the group's choice resolved it to, plus one (0:
   * no operation ran yet). Written by the thread that holds running. */
  int chosen[DLPG__GROUP_BACKEND_SLOTS];
  /* The eager path (worker_eager.c): the op a caller's thread started (backend_abi.h start)
   * and nobody finished yet, and its table. Set and cleared under mu by the thread that
   * holds running, or taken by the abort while nobody does. */
  dlpg__op_t *started;
  const dlpg__backend_vtbl_t *started_be;
  unsigned long started_seq; /* ops started so far: the thread tells a new one from an old */
  int idle_untimed;          /* the thread sleeps until woken: a start must wake it */
  int linger;                /* periods the idle thread still looks after the last start */
} dlpg__worker_t;

/* g's worker once started (it stays until dlpg__worker_shutdown, at destroy), else NULL:
 * one atomic load, no lock. */
static inline dlpg__worker_t *dlpg__worker_of(struct dlpg_group *g) {
  return __atomic_load_n(&g->worker, __ATOMIC_ACQUIRE);
}

/* --- worker_queue.c */
/* Complete op's work with status (message: "<op>: <msg>") and free the op. */
void dlpg__op_finish(dlpg__op_t *op, dlpg_status_t st, const char *msg);
/* The same for each of ops[0..n) (the array stays the caller's). */
void dlpg__ops_finish(dlpg__op_t *const *ops, int n, dlpg_status_t st, const char *msg);
/* The same for a task's ops, and free the task. */
void dlpg__task_finish(dlpg__task_t *t, dlpg_status_t st, const char *msg);
/* Finish a task with DLPG_ERR_ABORTED ("group aborted"). */
void dlpg__task_abort(dlpg__task_t *t);
/* An op's outcome as its work reports it (no lock held): a run an abort cut short reports
 * the abort, whatever the backend said; a failure goes to the group's observer, which may
 * turn it into a peer's (observer.h). st is the backend's status, its message the last
 * error; the message to report is written into m. */
dlpg_status_t dlpg__worker_outcome(struct dlpg_group *g, uint64_t flight_id, dlpg_status_t st,
                                   char *m, size_t cap);

/* --- worker_eager.c */
/* The eager path for op (alone, with a work handle): 1 when its backend started it on this
 * thread (core keeps it as w->started and finishes it later), 0: queue or run it. */
int dlpg__worker_try_start(struct dlpg_group *g, dlpg__worker_t *w, dlpg__op_t *op);
/* Finish the started op, if any (the caller holds running and not w->mu). */
void dlpg__worker_finish_started(dlpg__worker_t *w);

/* --- worker_run.c */
/* Run one task to its end (the caller holds running and not w->mu): the group's line
 * resolved to its state, the backend's issue, every op's work completed. */
void dlpg__worker_run(dlpg__worker_t *w, dlpg__op_t *const *ops, int n);

#ifdef __cplusplus
}
#endif
#endif
