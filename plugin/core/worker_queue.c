/* The per-group CPU executor's queue (worker_impl.h): how queued tasks end when they cannot
 * run, and the abort that empties the queue and cuts the running task short. It calls only
 * work completion and the backend's abort, so the group's abort (abort.c) reaches it
 * without reaching the thread that runs tasks (worker.c), which calls the failure handling
 * that aborts. */
#include <stdlib.h>

#include "core/backend.h"
#include "base/status.h"
#include "core/work.h"
#include "core/worker.h"
#include "core/worker_impl.h"

pthread_mutex_t dlpg__workers_mu = PTHREAD_MUTEX_INITIALIZER;

void dlpg__op_finish(dlpg__op_t *op, dlpg_status_t st, const char *msg) {
  if (!op) return;
  if (st == DLPG_OK) {
    dlpg__work_complete(op->work, DLPG_OK, NULL);
  } else {
    char m[DLPG__ERROR_MAX];
    dlpg__format_prefixed(m, sizeof m, dlpg__op_name(op->kind), msg, st);
    dlpg__work_complete(op->work, st, m);
  }
  free(op);
}

/* Complete every op with status (message: "<op>: <msg>") and free the ops and the array. */
void dlpg__ops_finish(dlpg__op_t **ops, int n, dlpg_status_t st, const char *msg) {
  for (int i = 0; i < n; i++) dlpg__op_finish(ops[i], st, msg);
  free(ops);
}

void dlpg__task_finish(dlpg__task_t *t, dlpg_status_t st, const char *msg) {
  dlpg__ops_finish(t->ops, t->n, st, msg);
  free(t);
}

void dlpg__task_abort(dlpg__task_t *t) { dlpg__task_finish(t, DLPG_ERR_ABORTED, "group aborted"); }

void dlpg__worker_abort(struct dlpg_group *g) {
  pthread_mutex_lock(&dlpg__workers_mu);
  dlpg__worker_t *w = g->worker;
  if (!w) {
    pthread_mutex_unlock(&dlpg__workers_mu);
    return;
  }
  pthread_mutex_lock(&w->mu);
  w->aborted = 1;
  dlpg__task_t *queued = w->head;
  w->head = w->tail = NULL;
  int slot = w->running_slot;
  void *ctx = w->running ? __atomic_load_n(&g->be_state[slot], __ATOMIC_ACQUIRE) : NULL;
  /* A started op nobody is finishing ends here; one being finished ends with the running
   * thread's abort below. */
  dlpg__op_t *started = w->running ? NULL : w->started;
  const dlpg__backend_vtbl_t *started_be = w->started_be;
  if (started) w->started = NULL;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  /* The context stays alive while w is registered: it is freed with the group, and the
   * running thread holds a group reference. */
  if (ctx) dlpg__backend_loaded(slot)->abort(ctx);
  /* Its peers learn that this rank will not finish it. */
  if (started && started->state) started_be->abort(started->state);
  pthread_mutex_unlock(&dlpg__workers_mu);
  dlpg__op_finish(started, DLPG_ERR_ABORTED, "group aborted");
  while (queued) {
    dlpg__task_t *next = queued->next;
    dlpg__task_abort(queued);
    queued = next;
  }
}
