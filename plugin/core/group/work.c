/* Work: the completion record of one operation (work.h, work_impl.h): created, completed by
 * its executor (the group's worker thread, or a backend's poller attached to it), freed.
 * Its end is told to the group's observer (observer.h). Waiting on it is work_wait.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/group/group.h"
#include "core/group/observer.h"
#include "base/log.h"
#include "base/status.h"
#include "base/timeout.h"
#include "core/group/work_impl.h"

dlpg_status_t dlpg__work_new(struct dlpg_group *g, struct dlpg_work **out) {
  struct dlpg_work *w = calloc(1, sizeof *w);
  if (!w) return dlpg__error(DLPG_ERR_SYSTEM, "dlpg: out of memory allocating a work record");
  if (pthread_mutex_init(&w->mu, NULL) != 0 || dlpg__cond_init_monotonic(&w->cv) != 0) {
    free(w);
    return dlpg__error(DLPG_ERR_SYSTEM, "dlpg: cannot initialise a work record's mutex");
  }
  atomic_init(&w->refs, 2);
  w->status = DLPG_OK;
  w->op_name = "dlpg operation";
  w->source = -2;
  w->group = g;
  if (g) dlpg__group_retain(g);
  *out = w;
  return DLPG_OK;
}

void dlpg__work_set_op_name(struct dlpg_work *w, const char *name) {
  if (w && name) w->op_name = name;
}

void dlpg__work_set_source(struct dlpg_work *w, int rank) {
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  w->source = rank;
  pthread_mutex_unlock(&w->mu);
}

void dlpg__work_unref(struct dlpg_work *w) {
  if (!w) return;
  if (atomic_fetch_sub(&w->refs, 1) != 1) return;
  if (!w->done) dlpg__observe_dropped(w->group, w->flight_id); /* freed unfinished (CUDA) */
  if (w->has_be && w->be.release) w->be.release(w->be_data);
  free(w->message);
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  struct dlpg_group *g = w->group;
  free(w);
  if (g) dlpg__group_release(g);
}

/* The message is written once, so a pointer handed out by dlpg_work_error stays valid until
 * the work is freed. */
void dlpg__work_finish_locked(struct dlpg_work *w, dlpg_status_t status, const char *msg) {
  if (w->done) return;
  /* Aborted because a peer failed: the peer's failure is the cause (failure.h). */
  char cause[DLPG__ERROR_MAX], m2[DLPG__ERROR_MAX];
  if (status == DLPG_ERR_ABORTED && dlpg__observe_cause(w->group, cause, sizeof cause)) {
    status = DLPG_ERR_REMOTE;
    dlpg__format_prefixed(m2, sizeof m2, w->op_name, cause, status);
    msg = m2;
  }
  dlpg__observe_finished(w->group, w->flight_id, status);
  w->done = 1;
  w->status = status;
  if (status != DLPG_OK) {
    const char *m = (msg && msg[0]) ? msg : dlpg_status_name(status);
    w->message = strdup(m);
  }
  pthread_cond_broadcast(&w->cv);
}

/* A backend's failure (a transfer its own threads ran, an issue that failed) is the group's
 * failure: it reaches the observer here, before the work's mutex is taken (the observer may
 * wait on the store, bounded, and aborts the group; the backend holds none of the locks its
 * abort takes when it completes a work). The executor's own outcome, already told to the
 * observer, takes dlpg__work_complete_observed. A work that has ended (a wait's timeout)
 * reports nothing more. */
void dlpg__work_complete(struct dlpg_work *w, dlpg_status_t status, const char *msg) {
  if (!w) return;
  char m[DLPG__ERROR_MAX];
  int report = 0;
  if (status != DLPG_OK && w->group) {
    pthread_mutex_lock(&w->mu);
    report = !w->done;
    w->completing = report;
    pthread_mutex_unlock(&w->mu);
  }
  if (report) {
    snprintf(m, sizeof m, "%s", msg && msg[0] ? msg : dlpg_status_name(status));
    dlpg__saved_error_t se;
    dlpg__error_save(&se);
    status = dlpg__observe_failed(w->group, w->flight_id, status, m, sizeof m);
    dlpg__error_restore(&se, DLPG_OK);
    msg = m;
  }
  dlpg__work_complete_observed(w, status, msg);
}

void dlpg__work_complete_observed(struct dlpg_work *w, dlpg_status_t status, const char *msg) {
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  dlpg__work_finish_locked(w, status, msg);
  pthread_mutex_unlock(&w->mu);
  dlpg__work_unref(w);
}

void dlpg__work_set_backend(struct dlpg_work *w, const dlpg__work_backend_t *be, void *data) {
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  if (be) w->be = *be;
  w->be_data = data;
  w->has_be = be != NULL && be->poll != NULL;
  pthread_cond_broadcast(&w->cv); /* a waiter sleeping on the CPU path switches to polling */
  pthread_mutex_unlock(&w->mu);
  /* The poller lives inside the work and is released with it, so the executor's
   * reference is no longer needed. */
  dlpg__work_unref(w);
}

int dlpg__work_is_done(struct dlpg_work *w) {
  pthread_mutex_lock(&w->mu);
  int r = w->done;
  pthread_mutex_unlock(&w->mu);
  return r;
}

dlpg_status_t dlpg__work_status(struct dlpg_work *w, char *msg, size_t cap) {
  pthread_mutex_lock(&w->mu);
  dlpg_status_t st = w->done ? w->status : DLPG_OK;
  snprintf(msg, cap, "%s", w->done && w->message ? w->message : "");
  pthread_mutex_unlock(&w->mu);
  return st;
}

int dlpg__work_is_unclaimed(struct dlpg_work *w) {
  pthread_mutex_lock(&w->mu);
  int r = !w->done && !w->has_be;
  pthread_mutex_unlock(&w->mu);
  return r;
}

const char *dlpg_work_error(const dlpg_work_t *cw) {
  if (!cw) return "";
  /* The mutex is internal state; locking it does not change the work's observable value. */
  dlpg_work_t *w = (dlpg_work_t *)cw;
  pthread_mutex_lock(&w->mu);
  const char *m = (w->done && w->message) ? w->message : "";
  pthread_mutex_unlock(&w->mu);
  return m;
}

dlpg_status_t dlpg_work_source(const dlpg_work_t *cw, int *source) {
  DLPG_ARG_CHECK(cw != NULL, "dlpg_work_source: w is NULL");
  DLPG_ARG_CHECK(source != NULL, "dlpg_work_source: source is NULL");
  dlpg_work_t *w = (dlpg_work_t *)cw;
  pthread_mutex_lock(&w->mu);
  int done = w->done, src = w->source;
  dlpg_status_t st = w->status;
  pthread_mutex_unlock(&w->mu);
  DLPG_ARG_CHECK(src != -2, "dlpg_work_source: w is a %s, not a dlpg_recv", w->op_name);
  DLPG_ARG_CHECK(done, "dlpg_work_source: the receive has not completed yet (wait for it first)");
  DLPG_ARG_CHECK(st == DLPG_OK && src >= 0,
                 "dlpg_work_source: the receive failed (%s), so it has no source",
                 dlpg_status_name(st));
  *source = src;
  return DLPG_OK;
}

dlpg_status_t dlpg_work_free(dlpg_work_t *w) {
  dlpg__work_unref(w);
  return DLPG_OK;
}
