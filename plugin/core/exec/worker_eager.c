/* The executor's eager path (worker_impl.h): a lone CPU op whose backend can start it
 * without blocking (backend_abi.h start/progress) is started on its caller's thread when
 * nothing of the group is queued or running, and finished by whichever thread gets there
 * first: its waiter (dlpg_work_wait/test drive it), the group's next operation, or the
 * worker thread a period later. A small operation then costs no thread hand-off at all. */
#include <stdio.h>

#include "core/lines/backend.h"
#include "base/log.h"
#include "base/status.h"
#include "core/group/observer.h"
#include "core/group/work_impl.h"
#include "core/exec/worker_impl.h"

/* The eager path: how many periods the idle thread keeps looking after a start (worker.c
 * sleeps one period at a time meanwhile). */
#define DLPG__WORKER_LINGER 64
/* How long one progress call of a thread that must finish a started op waits. */
#define DLPG__WORKER_FINISH_SLICE_S 0.1

void dlpg__worker_finish_started(dlpg__worker_t *w) {
  /* No lock to read: only the holder of running changes w->started while it holds it. */
  dlpg__op_t *op = w->started;
  const dlpg__backend_vtbl_t *be = w->started_be;
  if (!op) return;
  /* An abort meanwhile cuts this op's state short (the task's, if any, comes after). */
  pthread_mutex_lock(&w->mu);
  int slot = w->running_slot;
  w->running_slot = op->backend;
  pthread_mutex_unlock(&w->mu);
  int done = 0;
  dlpg_status_t st = DLPG_OK;
  while (!done) {
    dlpg__clear_error();
    st = be->progress(&op->be, DLPG__WORKER_FINISH_SLICE_S, &done);
  }
  pthread_mutex_lock(&w->mu);
  w->started = NULL;
  w->running_slot = slot;
  pthread_mutex_unlock(&w->mu);
  char m[DLPG__ERROR_MAX];
  st = dlpg__worker_outcome(w->g, op->work->flight_id, st, m, sizeof m);
  dlpg__op_finish(op, st, m);
}

/* A waiter's share (work_impl.h's drive): finish the started op of its work on the waiter's
 * thread, unless another thread is at it. */
static int dlpg__worker_drive(struct dlpg_work *wk, double wait_s) {
  struct dlpg_group *g = wk->group;
  if (!g) return 0;
  /* A work may be waited for after its group was destroyed: the group's worker lock keeps
   * the worker from being freed (shutdown) while this looks at it. */
  pthread_mutex_lock(&g->worker_mu);
  dlpg__worker_t *w = g->worker;
  if (!w) {
    pthread_mutex_unlock(&g->worker_mu);
    return 0;
  }
  pthread_mutex_lock(&w->mu);
  pthread_mutex_unlock(&g->worker_mu);
  dlpg__op_t *op = w->started;
  if (!op || op->work != wk || w->running) {
    pthread_mutex_unlock(&w->mu);
    return 0;
  }
  w->running = 1;
  w->running_slot = op->backend;
  const dlpg__backend_vtbl_t *be = w->started_be;
  pthread_mutex_unlock(&w->mu);
  int done = 0;
  dlpg__clear_error();
  dlpg_status_t st = be->progress(&op->be, wait_s, &done);
  char m[DLPG__ERROR_MAX];
  if (done) st = dlpg__worker_outcome(g, wk->flight_id, st, m, sizeof m);
  pthread_mutex_lock(&w->mu);
  w->running = 0;
  if (done) w->started = NULL;
  if (w->head || w->stop) pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  if (done) dlpg__op_finish(op, st, m);
  return 1;
}

/* When the group's choice is made, its state exists, its backend has start/progress and
 * nothing of the group is queued or running, the backend starts op on this thread (an op
 * started earlier is finished first, if that needs no waiting). */
int dlpg__worker_try_start(struct dlpg_group *g, dlpg__worker_t *w, dlpg__op_t *op) {
  pthread_mutex_lock(&w->mu);
  int first = op->backend, slot = first >= 0 && first < DLPG__GROUP_BACKEND_SLOTS
                                       ? w->chosen[first] - 1 : -1;
  const dlpg__backend_vtbl_t *be = slot >= 0 ? dlpg__backend_loaded(slot) : NULL;
  void *state = slot >= 0 ? __atomic_load_n(&g->be_state[slot], __ATOMIC_ACQUIRE) : NULL;
  if (!be || !state || !be->on_worker || !dlpg__vtbl_has(be, start) ||
      !dlpg__vtbl_has(be, progress) || w->head || w->running || w->stop || w->aborted ||
      atomic_load(&g->aborted)) {
    pthread_mutex_unlock(&w->mu);
    return 0;
  }
  w->running = 1;
  w->running_slot = slot;
  dlpg__op_t *prev = w->started;
  const dlpg__backend_vtbl_t *prev_be = w->started_be;
  pthread_mutex_unlock(&w->mu);
  if (prev) {
    int done = 0;
    dlpg__clear_error();
    dlpg_status_t st = prev_be->progress(&prev->be, 0, &done);
    if (done) {
      char m[DLPG__ERROR_MAX];
      st = dlpg__worker_outcome(g, prev->work->flight_id, st, m, sizeof m);
      pthread_mutex_lock(&w->mu);
      w->started = NULL;
      pthread_mutex_unlock(&w->mu);
      dlpg__op_finish(prev, st, m);
      prev = NULL;
    }
  }
  int taken = 0;
  if (!prev) {
    op->backend = slot;
    op->state = state;
    taken = be->start(&op->be);
    dlpg__clear_error(); /* a start that declined leaves the run to report */
    if (taken) {
      op->work->drive = dlpg__worker_drive;
      DLPG_TRACE(COLL, g->rank, "started %s on %s (caller's thread)", dlpg__op_name(op->kind),
                 be->name);
      dlpg__observe_started(g, op->work->flight_id, slot);
    } else {
      op->backend = first;
    }
  }
  pthread_mutex_lock(&w->mu);
  w->running = 0;
  if (taken) {
    /* An abort meanwhile found it running: the next finish reports the abort. */
    w->started = op;
    w->started_be = be;
    w->started_seq++;
    w->linger = DLPG__WORKER_LINGER;
    if (w->idle_untimed) pthread_cond_broadcast(&w->cv);
  } else if (w->head || w->stop) {
    pthread_cond_broadcast(&w->cv);
  }
  pthread_mutex_unlock(&w->mu);
  return taken;
}
