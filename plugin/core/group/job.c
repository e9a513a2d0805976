/* The job agreement (job.h): rank 0 takes the id and its thread admits the others; the
 * others ask for it at their first operation. */
#include "core/group/job.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "core/group/group.h"
#include "core/group/observer.h"
#include "core/group/rendezvous.h"
#include "core/group/thread.h"
#include "store/store.h"

#define JOB_KEY_MAX (DLPG__JOB_SCOPE_MAX + 96)
/* How often a waiting rank re-posts its hello and knocks again (rank 0's thread may have
 * read an older hello of the same rank between the post's value and its counter). */
#define JOB_RESEND_S 0.5
/* Rank 0's thread looks at the knock counter this often at most and, while nobody knocks,
 * backs off to JOB_IDLE_POLL_S (after JOB_BUSY_S, JOB_LATE_POLL_S: a rank that comes long
 * after the others waits a little longer, and the store carries almost nothing). */
#define JOB_FAST_POLL_S 0.0005
#define JOB_IDLE_POLL_S 0.01
#define JOB_BUSY_S 10.0
#define JOB_LATE_POLL_S 0.1
/* How long destroy waits for rank 0's thread (it may be inside a store call). */
#define JOB_JOIN_THREAD_S 3.0

static void job_set_known(struct dlpg_group *g, int64_t id) {
  struct dlpg__job *j = g->job;
  j->id = id;
  snprintf(j->scope, sizeof j->scope, "%s/dlpg/j%" PRId64, g->name, id);
  g->view.scope = j->scope; /* before any backend state exists (backend.c joins first) */
  atomic_store_explicit(&j->known, 1, memory_order_release);
  DLPG_INFO(INIT, g->rank, "group \"%s\": job %" PRId64 " (keys under %s)", g->name, id,
            j->scope);
}

