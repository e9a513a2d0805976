/* The per-group CPU executor (worker.h): one thread per group runs queued tasks in FIFO
 * order, so operations issued from several threads execute in submission order, which every
 * rank must agree on. A caller that waits for its task anyway runs it on its own thread when
 * nothing is queued or running (inline), and a lone op may be started on the caller's thread
 * (worker_eager.c); the w->running flag keeps all three one at a time. Running one task is
 * worker_run.c's; the queue's abort and how queued tasks end are worker_queue.c's. */
#include "core/exec/worker.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "core/lines/backend.h"
#include "core/group/group.h"
#include "base/log.h"
#include "base/status.h"
#include "core/group/thread.h"
#include "core/exec/worker_impl.h"

/* After an abort at shutdown, how long the thread gets to leave the backend before it is
 * detached. */
#define DLPG__WORKER_GRACE_S 2.0
/* While an op started on a caller's thread may be left unfinished (worker_eager.c), the idle
 * thread looks this often (and a while after the group's last start), so that a started op
 * ends even when nobody waits for it; then it sleeps until woken. */
#define DLPG__WORKER_PERIOD_S 0.001

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

static void dlpg__worker_free(dlpg__worker_t *w) {
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  free(w);
}

static void *dlpg__worker_main(void *arg) {
  dlpg__worker_t *w = arg;
  struct dlpg_group *g = w->g;
  unsigned long seen = 0; /* the started op the thread saw at its last look */
  pthread_mutex_lock(&w->mu);
  for (;;) {
    /* w->running is also set while a caller runs a task inline or starts or finishes an op
     * of the eager path: the thread waits for it, so the group's ops never run
     * concurrently. */
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
      dlpg__worker_run(w, t->ops, t->n);
      free(t);
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
  /* Shutdown gave up on this thread; nobody else will free its state. */
  if (detached) dlpg__worker_free(w);
  dlpg__group_release(g);
  return NULL;
}

/* g's worker, started at the group's first task (under the group's worker lock, so two
 * first callers start one). */
static dlpg_status_t dlpg__worker_get(struct dlpg_group *g, dlpg__worker_t **out) {
  dlpg__worker_t *w = dlpg__worker_of(g);
  if (w) {
    *out = w;
    return DLPG_OK;
  }
  pthread_mutex_lock(&g->worker_mu);
  dlpg_status_t st = DLPG_OK;
  w = g->worker;
  if (!w) {
    w = calloc(1, sizeof *w);
    if (!w) {
      st = dlpg__error(DLPG_ERR_SYSTEM, "out of memory starting the group's worker");
    } else {
      pthread_mutex_init(&w->mu, NULL);
      dlpg__cond_init_monotonic(&w->cv);
      w->g = g;
      dlpg__group_retain(g);
      int rc = pthread_create(&w->thread, NULL, dlpg__worker_main, w);
      if (rc != 0) {
        dlpg__group_release(g);
        dlpg__worker_free(w);
        w = NULL;
        st = dlpg__error(DLPG_ERR_SYSTEM, "cannot start the group's worker thread: %s",
                         strerror(rc));
      } else {
        __atomic_store_n(&g->worker, w, __ATOMIC_RELEASE);
      }
    }
  }
  pthread_mutex_unlock(&g->worker_mu);
  *out = w;
  return st;
}

/* Queue ops as one task, or run them on this thread when inline_ok and nothing of the
 * group is queued or running. */
static dlpg_status_t dlpg__worker_enqueue(struct dlpg_group *g, dlpg__worker_t *w,
                                          dlpg__op_t *const *ops, int n, int inline_ok) {
  const char *name = dlpg__op_name(ops[0]->kind);
  pthread_mutex_lock(&w->mu);
  int refuse = w->aborted || w->stop || atomic_load(&g->aborted);
  if (!refuse && inline_ok && !w->head && !w->running) {
    /* The caller blocks until this task completes anyway and nothing is queued before it:
     * running it on the caller's thread keeps submission order and saves two thread
     * hand-offs (and the task's allocation), which dominate a small CPU operation. */
    w->running = 1;
    w->running_slot = ops[0]->backend;
    pthread_mutex_unlock(&w->mu);
    dlpg__worker_run(w, ops, n);
    pthread_mutex_lock(&w->mu);
    w->running = 0;
    /* Wake the thread only when it has something to do (a task queued meanwhile, or a stop):
     * an idle worker woken after every inline task costs the next call a context switch. */
    if (w->head || w->stop) pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return DLPG_OK;
  }
  dlpg__task_t *t = refuse ? NULL : malloc(sizeof *t + sizeof t->ops[0] * (size_t)n);
  if (t) {
    t->next = NULL;
    t->n = n;
    memcpy(t->ops, ops, sizeof t->ops[0] * (size_t)n);
    if (w->tail) w->tail->next = t;
    else w->head = t;
    w->tail = t;
    pthread_cond_broadcast(&w->cv);
  }
  pthread_mutex_unlock(&w->mu);
  if (refuse) {
    dlpg__ops_finish(ops, n, DLPG_ERR_ABORTED, "group aborted");
    return dlpg__error(DLPG_ERR_ABORTED, "%s: group aborted", name);
  }
  if (!t) {
    dlpg__ops_finish(ops, n, DLPG_ERR_SYSTEM, "out of memory queueing the operation");
    return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory queueing the operation", name);
  }
  return DLPG_OK;
}

dlpg_status_t dlpg__worker_submit(struct dlpg_group *g, dlpg__op_t *const *ops, int n,
                                  int sync) {
  dlpg__worker_t *w;
  dlpg_status_t st = dlpg__worker_get(g, &w);
  if (st != DLPG_OK) {
    dlpg__saved_error_t se;
    dlpg__error_save(&se);
    const char *name = dlpg__op_name(ops[0]->kind);
    dlpg__ops_finish(ops, n, st, se.msg);
    return dlpg__error(st, "%s: %s", name, se.msg);
  }
  /* A lone op with a work may be started on this thread; a caller that waits at once then
   * finishes it there too, which costs less than the inline run. */
  if (n == 1 && ops[0]->work && dlpg__worker_try_start(g, w, ops[0])) return DLPG_OK;
  return dlpg__worker_enqueue(g, w, ops, n, sync);
}

int dlpg__worker_drain(struct dlpg_group *g) {
  dlpg__worker_t *w = dlpg__worker_of(g);
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
  dlpg__worker_t *w = dlpg__worker_of(g);
  if (!w) return;

  pthread_mutex_lock(&w->mu);
  w->stop = 1; /* set by dlpg__worker_drain already; repeated for a caller that skipped it */
  pthread_cond_broadcast(&w->cv);
  int exited = dlpg__thread_wait_or_give_up(&w->mu, &w->cv, &w->exited, &w->detached,
                                            DLPG__WORKER_GRACE_S);
  /* The running task's backend, named if the thread stays stuck. */
  const char *stuck_in = !exited && w->running ? dlpg__backend_name(w->running_slot) : NULL;
  pthread_mutex_unlock(&w->mu);

  /* An abort from another thread (the watcher) uses the worker under this lock. */
  pthread_mutex_lock(&g->worker_mu);
  __atomic_store_n(&g->worker, NULL, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&g->worker_mu);

  if (!exited && stuck_in)
    DLPG_WARN(COLL, g->rank, "group \"%s\": the worker thread is stuck in the %s backend; "
              "detaching it", g->name, stuck_in);
  else if (!exited)
    DLPG_WARN(COLL, g->rank, "group \"%s\": the worker thread does not exit; detaching it",
              g->name);
  dlpg__thread_reap(w->thread, exited);
  if (exited) dlpg__worker_free(w);
}
