/* The per-group CPU executor (worker.h). One thread per group runs tasks in FIFO order, so
 * operations issued from several threads execute in submission order, which every rank
 * must agree on. The thread asks for its backends' state at its first task (created under
 * the group's lock: a p2p_direct backend's sends and receives, which bypass the worker, may
 * create it first); the state itself is freed with the group, after the thread is gone. */
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
#include "base/log.h"
#include "base/status.h"
#include "core/work_impl.h"

/* After an abort at shutdown, how long the thread gets to leave Gloo before it is
 * detached. */
#define DLPG__WORKER_GRACE_S 2.0

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
} dlpg__worker_t;

/* Guards g->worker of every group (creation at the first task, removal at shutdown), and
 * keeps a worker alive while dlpg__worker_abort uses it. Held only briefly. */
static pthread_mutex_t dlpg__workers_mu = PTHREAD_MUTEX_INITIALIZER;

/* Complete every op with status (message: "<op>: <msg>") and free the ops and the array. */
static void dlpg__ops_finish(dlpg__op_t **ops, int n, dlpg_status_t st, const char *msg) {
  for (int i = 0; i < n; i++) {
    dlpg__op_t *op = ops[i];
    if (!op) continue;
    if (st == DLPG_OK) {
      dlpg__work_complete(op->work, DLPG_OK, NULL);
    } else {
      char m[DLPG__ERROR_MAX];
      dlpg__format_prefixed(m, sizeof m, dlpg__op_name(op->kind), msg, st);
      dlpg__work_complete(op->work, st, m);
    }
    free(op);
  }
  free(ops);
}

static void dlpg__task_finish(dlpg__task_t *t, dlpg_status_t st, const char *msg) {
  dlpg__ops_finish(t->ops, t->n, st, msg);
  free(t);
}

static void dlpg__task_abort(dlpg__task_t *t) { dlpg__task_finish(t, DLPG_ERR_ABORTED, "group aborted"); }

/* Run one task on the worker thread (w->mu not held). */
static void dlpg__worker_run(dlpg__worker_t *w, dlpg__task_t *t) {
  struct dlpg_group *g = w->g;
  if (atomic_load(&g->aborted) || w->aborted) {
    dlpg__task_abort(t);
    return;
  }
  int slot = t->ops[0]->backend;
  const dlpg__backend_vtbl_t *be = dlpg__backend_loaded(slot);
  if (!be) {
    dlpg__task_finish(t, DLPG_ERR_INTERNAL, "the operation's backend is not loaded");
    return;
  }
  if (!w->ctx_tried[slot]) {
    w->ctx_tried[slot] = 1;
    void *state = NULL;
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
  void *state = g->be_state[slot];
  if (!state) {
    dlpg__task_finish(t, w->ctx_status[slot], w->ctx_msg[slot]);
    return;
  }
  /* An abort during the rendezvous found no state to cut short: honour it here. */
  if (atomic_load(&g->aborted) || w->aborted) {
    dlpg__task_abort(t);
    return;
  }
  DLPG_TRACE(GLOO, g->rank, "running %s (%d op%s) on %s", dlpg__op_name(t->ops[0]->kind), t->n,
             t->n == 1 ? "" : "s", be->name);
  for (int i = 0; i < t->n; i++) {
    t->ops[i]->state = state;
    dlpg__flight_start(g, t->ops[i]->work->flight_id);
  }
  dlpg__clear_error();
  dlpg_status_t st = be->issue(t->ops, t->n);
  if (st != DLPG_OK && atomic_load(&g->aborted)) {
    /* A run cut short by an abort reports the abort, whatever Gloo said. */
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
    for (int i = 0; i < DLPG__GROUP_BACKEND_SLOTS; i++) free(w->ctx_msg[i]);
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
  pthread_mutex_unlock(&w->mu);
  /* The context stays alive while w is registered: it is freed with the group, and the
   * running thread holds a group reference. */
  if (ctx) dlpg__backend_loaded(slot)->abort(ctx);
  pthread_mutex_unlock(&dlpg__workers_mu);
  while (queued) {
    dlpg__task_t *next = queued->next;
    dlpg__task_abort(queued);
    queued = next;
  }
}

/* Wait on w->cv (w->mu held) until the thread has exited or the deadline passes. */
static void dlpg__worker_wait_exit(dlpg__worker_t *w, double deadline) {
  while (!w->exited) {
    double left = deadline - dlpg__now();
    if (left <= 0) break;
    if (left > 0.1) left = 0.1;
    struct timespec ts = dlpg__abstime_in(left);
    pthread_cond_timedwait(&w->cv, &w->mu, &ts);
  }
}

void dlpg__worker_shutdown(struct dlpg_group *g) {
  pthread_mutex_lock(&dlpg__workers_mu);
  dlpg__worker_t *w = g->worker;
  pthread_mutex_unlock(&dlpg__workers_mu);
  if (!w) return;

  pthread_mutex_lock(&w->mu);
  w->stop = 1;
  pthread_cond_broadcast(&w->cv);
  dlpg__worker_wait_exit(w, dlpg__now() + g->timeout_s);
  int exited = w->exited;
  pthread_mutex_unlock(&w->mu);

  if (!exited) {
    DLPG_WARN(GLOO, g->rank, "group \"%s\": queued CPU operations did not finish within %g s "
              "at destroy; aborting them", g->name, g->timeout_s);
    dlpg_group_abort(g);
    pthread_mutex_lock(&w->mu);
    dlpg__worker_wait_exit(w, dlpg__now() + DLPG__WORKER_GRACE_S);
    exited = w->exited;
    if (!exited) w->detached = 1;
    pthread_mutex_unlock(&w->mu);
  }

  pthread_mutex_lock(&dlpg__workers_mu);
  g->worker = NULL;
  pthread_mutex_unlock(&dlpg__workers_mu);

  if (exited) {
    pthread_join(w->thread, NULL);
    for (int i = 0; i < DLPG__GROUP_BACKEND_SLOTS; i++) free(w->ctx_msg[i]);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
  } else {
    DLPG_WARN(GLOO, g->rank, "group \"%s\": the worker thread is stuck in Gloo; detaching it",
              g->name);
    pthread_detach(w->thread);
  }
}
