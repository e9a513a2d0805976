/* The per-group CPU executor (worker.h). One thread per group runs tasks in FIFO order, so
 * operations issued from several threads execute in submission order, which every rank
 * must agree on. The thread asks for its backends' state at its first task (created under
 * the group's lock: a p2p_direct backend's sends and receives, which bypass the worker, may
 * create it first); the state itself is freed with the group, after the thread is gone.
 * The queue's abort and how queued tasks end are worker_queue.c's, below the group's abort. */
#include "core/worker.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/backend.h"
#include "core/failure.h"
#include "core/flight.h"
#include "core/group.h"
#include "core/job.h"
#include "base/log.h"
#include "base/status.h"
#include "core/thread.h"
#include "core/work_impl.h"
#include "core/worker_impl.h"

/* After an abort at shutdown, how long the thread gets to leave the backend before it is
 * detached. */
#define DLPG__WORKER_GRACE_S 2.0

/* Run one task on the worker thread (w->mu not held). */
static void dlpg__worker_run(dlpg__worker_t *w, dlpg__task_t *t) {
  struct dlpg_group *g = w->g;
  if (atomic_load(&g->aborted) || w->aborted) {
    dlpg__task_abort(t);
    return;
  }
  /* The ops carry their device's first line; the group's choice (made here at its first
   * operation, the same on every rank) says which line runs them. */
  int first = t->ops[0]->backend, slot = first;
  if (w->choice_status[first] == DLPG_OK) {
    dlpg__clear_error();
    /* The choice reads, and the backend's state writes, keys under the group's job scope:
     * join the job first (once; a failure is final, job.h). */
    dlpg_status_t st = dlpg__job_join(g);
    if (st == DLPG_OK) st = dlpg__backend_choose(g, first, &slot);
    if (st != DLPG_OK) {
      /* Every later operation of the group fails with the same reason. */
      w->choice_status[first] = st;
      w->choice_msg[first] = strdup(dlpg__last_error());
    }
  }
  if (w->choice_status[first] != DLPG_OK) {
    dlpg__task_finish(t, w->choice_status[first], w->choice_msg[first] ? w->choice_msg[first]
                                                                       : "no backend was chosen");
    return;
  }
  void *state = NULL;
  const dlpg__backend_vtbl_t *be = NULL;
  for (;;) {
    be = dlpg__backend_loaded(slot);
    if (!be) {
      dlpg__task_finish(t, DLPG_ERR_INTERNAL, "the operation's backend is not loaded");
      return;
    }
    if (!w->ctx_tried[slot]) {
      w->ctx_tried[slot] = 1;
      dlpg__clear_error();
      /* Under the group's lock: a p2p_direct backend's caller threads may create it too. */
      dlpg_status_t st = dlpg__backend_state(g, slot, &state);
      pthread_mutex_lock(&w->mu);
      if (st != DLPG_OK || !state) {
        w->ctx_status[slot] = st == DLPG_OK ? DLPG_ERR_INTERNAL : st;
        w->ctx_msg[slot] = strdup(dlpg__last_error()[0] ? dlpg__last_error()
                                                         : "the backend's state could not be created");
      }
      pthread_mutex_unlock(&w->mu);
    }
    state = g->be_state[slot];
    if (state) break;
    /* A creation an abort cut short reports the abort. */
    if (atomic_load(&g->aborted) || w->aborted) {
      dlpg__task_abort(t);
      return;
    }
    /* A backend that found the ranks apart after all (every rank sees that alike) gives
     * way to the next line, when the choice was the rule's and not forced. */
    int next = w->ctx_status[slot] == DLPG_ERR_UNSUPPORTED
                   ? dlpg__backend_give_way(g, first, slot, w->ctx_msg[slot]) : -1;
    if (next < 0) {
      dlpg__task_finish(t, w->ctx_status[slot], w->ctx_msg[slot]);
      return;
    }
    slot = next;
  }
  if (slot != first) {
    pthread_mutex_lock(&w->mu);
    w->running_slot = slot; /* what an abort must cut short */
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < t->n; i++) t->ops[i]->backend = slot;
  }
  /* An abort during the rendezvous found no state to cut short: honour it here. */
  if (atomic_load(&g->aborted) || w->aborted) {
    dlpg__task_abort(t);
    return;
  }
  DLPG_TRACE(COLL, g->rank, "running %s (%d op%s) on %s", dlpg__op_name(t->ops[0]->kind), t->n,
             t->n == 1 ? "" : "s", be->name);
  for (int i = 0; i < t->n; i++) {
    t->ops[i]->state = state;
    dlpg__flight_start_on(g, t->ops[i]->work->flight_id, slot);
  }
  dlpg__clear_error();
  dlpg_status_t st = be->issue(dlpg__op_views(t->ops), t->n);
  if (st != DLPG_OK && atomic_load(&g->aborted)) {
    /* A run cut short by an abort reports the abort, whatever the backend said. */
    char m[DLPG__ERROR_MAX];
    snprintf(m, sizeof m, "group aborted (%s)", dlpg__last_error());
    dlpg__task_finish(t, DLPG_ERR_ABORTED, m);
    return;
  }
  char m[DLPG__ERROR_MAX];
  snprintf(m, sizeof m, "%s", dlpg__last_error());
  /* Peers learn of this rank's failure, or a peer's explains it (failure.h). */
  if (st != DLPG_OK) st = dlpg__failure_op_failed(g, t->ops[0]->work->flight_id, st, m, sizeof m);
  dlpg__task_finish(t, st, m);
}

