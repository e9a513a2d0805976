/* The per-group CPU executor's state (private to the worker: worker_queue.c, worker.c).
 * The queue and how its tasks end are worker_queue.c's, below the abort that empties it;
 * the thread that runs the tasks is worker.c's, above the failure handling it calls. */
#ifndef DLPG_CORE_WORKER_IMPL_H_
#define DLPG_CORE_WORKER_IMPL_H_

#include <pthread.h>

#include "core/backend_abi.h"
#include "core/group.h"
#include "core/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlpg__task {
  dlpg__op_t **ops;
  int n;
  struct dlpg__task *next;
} dlpg__task_t;

typedef struct dlpg__worker {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC: new task, stop, thread exit */
  dlpg__task_t *head, *tail;
  int stop, aborted, running, exited, detached;
  pthread_t thread;
  struct dlpg_group *g; /* retained by the thread for its whole life */
  int running_slot;     /* backend of the running task (under mu, with running) */
  /* Per backend slot: whether the thread tried to create the group's state, and why that
   * failed (once it failed, every later task fails with it). */
  int ctx_tried[DLPG__GROUP_BACKEND_SLOTS];
  dlpg_status_t ctx_status[DLPG__GROUP_BACKEND_SLOTS];
  char *ctx_msg[DLPG__GROUP_BACKEND_SLOTS];
  /* Per first line of a device: why the group's choice of backend failed (OK: it did
   * not), so every later task fails with it. */
  dlpg_status_t choice_status[DLPG__GROUP_BACKEND_SLOTS];
  char *choice_msg[DLPG__GROUP_BACKEND_SLOTS];
  /* Per first line of a device: the slot the group's choice resolved it to, plus one (0:
   * no operation ran yet). Written by the thread that holds running. */
  int chosen[DLPG__GROUP_BACKEND_SLOTS];
  /* The eager path (worker.c): the op a caller's thread started (backend_abi.h start) and
   * nobody finished yet, and its table. Set and cleared under mu by the thread that holds
   * running, or taken by the abort while nobody does. */
  dlpg__op_t *started;
  const dlpg__backend_vtbl_t *started_be;
  unsigned long started_seq; /* ops started so far: the thread tells a new one from an old */
  int idle_untimed;          /* the thread sleeps until woken: a start must wake it */
  int linger;                /* periods the idle thread still looks after the last start */
} dlpg__worker_t;

/* Guards g->worker of every group (creation at the first task, removal at shutdown), and
 * keeps a worker alive while dlpg__worker_abort uses it. Held only briefly. */
extern pthread_mutex_t dlpg__workers_mu;

/* Complete every op with status (message: "<op>: <msg>") and free the ops and the array. */
void dlpg__ops_finish(dlpg__op_t **ops, int n, dlpg_status_t st, const char *msg);
/* One op of that kind (not in an array): complete its work, free it. */
void dlpg__op_finish(dlpg__op_t *op, dlpg_status_t st, const char *msg);
/* The same for a task's ops, and free the task. */
void dlpg__task_finish(dlpg__task_t *t, dlpg_status_t st, const char *msg);
/* Finish a task with DLPG_ERR_ABORTED ("group aborted"). */
void dlpg__task_abort(dlpg__task_t *t);

#ifdef __cplusplus
}
#endif
#endif
