/* The per-group CPU executor's queue (worker_impl.h): how queued tasks end when they cannot
 * run, what an op's outcome is, and the abort that empties the queue and cuts the running
 * task short. It calls only work completion, the group's observer and the backend's abort,
 * so the group's abort (abort.c) reaches it without reaching the files that run tasks. */
#include <stdio.h>
#include <stdlib.h>

#include "core/lines/backend.h"
#include "base/status.h"
#include "core/group/observer.h"
#include "core/group/work.h"
#include "core/group/work_impl.h"
#include "core/exec/worker.h"
#include "core/exec/worker_impl.h"

void dlpg__op_finish(dlpg__op_t *op, dlpg_status_t st, const char *msg) {
  if (!op) return;
  /* The outcome went to the observer in dlpg__worker_outcome (an abort's needs none). */
  if (st == DLPG_OK) {
    dlpg__work_complete_observed(op->work, DLPG_OK, NULL);
  } else {
    char m[DLPG__ERROR_MAX];
    dlpg__format_prefixed(m, sizeof m, dlpg__op_name(op->kind), msg, st);
    dlpg__work_complete_observed(op->work, st, m);
  }
  free(op);
}

void dlpg__ops_finish(dlpg__op_t *const *ops, int n, dlpg_status_t st, const char *msg) {
  for (int i = 0; i < n; i++) dlpg__op_finish(ops[i], st, msg);
}

void dlpg__task_finish(dlpg__task_t *t, dlpg_status_t st, const char *msg) {
  dlpg__ops_finish(t->ops, t->n, st, msg);
  free(t);
}

void dlpg__task_abort(dlpg__task_t *t) { dlpg__task_finish(t, DLPG_ERR_ABORTED, "group aborted"); }

dlpg_status_t dlpg__worker_outcome(struct dlpg_group *g, uint64_t flight_id, dlpg_status_t st,
                                   char *m, size_t cap) {
  if (st != DLPG_OK && atomic_load(&g->aborted)) {
    snprintf(m, cap, "group aborted (%s)", dlpg__last_error());
    return DLPG_ERR_ABORTED;
  }
  m[0] = '\0';
  if (st == DLPG_OK) return st; /* no formatting on the fast path */
  snprintf(m, cap, "%s", dlpg__last_error());
  return dlpg__observe_failed(g, flight_id, st, m, cap);
}

void dlpg__worker_abort(struct dlpg_group *g) {
  /* The group's lock keeps the worker alive while it is used here (shutdown removes it
   * under the same lock). */
  pthread_mutex_lock(&g->worker_mu);
  dlpg__worker_t *w = g->worker;
  if (!w) {
    pthread_mutex_unlock(&g->worker_mu);
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
  pthread_mutex_unlock(&g->worker_mu);
  dlpg__op_finish(started, DLPG_ERR_ABORTED, "group aborted");
  while (queued) {
    dlpg__task_t *next = queued->next;
    dlpg__task_abort(queued);
    queued = next;
  }
}