static void *dlpg__worker_main(void *arg) {
  dlpg__worker_t *w = arg;
  struct dlpg_group *g = w->g;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    /* w->running is also set while a caller runs a task inline (dlpg__worker_submit_sync):
     * the thread waits for it, so tasks never run concurrently. */
    while (w->running || (!w->head && !w->stop)) pthread_cond_wait(&w->cv, &w->mu);
    if (!w->head) break; /* stop requested and the queue is drained */
    dlpg__task_t *t = w->head;
    w->head = t->next;
    if (!w->head) w->tail = NULL;
    w->running = 1;
    w->running_slot = t->ops[0]->backend;
    pthread_mutex_unlock(&w->mu);
    dlpg__worker_run(w, t);
    pthread_mutex_lock(&w->mu);
    w->running = 0;
  }
  w->exited = 1;
  int detached = w->detached;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  if (detached) {
    /* Shutdown gave up on this thread; nobody else will free its state. */
    for (int i = 0; i < DLPG__GROUP_BACKEND_SLOTS; i++) {
      free(w->ctx_msg[i]);
      free(w->choice_msg[i]);
    }
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
  }
  dlpg__group_release(g);
  return NULL;
}

static dlpg_status_t dlpg__worker_start(struct dlpg_group *g, dlpg__worker_t **out) {
  dlpg__worker_t *w = calloc(1, sizeof *w);
  if (!w) return dlpg__error(DLPG_ERR_SYSTEM, "out of memory starting the group's worker");
  pthread_mutex_init(&w->mu, NULL);
  dlpg__cond_init_monotonic(&w->cv);
  w->g = g;
  dlpg__group_retain(g);
  int rc = pthread_create(&w->thread, NULL, dlpg__worker_main, w);
  if (rc != 0) {
    dlpg__group_release(g);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
    return dlpg__error(DLPG_ERR_SYSTEM, "cannot start the group's worker thread: %s",
                       strerror(rc));
  }
  *out = w;
  return DLPG_OK;
}

