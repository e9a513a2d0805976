/* Waiting on a work (work.h): dlpg_work_wait and dlpg_work_test, and core's own waits
 * (dlpg__work_wait). CPU work is waited on with a condition variable; CUDA work carries a
 * backend poller (CUDA event + NCCL async error) that wait and test call. Every wait has a
 * deadline; when it passes the group is aborted, so no rank is left hanging. A poller's
 * failure and a deadline go to the group's observer (observer.h), which records them for
 * the peers and aborts the group. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/group/group.h"
#include "base/log.h"
#include "base/status.h"
#include "base/timeout.h"
#include "core/group/observer.h"
#include "core/group/work_impl.h"

/* How long a CPU waiter sleeps at most before it rechecks the group's abort flag. */
#define DLPG__WAIT_SLICE_S 0.01

/* One poll of a backend work under its mutex; records the result when it finishes. */
static void dlpg__work_poll_locked(struct dlpg_work *w) {
  if (w->done || !w->has_be) return;
  int done = 0;
  dlpg__clear_error();
  dlpg_status_t st = w->be.poll(w->be_data, &done);
  if (st != DLPG_OK || done) {
    char msg[DLPG__ERROR_MAX];
    snprintf(msg, sizeof msg, "%s", dlpg__last_error());
    if (st != DLPG_OK) st = dlpg__observe_failed(w->group, w->flight_id, st, msg, sizeof msg);
    dlpg__work_finish_locked(w, st, msg);
  }
}

/* The result of a finished work as the waiter's return value and last error. */
static dlpg_status_t dlpg__work_result(struct dlpg_work *w) {
  dlpg_status_t st = w->status;
  if (st != DLPG_OK) dlpg__error(st, "%s", w->message ? w->message : dlpg_status_name(st));
  return st;
}

/* A wait that ends without the executor's result (timeout, abort) records its own outcome
 * in the work, so dlpg_work_test then says done and dlpg_work_error gives the same message
 * (the executor's later completion is ignored: the first result stays). */
static dlpg_status_t dlpg__work_end_wait(struct dlpg_work *w, dlpg_status_t st) {
  char msg[DLPG__ERROR_MAX];
  snprintf(msg, sizeof msg, "%s", dlpg__last_error());
  pthread_mutex_lock(&w->mu);
  dlpg__work_finish_locked(w, st, msg);
  st = dlpg__work_result(w);
  pthread_mutex_unlock(&w->mu);
  return st;
}

/* Called without w->mu held (the abort takes other locks). The timeout is recorded before
 * the abort, whose completion of the work by the executor must not replace it. */
static dlpg_status_t dlpg__work_timed_out(struct dlpg_work *w, double timeout_s) {
  struct dlpg_group *g = w->group;
  DLPG_WARN(COLL, g ? g->rank : -1, "%s did not complete within %g s; aborting the group",
            w->op_name, timeout_s);
  /* Which ranks had not arrived, recorded for the peers before the abort (failure.h). */
  char note[DLPG__ERROR_MAX / 2] = "";
  dlpg__observe_timed_out(g, w->flight_id, w->op_name, timeout_s, note, sizeof note);
  dlpg__error(DLPG_ERR_TIMEOUT,
              "dlpg_work_wait: %s did not complete within %g s; the group%s%s%s was aborted%s%s",
              w->op_name, timeout_s, g ? " \"" : "", g ? g->name : "", g ? "\"" : "",
              note[0] ? "; " : "", note);
  dlpg__work_end_wait(w, DLPG_ERR_TIMEOUT);
  dlpg__observe_abort(g);
  pthread_mutex_lock(&w->mu);
  dlpg_status_t st = dlpg__work_result(w);
  pthread_mutex_unlock(&w->mu);
  return st;
}