/* A join's final failure: kept, so every later operation reports the same. */
static dlpg_status_t job_fail(struct dlpg__job *j, dlpg_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static dlpg_status_t job_fail(struct dlpg__job *j, dlpg_status_t st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(j->msg, sizeof j->msg, fmt, ap);
  va_end(ap);
  j->err = st;
  j->id = -1;
  return dlpg__error(st, "%s", j->msg);
}

/* ------------------------------------------------------------------ rank 0's thread */

typedef struct job_admit {
  struct dlpg_group *g;
  uint64_t *answered; /* per rank: the last nonce answered (0: none) */
  char *claimed;      /* per rank: counted itself in */
  int *refused;       /* per rank: the other world size it was told differs (0: none);
                       * -1 once its reading of that answer was reported */
} job_admit_t;

/* Whether rank r counted itself in this job (its claim key), remembered once seen. */
static int job_claimed(job_admit_t *a, int r) {
  if (!a->claimed[r]) {
    char key[JOB_KEY_MAX];
    snprintf(key, sizeof key, "%s/claim/%d", a->g->job->scope, r);
    if (dlpg__rdv_count(a->g->store, key) > 0) a->claimed[r] = 1;
  }
  return a->claimed[r];
}

/* Answer rank r's hello if it holds a nonce not answered yet. */
static void job_answer(job_admit_t *a, int r) {
  struct dlpg_group *g = a->g;
  char key[JOB_KEY_MAX], val[64], reply[256];
  snprintf(key, sizeof key, "%s/dlpg/job/hello/%d", g->name, r);
  if (dlpg__rdv_try_get(g->store, key, val, sizeof val) != 1) return;
  uint64_t nonce = 0;
  int size = 0;
  if (sscanf(val, "%" SCNx64 " %d", &nonce, &size) != 2 || nonce == 0 || a->answered[r] == nonce)
    return;
  a->answered[r] = nonce;
  if (job_claimed(a, r)) {
    /* A new hello of a rank that is in this job already: that rank made the group again (a
     * retry after a failure, in the same process or a relaunched one), or a second process
     * has its rank. Either way it belongs to rank 0's next job, which answers the same
     * hello; a note beside the welcome lets it say why it waited, if no next job comes. */
    snprintf(key, sizeof key, "%s/dlpg/job/welcome/%d/%016" PRIx64 "/taken", g->name, r, nonce);
    snprintf(reply, sizeof reply, "%" PRId64, g->job->id);
    dlpg__rdv_post(g->store, key, reply);
    return;
  }
  if (size == g->size) {
    snprintf(reply, sizeof reply, "%" PRId64, g->job->id);
  } else {
    /* Possibly a stale hello of an earlier job of another size, which nobody reads: the
     * group fails only once the rank says it read this answer (job_refusals). */
    snprintf(reply, sizeof reply, "!%" PRId64 " rank %d has world size %d but rank 0 has "
             "world size %d", g->job->id, r, size, g->size);
    if (a->refused[r] >= 0) a->refused[r] = size > 0 ? size : 1;
  }
  snprintf(key, sizeof key, "%s/dlpg/job/welcome/%d/%016" PRIx64, g->name, r, nonce);
  dlpg__rdv_post(g->store, key, reply);
}

/* A rank that read its refusal says so under "<scope>/refused/<r>": the mismatch is real,
 * and every rank of the job must learn it now rather than at its timeout (observer.h). */
static void job_refusals(job_admit_t *a) {
  struct dlpg_group *g = a->g;
  for (int r = 1; r < g->size; r++) {
    if (a->refused[r] <= 0) continue;
    char key[JOB_KEY_MAX], msg[160];
    snprintf(key, sizeof key, "%s/refused/%d", g->job->scope, r);
    if (dlpg__rdv_count(g->store, key) <= 0) continue;
    snprintf(msg, sizeof msg, "rank %d has world size %d but rank 0 has world size %d", r,
             a->refused[r], g->size);
    a->refused[r] = -1;
    dlpg__observe_refused(g, r, msg);
  }
}

/* 1 once every rank counted itself in. */
static int job_all_claimed(job_admit_t *a) {
  struct dlpg_group *g = a->g;
  int all = 1;
  for (int r = 1; r < g->size; r++)
    if (!job_claimed(a, r)) all = 0;
  return all;
}

static void *job_admit_main(void *arg) {
  struct dlpg_group *g = arg;
  struct dlpg__job *j = g->job;
  job_admit_t a = {g, calloc((size_t)g->size, sizeof(uint64_t)), calloc((size_t)g->size, 1),
                   calloc((size_t)g->size, sizeof(int))};
  char knock[JOB_KEY_MAX];
  snprintf(knock, sizeof knock, "%s/dlpg/job/knock", g->name);
  int64_t seen = -1;
  int warned = 0;
  double poll = JOB_FAST_POLL_S, t0 = dlpg__now();
  while (a.answered && a.claimed && a.refused && !atomic_load(&j->stop)) {
    int64_t k = dlpg__rdv_count(g->store, knock);
    if (k < 0 && !warned) {
      DLPG_WARN(INIT, g->rank, "group \"%s\": rank 0 cannot read the store to admit the "
                "other ranks (retrying): %s", g->name, dlpg__last_error());
      warned = 1;
    }
    if (k >= 0 && k != seen) {
      seen = k;
      for (int r = 1; r < g->size; r++) job_answer(&a, r);
      job_refusals(&a);
      if (job_all_claimed(&a)) break;
      poll = JOB_FAST_POLL_S;
    } else {
      double cap = dlpg__now() - t0 < JOB_BUSY_S ? JOB_IDLE_POLL_S : JOB_LATE_POLL_S;
      poll = poll * 2 < cap ? poll * 2 : cap;
    }
    pthread_mutex_lock(&j->mu);
    if (!atomic_load(&j->stop)) {
      struct timespec ts = dlpg__abstime_in(poll);
      pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    }
    pthread_mutex_unlock(&j->mu);
  }
  free(a.answered);
  free(a.claimed);
  free(a.refused);
  pthread_mutex_lock(&j->mu);
  j->exited = 1;
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&j->mu);
  dlpg__group_release(g);
  return NULL;
}

void dlpg__job_start(struct dlpg_group *g) {
  struct dlpg__job *j = g->job;
  if (!j || g->rank != 0) return;
  char key[JOB_KEY_MAX];
  int64_t id = 0;
  snprintf(key, sizeof key, "%s/dlpg/job/n", g->name);
  pthread_mutex_lock(&j->mu);
  if (dlpg_store_add(g->store, key, 1, &id) != DLPG_OK || id <= 0) {
    job_fail(j, DLPG_ERR_REMOTE, "group \"%s\": rank 0 could not take a job number from the "
             "store when it made the group: %s", g->name, dlpg__last_error());
    pthread_mutex_unlock(&j->mu);
    return;
  }
  job_set_known(g, id);
  pthread_mutex_unlock(&j->mu);
}

dlpg_status_t dlpg__job_inherit(struct dlpg_group *g, const struct dlpg__job *parent,
                                const char *suffix) {
  struct dlpg__job *j = g->job;
  const char *ps = dlpg__job_scope(parent);
  if (!j || !ps) return dlpg__error(DLPG_ERR_SYSTEM, "group \"%s\": out of memory", g->name);
  int n = snprintf(j->scope, sizeof j->scope, "%s%s", ps, suffix);
  if (n < 0 || (size_t)n >= sizeof j->scope)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "group \"%s\": its store keys would start "
                       "with %d bytes (at most %d): the parent's name is too long for this "
                       "depth of splits", g->name, n, DLPG__JOB_SCOPE_MAX - 1);
  j->id = parent->id;
  g->view.scope = j->scope;
  /* The parent's ranks agreed the job: this group admits nobody and asks nobody. */
  atomic_store_explicit(&j->admitting, 1, memory_order_release);
  atomic_store_explicit(&j->known, 1, memory_order_release);
  return DLPG_OK;
}