static dlpg_status_t dlpg__worker_enqueue(struct dlpg_group *g, dlpg__op_t **ops, int n,
                                          int inline_ok) {
  dlpg__task_t *t = calloc(1, sizeof *t);
  if (!t) {
    dlpg_status_t st = dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory queueing the operation",
                                   dlpg__op_name(ops[0]->kind));
    dlpg__ops_finish(ops, n, st, "out of memory queueing the operation");
    return st;
  }
  t->ops = ops;
  t->n = n;

  pthread_mutex_lock(&dlpg__workers_mu);
  dlpg__worker_t *w = g->worker;
  if (!w) {
    dlpg_status_t st = dlpg__worker_start(g, &w);
    if (st != DLPG_OK) {
      pthread_mutex_unlock(&dlpg__workers_mu);
      dlpg__saved_error_t se;
      dlpg__error_save(&se);
      const char *name = dlpg__op_name(ops[0]->kind);
      dlpg__task_finish(t, st, se.msg);
      return dlpg__error(st, "%s: %s", name, se.msg);
    }
    g->worker = w;
  }
  pthread_mutex_lock(&w->mu);
  int refuse = w->aborted || w->stop || atomic_load(&g->aborted);
  if (!refuse && inline_ok && !w->head && !w->running) {
    /* The caller blocks until this task completes anyway and nothing is queued before it:
     * running it on the caller's thread keeps submission order and saves two thread
     * hand-offs, which dominate the time of a small CPU operation. */
    w->running = 1;
    w->running_slot = t->ops[0]->backend;
    pthread_mutex_unlock(&w->mu);
    pthread_mutex_unlock(&dlpg__workers_mu);
    dlpg__worker_run(w, t);
    pthread_mutex_lock(&w->mu);
    w->running = 0;
    /* Wake the thread only when it has something to do (a task queued meanwhile, or a stop):
     * an idle worker woken after every inline task costs the next call a context switch. */
    if (w->head || w->stop) pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return DLPG_OK;
  }
  if (!refuse) {
    if (w->tail) w->tail->next = t;
    else w->head = t;
    w->tail = t;
    pthread_cond_broadcast(&w->cv);
  }
  pthread_mutex_unlock(&w->mu);
  pthread_mutex_unlock(&dlpg__workers_mu);
  if (refuse) {
    const char *name = dlpg__op_name(ops[0]->kind);
    dlpg__task_abort(t);
    return dlpg__error(DLPG_ERR_ABORTED, "%s: group aborted", name);
  }
  return DLPG_OK;
}

dlpg_status_t dlpg__worker_submit(struct dlpg_group *g, dlpg__op_t **ops, int n) {
  return dlpg__worker_enqueue(g, ops, n, 0);
}

dlpg_status_t dlpg__worker_submit_sync(struct dlpg_group *g, dlpg__op_t **ops, int n) {
  return dlpg__worker_enqueue(g, ops, n, 1);
}

int dlpg__worker_drain(struct dlpg_group *g) {
  pthread_mutex_lock(&dlpg__workers_mu);
  dlpg__worker_t *w = g->worker;
  pthread_mutex_unlock(&dlpg__workers_mu);
  if (!w) return 1;

  pthread_mutex_lock(&w->mu);
  w->stop = 1;
  pthread_cond_broadcast(&w->cv);
  int exited = dlpg__thread_wait_exit(&w->mu, &w->cv, &w->exited, g->timeout_s);
  pthread_mutex_unlock(&w->mu);

  if (!exited)
    DLPG_WARN(COLL, g->rank, "group \"%s\": queued operations did not finish within %g s "
              "at destroy; aborting them", g->name, g->timeout_s);
  return exited;
}

void dlpg__worker_shutdown(struct dlpg_group *g) {
  pthread_mutex_lock(&dlpg__workers_mu);
  dlpg__worker_t *w = g->worker;
  pthread_mutex_unlock(&dlpg__workers_mu);
  if (!w) return;

  pthread_mutex_lock(&w->mu);
  w->stop = 1; /* set by dlpg__worker_drain already; repeated for a caller that skipped it */
  pthread_cond_broadcast(&w->cv);
  int exited = dlpg__thread_wait_or_give_up(&w->mu, &w->cv, &w->exited, &w->detached,
                                            DLPG__WORKER_GRACE_S);
  /* The running task's backend, named if the thread stays stuck. */
  const char *stuck_in = !exited && w->running ? dlpg__backend_name(w->running_slot) : NULL;
  pthread_mutex_unlock(&w->mu);

  pthread_mutex_lock(&dlpg__workers_mu);
  g->worker = NULL;
  pthread_mutex_unlock(&dlpg__workers_mu);

  if (!exited && stuck_in)
    DLPG_WARN(COLL, g->rank, "group \"%s\": the worker thread is stuck in the %s backend; "
              "detaching it", g->name, stuck_in);
  else if (!exited)
    DLPG_WARN(COLL, g->rank, "group \"%s\": the worker thread does not exit; detaching it",
              g->name);
  dlpg__thread_reap(w->thread, exited);
  if (exited) {
    for (int i = 0; i < DLPG__GROUP_BACKEND_SLOTS; i++) {
      free(w->ctx_msg[i]);
      free(w->choice_msg[i]);
    }
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
  }
}