static dlpg_status_t dlpg__work_aborted(struct dlpg_work *w) {
  char cause[DLPG__ERROR_MAX];
  if (dlpg__observe_cause(w->group, cause, sizeof cause)) {
    dlpg__error(DLPG_ERR_REMOTE, "%s: %s", w->op_name, cause);
    return dlpg__work_end_wait(w, DLPG_ERR_REMOTE);
  }
  dlpg__error(DLPG_ERR_ABORTED, "%s: group aborted", w->op_name);
  return dlpg__work_end_wait(w, DLPG_ERR_ABORTED);
}

dlpg_status_t dlpg__work_wait(struct dlpg_work *w, double timeout_s) {
  if (!w) return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "dlpg_work_wait: w is NULL");
  /* NaN compares false with everything: it would make a wait without a deadline. */
  if (isnan(timeout_s))
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "dlpg_work_wait: timeout_s is NaN");
  struct dlpg_group *g = w->group;
  if (timeout_s <= 0) timeout_s = g ? g->timeout_s : dlpg__timeout_resolve(0);
  double deadline = dlpg__now() + timeout_s;

  pthread_mutex_lock(&w->mu);
  /* A work handed out inside dlpg_group_start/end gets its poller only at the batch's end,
   * so the loop re-decides each round between polling (CUDA) and sleeping on the condition
   * variable (CPU, or not yet issued). */
  for (int polls = 0; !w->done;) {
    if (w->has_be) {
      dlpg__work_poll_locked(w);
      if (w->done) break;
    }
    /* An abort this work's own failure made (on its way to the observer) is not its cause:
     * its result comes next. */
    if (g && atomic_load(&g->aborted) && !w->completing) {
      pthread_mutex_unlock(&w->mu);
      return dlpg__work_aborted(w);
    }
    double now = dlpg__now();
    if (now >= deadline) {
      pthread_mutex_unlock(&w->mu);
      return dlpg__work_timed_out(w, timeout_s);
    }
    if (w->has_be) {
      /* CUDA work: a few immediate polls catch short kernels without sleeping, then short
       * sleeps keep latency low without spinning a core. */
      polls++;
      if (polls > 64) {
        pthread_mutex_unlock(&w->mu);
        dlpg__sleep(polls < 2000 ? 20e-6 : 50e-6);
        pthread_mutex_lock(&w->mu);
      }
      continue;
    }
    /* Sleep in slices so an abort from another thread is seen promptly even when the
     * worker cannot complete this work yet. */
    double add = deadline - now < DLPG__WAIT_SLICE_S ? deadline - now : DLPG__WAIT_SLICE_S;
    if (w->drive) {
      /* An op started on a caller's thread: finish it here rather than wait for a thread
       * to be woken (its backend sleeps on the peers' progress, in slices). */
      pthread_mutex_unlock(&w->mu);
      int tried = w->drive(w, add);
      pthread_mutex_lock(&w->mu);
      if (tried || w->done) continue;
    }
    struct timespec ts = dlpg__abstime_in(add);
    int rc = pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    if (rc != 0 && rc != ETIMEDOUT && rc != EINTR) {
      pthread_mutex_unlock(&w->mu);
      return dlpg__error(DLPG_ERR_SYSTEM, "dlpg_work_wait: pthread_cond_timedwait failed (%d)",
                         rc);
    }
  }
  dlpg_status_t st = dlpg__work_result(w);
  pthread_mutex_unlock(&w->mu);
  return st;
}

dlpg_status_t dlpg_work_wait(dlpg_work_t *w, double timeout_s) {
  return dlpg__work_wait(w, timeout_s);
}

dlpg_status_t dlpg_work_test(dlpg_work_t *w, int *done) {
  if (!w) return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "dlpg_work_test: w is NULL");
  if (!done) return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "dlpg_work_test: done is NULL");
  if (w->drive) {
    pthread_mutex_lock(&w->mu);
    int pending = !w->done;
    pthread_mutex_unlock(&w->mu);
    if (pending) w->drive(w, 0);
  }
  pthread_mutex_lock(&w->mu);
  dlpg__work_poll_locked(w);
  *done = w->done;
  pthread_mutex_unlock(&w->mu);
  return DLPG_OK;
}