/* Rank 0, j->mu held, at its first operation: start admitting the others. Not at creation:
 * a group that rank 0 makes and destroys unused (a retry, a probe) would otherwise admit a
 * rank whose group is meant to meet rank 0's next one. */
static void job_admit_start(struct dlpg_group *g) {
  struct dlpg__job *j = g->job;
  if (atomic_load(&j->admitting)) return;
  atomic_store_explicit(&j->admitting, 1, memory_order_release);
  if (g->size < 2 || atomic_load(&j->stop)) return;
  dlpg__group_retain(g);
  int rc = pthread_create(&j->thread, NULL, job_admit_main, g);
  if (rc == 0) {
    j->have_thread = 1;
  } else {
    dlpg__group_release(g);
    DLPG_WARN(INIT, g->rank, "group \"%s\": cannot start the thread that admits the other "
              "ranks (%s): they will time out at their first operation", g->name, strerror(rc));
  }
}

/* ------------------------------------------------------------------ ranks != 0 */

static int job_should_stop(struct dlpg_group *g) {
  return atomic_load(&g->aborted) || atomic_load(&g->job->stop);
}

/* Post this rank's hello and knock. */
static void job_hello(struct dlpg_group *g, const char *hello_key, const char *value) {
  char knock[JOB_KEY_MAX];
  snprintf(knock, sizeof knock, "%s/dlpg/job/knock", g->name);
  dlpg__rdv_post(g->store, hello_key, value);
  dlpg_store_add(g->store, knock, 1, NULL);
}

/* j->mu held. */
static dlpg_status_t job_ask(struct dlpg_group *g) {
  struct dlpg__job *j = g->job;
  const double t0 = dlpg__now(), deadline = t0 + g->timeout_s;
  char hello_key[JOB_KEY_MAX], welcome_key[JOB_KEY_MAX], hello[64], buf[512];
  uint64_t nonce = dlpg__rdv_nonce();
  snprintf(hello_key, sizeof hello_key, "%s/dlpg/job/hello/%d", g->name, g->rank);
  snprintf(welcome_key, sizeof welcome_key, "%s/dlpg/job/welcome/%d/%016" PRIx64, g->name,
           g->rank, nonce);
  snprintf(hello, sizeof hello, "%016" PRIx64 " %d", nonce, g->size);
  dlpg_status_t st = dlpg_store_add(g->store, hello_key, 0, NULL); /* reaches the store? */
  if (st != DLPG_OK)
    return job_fail(j, st, "group \"%s\": rank %d cannot reach the store to join its job: %s",
                    g->name, g->rank, dlpg__last_error());
  job_hello(g, hello_key, hello);
  /* Rank 0's note that its job already holds this rank (job_answer): why this rank waits
   * for rank 0's next job, said if that does not come. */
  char taken_key[JOB_KEY_MAX + 8], taken[32] = "";
  snprintf(taken_key, sizeof taken_key, "%s/taken", welcome_key);
  double sleep_s = 0.0005, next_resend = t0 + JOB_RESEND_S;
  for (;;) {
    if (job_should_stop(g))
      return job_fail(j, DLPG_ERR_ABORTED, "group \"%s\" was aborted while rank %d waited for "
                      "rank 0 to admit it", g->name, g->rank);
    int r = dlpg__rdv_try_get(g->store, welcome_key, buf, sizeof buf);
    if (r < 0)
      return job_fail(j, DLPG_ERR_REMOTE, "group \"%s\": rank %d lost the store while it "
                      "waited for rank 0 to admit it: %s", g->name, g->rank, dlpg__last_error());
    if (r > 0) break;
    double now = dlpg__now();
    if (now >= deadline && taken[0]) {
      dlpg__rdv_unpost(g->store, taken_key);
      return job_fail(j, DLPG_ERR_TIMEOUT,
                      "group \"%s\": rank %d of %d timed out after %g s waiting for rank 0 to "
                      "admit it: rank 0's job %s already holds a rank %d (this process made the "
                      "group again and rank 0 has not made it again since, or another process "
                      "runs rank %d)", g->name, g->rank, g->size, g->timeout_s, taken, g->rank,
                      g->rank);
    }
    if (now >= deadline)
      return job_fail(j, DLPG_ERR_TIMEOUT,
                      "group \"%s\": rank %d of %d timed out after %g s waiting for rank 0 to "
                      "admit it (rank 0 has not made the group or issued an operation on it, has "
                      "destroyed it, is stuck, or runs it with a world size of %d or less)",
                      g->name, g->rank, g->size, g->timeout_s, g->rank);
    if (now >= next_resend) {
      if (!taken[0]) dlpg__rdv_try_get(g->store, taken_key, taken, sizeof taken);
      job_hello(g, hello_key, hello);
      next_resend = now + JOB_RESEND_S;
    }
    double left = deadline - now;
    dlpg__sleep(sleep_s < left ? sleep_s : left);
    if (sleep_s < 0.01) sleep_s *= 2;
  }
  dlpg__rdv_unpost(g->store, welcome_key);
  if (taken[0]) dlpg__rdv_unpost(g->store, taken_key);
  if (buf[0] == '!') {
    /* "!<job> <why>": rank 0's job learns that this rank read it (job_refusals), so the
     * ranks already in the job fail at once with the same message. */
    char *why = NULL;
    long long job = strtoll(buf + 1, &why, 10);
    if (job > 0 && why && *why == ' ') {
      char key[JOB_KEY_MAX], knock[JOB_KEY_MAX];
      snprintf(key, sizeof key, "%s/dlpg/j%lld/refused/%d", g->name, job, g->rank);
      snprintf(knock, sizeof knock, "%s/dlpg/job/knock", g->name);
      dlpg_store_add(g->store, key, 1, NULL);
      dlpg_store_add(g->store, knock, 1, NULL);
      why++;
    } else {
      why = buf + 1;
    }
    return job_fail(j, DLPG_ERR_INVALID_ARGUMENT, "group \"%s\": %s", g->name, why);
  }
  char *end = NULL;
  long long id = strtoll(buf, &end, 10);
  if (id <= 0 || !end || *end)
    return job_fail(j, DLPG_ERR_REMOTE, "group \"%s\": rank 0's answer to rank %d is \"%.64s\", "
                    "not a job number", g->name, g->rank, buf);
  char key[JOB_KEY_MAX];
  int64_t claims = 0;
  snprintf(key, sizeof key, "%s/dlpg/j%lld/claim/%d", g->name, id, g->rank);
  st = dlpg_store_add(g->store, key, 1, &claims);
  if (st != DLPG_OK)
    return job_fail(j, st, "group \"%s\": rank %d lost the store while it joined job %lld: %s",
                    g->name, g->rank, id, dlpg__last_error());
  if (claims > 1)
    return job_fail(j, DLPG_ERR_INVALID_ARGUMENT,
                    "group \"%s\": two processes claim rank %d of %d (this one came second)",
                    g->name, g->rank, g->size);
  job_set_known(g, id);
  snprintf(key, sizeof key, "%s/dlpg/job/knock", g->name);
  dlpg_store_add(g->store, key, 1, NULL); /* rank 0's thread counts the claims */
  return DLPG_OK;
}

