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

#include "base/clock.h"
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
/* The eager path: how long an op started on a caller's thread is left to that thread
 * (dlpg_work_wait/test, the group's next operation) before the worker finishes it, so a
 * started op ends even when nobody waits; the idle thread looks that often for a while after
 * the group's last start (DLPG__WORKER_LINGER periods), so back-to-back starts need not wake
 * it, then sleeps until woken. */
#define DLPG__WORKER_PERIOD_S 0.001
#define DLPG__WORKER_LINGER 64
/* How long one progress call of a thread that must finish a started op waits. */
#define DLPG__WORKER_FINISH_SLICE_S 0.1

/* An op's outcome as its work reports it (w->mu not held): a run an abort cut short reports
 * the abort, whatever the backend said; a failure is told to the peers, or a peer's
 * explains it (failure.h). st is the backend's status, its message the last error. */
static dlpg_status_t dlpg__worker_outcome(struct dlpg_group *g, uint64_t flight_id,
                                          dlpg_status_t st, char *m, size_t cap) {
  if (st != DLPG_OK && atomic_load(&g->aborted)) {
    snprintf(m, cap, "group aborted (%s)", dlpg__last_error());
    return DLPG_ERR_ABORTED;
  }
  m[0] = '\0';
  if (st == DLPG_OK) return st; /* no formatting on the fast path */
  snprintf(m, cap, "%s", dlpg__last_error());
  return dlpg__failure_op_failed(g, flight_id, st, m, cap);
}

/* Finish the started op (the caller holds running and not w->mu): as long as its backend's
 * deadline lets it wait. */
static void dlpg__worker_finish_started(dlpg__worker_t *w) {
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

/* Run one task on the worker thread (w->mu not held). */
static void dlpg__worker_run(dlpg__worker_t *w, dlpg__task_t *t) {
  struct dlpg_group *g = w->g;
  /* Ops run in issue order: one started before this task ends first. */
  dlpg__worker_finish_started(w);
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
  if (slot != first || w->chosen[first] != slot + 1) {
    pthread_mutex_lock(&w->mu);
    w->running_slot = slot; /* what an abort must cut short */
    w->chosen[first] = slot + 1; /* where the eager path may start the group's next ops */
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
  char m[DLPG__ERROR_MAX];
  st = dlpg__worker_outcome(g, t->ops[0]->work->flight_id, st, m, sizeof m);
  dlpg__task_finish(t, st, m);
}

/* Sleep (w->mu held) until woken, or one period while the eager path may need the thread. */
static void dlpg__worker_sleep(dlpg__worker_t *w) {
  if (w->started || w->linger > 0) {
    if (!w->started) w->linger--;
    struct timespec ts = dlpg__abstime_in(DLPG__WORKER_PERIOD_S);
    pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    return;
  }
  w->idle_untimed = 1;
  pthread_cond_wait(&w->cv, &w->mu);
  w->idle_untimed = 0;
}

static void *dlpg__worker_main(void *arg) {
  dlpg__worker_t *w = arg;
  struct dlpg_group *g = w->g;
  unsigned long seen = 0; /* the started op the thread saw at its last look */
  pthread_mutex_lock(&w->mu);
  for (;;) {
    /* w->running is also set while a caller runs a task inline (dlpg__worker_submit_sync)
     * or starts or finishes an op of the eager path: the thread waits for it, so the
     * group's ops never run concurrently. */
    if (w->running) {
      dlpg__worker_sleep(w);
      continue;
    }
    if (w->head) {
      dlpg__task_t *t = w->head;
      w->head = t->next;
      if (!w->head) w->tail = NULL;
      w->running = 1;
      w->running_slot = t->ops[0]->backend;
      pthread_mutex_unlock(&w->mu);
      dlpg__worker_run(w, t);
      pthread_mutex_lock(&w->mu);
      w->running = 0;
      continue;
    }
    if (w->started) {
      /* Still started a period after the thread first saw it (or the group is being
       * destroyed): nobody is finishing it, so this thread does. */
      if (w->stop || w->started_seq == seen) {
        w->running = 1;
        w->running_slot = w->started->backend;
        pthread_mutex_unlock(&w->mu);
        dlpg__worker_finish_started(w);
        pthread_mutex_lock(&w->mu);
        w->running = 0;
        continue;
      }
      seen = w->started_seq;
      dlpg__worker_sleep(w);
      continue;
    }
    if (w->stop) break; /* stop requested, the queue drained and nothing started */
    dlpg__worker_sleep(w);
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

/* A waiter's share of the eager path (work_impl.h's drive): finish the started op of its
 * work on the waiter's thread, unless another thread is at it. */
static int dlpg__worker_drive(struct dlpg_work *wk, double wait_s) {
  struct dlpg_group *g = wk->group;
  pthread_mutex_lock(&dlpg__workers_mu);
  dlpg__worker_t *w = g ? g->worker : NULL;
  if (!w) {
    pthread_mutex_unlock(&dlpg__workers_mu);
    return 0;
  }
  pthread_mutex_lock(&w->mu);
  pthread_mutex_unlock(&dlpg__workers_mu);
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

/* The eager path for op (alone, with a work handle): when the group's choice is made, its
 * state exists, its backend has start/progress and nothing of the group is queued or
 * running, the backend starts op on this thread (an op started earlier is finished first,
 * if that needs no waiting). 1: op is started (core keeps it as w->started); 0: queue it. */
static int dlpg__worker_try_start(struct dlpg_group *g, dlpg__op_t *op) {
  pthread_mutex_lock(&dlpg__workers_mu);
  dlpg__worker_t *w = g->worker;
  if (!w) {
    pthread_mutex_unlock(&dlpg__workers_mu);
    return 0;
  }
  pthread_mutex_lock(&w->mu);
  pthread_mutex_unlock(&dlpg__workers_mu);
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
      dlpg__flight_start_on(g, op->work->flight_id, slot);
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

dlpg_status_t dlpg__worker_submit(struct dlpg_group *g, dlpg__op_t **ops, int n) {
  if (n == 1 && ops[0]->work && dlpg__worker_try_start(g, ops[0])) {
    free(ops);
    return DLPG_OK;
  }
  return dlpg__worker_enqueue(g, ops, n, 0);
}

dlpg_status_t dlpg__worker_submit_sync(struct dlpg_group *g, dlpg__op_t **ops, int n) {
  /* The caller waits for its work at once, which finishes a started op on its thread: the
   * eager path costs less than the inline run (no task, no hand-off either way). */
  if (n == 1 && ops[0]->work && dlpg__worker_try_start(g, ops[0])) {
    free(ops);
    return DLPG_OK;
  }
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