dlpg_status_t dlpg__job_join(struct dlpg_group *g) {
  struct dlpg__job *j = g->job;
  if (!j) return dlpg__error(DLPG_ERR_SYSTEM, "group \"%s\": out of memory", g->name);
  if (atomic_load_explicit(&j->known, memory_order_acquire) &&
      (g->rank != 0 || atomic_load_explicit(&j->admitting, memory_order_acquire)))
    return DLPG_OK;
  pthread_mutex_lock(&j->mu);
  dlpg_status_t st = DLPG_OK;
  if (atomic_load(&j->known) && g->rank == 0)
    job_admit_start(g);
  else if (atomic_load(&j->known))
    st = DLPG_OK;
  else if (j->id < 0)
    st = dlpg__error(j->err, "%s", j->msg);
  else if (g->rank == 0) /* dlpg__job_start failed to allocate: says so above */
    st = job_fail(j, DLPG_ERR_INTERNAL, "group \"%s\": rank 0 has no job number", g->name);
  else
    st = job_ask(g);
  pthread_mutex_unlock(&j->mu);
  return st;
}

void dlpg__job_stop(struct dlpg_group *g) {
  struct dlpg__job *j = g->job;
  if (!j) return;
  atomic_store(&j->stop, 1);
  pthread_mutex_lock(&j->mu); /* a join in progress sees stop and returns first */
  pthread_cond_broadcast(&j->cv);
  if (!j->have_thread) {
    pthread_mutex_unlock(&j->mu);
    return;
  }
  int exited = dlpg__thread_wait_or_give_up(&j->mu, &j->cv, &j->exited, &j->detached,
                                            JOB_JOIN_THREAD_S);
  j->have_thread = 0;
  pthread_mutex_unlock(&j->mu);
  if (!exited)
    DLPG_WARN(INIT, g->rank, "group \"%s\": the thread admitting the other ranks is stuck in "
              "the store; detaching it", g->name);
  dlpg__thread_reap(j->thread, exited);
}
