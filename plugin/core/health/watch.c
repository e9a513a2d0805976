/* The per-group failure watcher (failure.h): one thread per group, started at its first
 * operation (or failure), stopped at destroy. It writes the records other threads queue
 * (an abort's, a rejected call's), and while an operation has been blocked for a moment it
 * publishes this rank's progress and reads the group's failure record, aborting the group
 * when a peer's appears. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "core/health/failure_impl.h"
#include "core/health/flight.h"
#include "core/group/group.h"
#include "core/group/job.h"
#include "base/log.h"
#include "base/status.h"
#include "core/group/thread.h"
#include "core/health/progress.h"
#include "core/health/stall.h"
#include "store/store.h"

/* An operation is "blocked" once nothing completed for this long while it is in flight. */
#define DLPG__WATCH_BLOCKED_S 0.2
/* The watcher's blocking read of the failure key (its poll period while blocked); a record
 * ends the read at once, so a longer read only slows the rejected-call check. After
 * DLPG__WATCH_LONG_S of blocking the reads lengthen, keeping the store's load from many
 * ranks waiting in one long operation at about two requests a second each, besides the
 * progress record's rewrite every DLPG__PROGRESS_BEAT_S (progress.h: two writes a second),
 * by which the peers tell a rank that stopped running from one that waits. */
#define DLPG__WATCH_POLL_S 0.2
#define DLPG__WATCH_LONG_S 5.0
#define DLPG__WATCH_LONG_POLL_S 1.0
/* How often the watcher looks at the group's progress counters: while operations are in
 * flight, and while none is (an idle group's thread wakes 5 times a second). */
#define DLPG__WATCH_TICK_S 0.05
#define DLPG__WATCH_IDLE_TICK_S 0.2
/* A peer's rejected call turns fatal once this rank stayed blocked in that operation for so
 * long after seeing it (a rank that fixes its arguments and retries at once is no failure). */
#define DLPG__WATCH_REJECT_GRACE_S 0.5
/* After rejecting a call, how long the rank keeps reading the failure key while idle, so it
 * learns when its peers turned the rejection into the group's failure. */
#define DLPG__WATCH_REJECTED_WINDOW_S 3.0
/* While no operation is blocked, the collective this rank last issued is published at most
 * this often (only when it changed): at most one store write a second per rank, none per
 * operation. */
#define DLPG__WATCH_PUBLISH_S 1.0
/* Each store call of the watcher ends within this beyond its own wait (a blocking read's),
 * even when the store's host is stopped: destroy then finds the thread gone quickly. */
#define DLPG__WATCH_STORE_S 0.5
/* How long destroy waits for the watcher (it may be inside a store call): while it has a
 * record to write, long enough for that; otherwise briefly, since the read or progress write
 * it may be in (bounded by DLPG__WATCH_STORE_S beyond its wait) no longer matters: a
 * store host that stopped answering then costs destroy no more than this. */
#define DLPG__WATCH_JOIN_S 3.0
#define DLPG__WATCH_JOIN_IDLE_S 0.3

/* ------------------------------------------------------------------ the watcher */

/* Bound this thread's next store calls: they end within wait_s + DLPG__WATCH_STORE_S. */
static void dlpg__watch_cap(double wait_s) {
  dlpg__store_cap_deadline(dlpg__now() + wait_s + DLPG__WATCH_STORE_S);
}

typedef struct dlpg__watch_loop {
  uint64_t last_finished;
  double last_change;
  int published_blocked;
  char last_progress[128];
  uint64_t published_coll; /* coll_started of the last record written */
  double published_at;     /* when it was written (dlpg__now()) */
  int published_open;      /* it showed a collective in flight */
  char soft_seen[DLPG__ERROR_MAX + 64];
  double soft_seen_at;
  double rejected_until; /* this rank rejected a call: read the failure key until then */
  uint64_t stall_warned; /* the flight id of the operation last warned about (stall.h) */
} dlpg__watch_loop_t;

/* Write the record when it changed, or (beat: blocked) when the last write is
 * DLPG__PROGRESS_BEAT_S old: peers tell a rank that still runs from one that stopped. */
static void dlpg__publish_progress(struct dlpg_group *g, dlpg__watch_loop_t *L,
                                   const dlpg__flight_progress_t *p, int beat) {
  char v[128], rec[160];
  dlpg__progress_format(p, v, sizeof v);
  double now = dlpg__now();
  if (strcmp(v, L->last_progress) == 0 && (!beat || now - L->published_at < DLPG__PROGRESS_BEAT_S))
    return;
  dlpg__progress_stamp(v, rec, sizeof rec);
  dlpg__fail_put(g, "progress", g->rank, rec);
  snprintf(L->last_progress, sizeof L->last_progress, "%s", v);
  L->published_coll = p->coll_started;
  L->published_at = now;
  L->published_open = p->coll_started > p->coll_done;
}

/* Not blocked: publish the collective this rank last issued if it changed since the last
 * record, at most once per DLPG__WATCH_PUBLISH_S. A rank that is slow outside dlpg (its
 * watcher idle) is then known by its peers to have not called their collective yet. */
static void dlpg__publish_issued(struct dlpg_group *g, dlpg__watch_loop_t *L,
                                 const dlpg__flight_progress_t *p, double now) {
  if (p->coll_started == L->published_coll || now - L->published_at < DLPG__WATCH_PUBLISH_S)
    return;
  dlpg__publish_progress(g, L, p, 0);
}

/* Does a peer's rejected call match the operation this rank is blocked in? */
static int dlpg__rejection_matches(struct dlpg_group *g, const char *v,
                                   const dlpg__flight_entry_t *e, int *rank, const char **msg) {
  int p2p = 0, peer = -1;
  unsigned long long seq = 0;
  if (!e->id || sscanf(v, "%d %d %llu %d", rank, &p2p, &seq, &peer) != 4 || *rank == g->rank)
    return 0;
  const char *nl = strchr(v, '\n');
  *msg = nl ? nl + 1 : "";
  if (!p2p) return !e->p2p && e->seq == seq;
  /* A receive from any source is blocked on whichever rank refused a send to this one. */
  return e->p2p && (e->peer == *rank || e->peer < 0) && peer == g->rank;
}

/* The group's failure record, if a peer wrote one (or one in this rank's name). Waits up to
 * wait_s for it; 1 when found (the group is then aborted). */
static int dlpg__watch_failed(struct dlpg_group *g, double wait_s) {
  char v[DLPG__ERROR_MAX + 64];
  int rank = -1;
  const char *msg = NULL;
  if (dlpg__fail_read(g, "failed", -1, wait_s, v, sizeof v) &&
      dlpg__fail_parse(v, &rank, &msg) &&
      !(rank == g->rank && atomic_load(&g->watch->recorded))) { /* not this rank's own */
    dlpg__fail_adopt(g, rank, msg);
    return 1;
  }
  return 0;
}

void dlpg__watch_rejected(struct dlpg_group *g) {
  if (!g->watch) return;
  long long until = (long long)((dlpg__now() + DLPG__WATCH_REJECTED_WINDOW_S) * 1000.0);
  atomic_store(&g->watch->rejected_until_ms, until);
}

void dlpg__watch_check_rejected(struct dlpg_group *g) {
  struct dlpg__watch *w = g->watch;
  if (!w || !atomic_load_explicit(&w->rejected_until_ms, memory_order_relaxed)) return;
  if (dlpg__now() * 1000.0 > (double)atomic_load(&w->rejected_until_ms)) {
    atomic_store(&w->rejected_until_ms, 0);
    return;
  }
  if (atomic_load(&g->aborted)) return;
  dlpg__saved_error_t se;
  dlpg__error_save(&se);
  dlpg__watch_failed(g, 0);
  dlpg__error_restore(&se, DLPG_OK);
}

/* One look while blocked. Returns 1 when the group was aborted. */
static int dlpg__watch_blocked(struct dlpg_group *g, dlpg__watch_loop_t *L,
                               const dlpg__flight_progress_t *p, double blocked_s) {
  dlpg__publish_progress(g, L, p, 1);
  L->published_blocked = 1;
  double poll = blocked_s < DLPG__WATCH_LONG_S ? DLPG__WATCH_POLL_S : DLPG__WATCH_LONG_POLL_S;
  dlpg__watch_cap(poll);
  if (dlpg__watch_failed(g, poll)) return 1;
  dlpg__watch_cap(0);
  char v[DLPG__ERROR_MAX + 64];
  int rank = -1;
  const char *msg = NULL;
  if (!dlpg__fail_read(g, "rejected", -1, 0, v, sizeof v) ||
      !dlpg__rejection_matches(g, v, &p->oldest, &rank, &msg)) {
    L->soft_seen[0] = '\0';
    return 0;
  }
  double now = dlpg__now();
  if (strcmp(v, L->soft_seen) != 0) {
    snprintf(L->soft_seen, sizeof L->soft_seen, "%s", v);
    L->soft_seen_at = now;
    return 0;
  }
  if (now - L->soft_seen_at < DLPG__WATCH_REJECT_GRACE_S) return 0;
  /* Still blocked in the call the peer rejected: record it in the peer's name, so every
   * rank (the peer included) learns the group's cause. */
  char val[DLPG__ERROR_MAX + 64];
  snprintf(val, sizeof val, "%d %d\n%s", rank, (int)DLPG_ERR_INVALID_ARGUMENT, msg);
  dlpg__fail_record_now(g, val);
  dlpg__fail_adopt(g, rank, msg);
  return 1;
}

static void *dlpg__watch_main(void *arg) {
  struct dlpg_group *g = arg;
  struct dlpg__watch *w = g->watch;
  dlpg__watch_loop_t L;
  memset(&L, 0, sizeof L);
  L.last_finished = UINT64_MAX;
  int idle = 1;
  /* Started by a failure before any operation joined the job (a rejected call, an abort):
   * join it here, off the caller's thread; a rank outside its job has no records. */
  if (!dlpg__fail_gen(g)) {
    dlpg__saved_error_t se;
    dlpg__error_save(&se);
    dlpg__job_join(g);
    dlpg__error_restore(&se, DLPG_OK);
  }
  pthread_mutex_lock(&w->mu);
  for (;;) {
    if (!w->hard_pending && !w->soft_pending && !w->stop) {
      struct timespec ts = dlpg__abstime_in(idle ? DLPG__WATCH_IDLE_TICK_S : DLPG__WATCH_TICK_S);
      pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
    if (w->hard_pending || w->soft_pending) {
      int hard = w->hard_pending;
      char val[sizeof w->hard_val];
      memcpy(val, hard ? w->hard_val : w->soft_val, sizeof val);
      if (hard) w->hard_pending = 0;
      else w->soft_pending = 0;
      w->writing = 1;
      pthread_mutex_unlock(&w->mu);
      dlpg__watch_cap(0);
      if (hard) {
        dlpg__fail_record_now(g, val);
      } else {
        dlpg__fail_put(g, "rejected", -1, val);
        L.rejected_until = dlpg__now() + DLPG__WATCH_REJECTED_WINDOW_S;
      }
      pthread_mutex_lock(&w->mu);
      w->writing = 0;
      continue;
    }
    if (w->stop || !dlpg__fail_gen(g)) break;
    /* Aborted: nothing left to watch, but the abort's own record may still come (it is
     * queued just after the flag is set); the thread stays until destroy. */
    if (atomic_load(&g->aborted)) continue;
    pthread_mutex_unlock(&w->mu);
    dlpg__flight_progress_t p;
    dlpg__flight_progress(g, &p);
    double now = dlpg__now();
    if (p.finished != L.last_finished) {
      L.last_finished = p.finished;
      L.last_change = now;
    }
    idle = p.inflight == 0;
    double since = L.last_change;
    if (p.oldest.id && p.oldest.t_issue > since) since = p.oldest.t_issue;
    /* A look that finds the group's failure aborts it; the loop then only writes records. */
    if (p.inflight > 0 && now - since >= DLPG__WATCH_BLOCKED_S) {
      dlpg__watch_cap(0);
      if (!dlpg__watch_blocked(g, &L, &p, now - since)) {
        dlpg__watch_cap(DLPG__WATCH_STORE_S * 3); /* a warning reads the peers' records */
        dlpg__stall_check(g, &p, dlpg__now() - since, &L.stall_warned);
      }
    } else if ((L.published_blocked || L.published_open) && p.inflight == 0) {
      /* Unblocked, or done with what the record showed in flight: where this rank got to
       * (a record left showing a collective open would read as a rank stuck in it). */
      dlpg__watch_cap(0);
      dlpg__publish_progress(g, &L, &p, 0);
      L.published_blocked = 0;
      L.published_open = 0;
    } else {
      dlpg__watch_cap(DLPG__WATCH_POLL_S);
      if (now < L.rejected_until) dlpg__watch_failed(g, DLPG__WATCH_POLL_S);
      dlpg__watch_cap(0);
      dlpg__publish_issued(g, &L, &p, dlpg__now());
    }
    pthread_mutex_lock(&w->mu);
  }
  w->exited = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  dlpg__group_release(g); /* may free w when destroy gave up on this thread */
  return NULL;
}

void dlpg__watch_start(struct dlpg_group *g, int take_gen) {
  struct dlpg__watch *w = g->watch;
  if (!w || atomic_load(&w->started)) return;
  if (!dlpg__fail_enabled(g)) {
    atomic_store(&w->started, 1); /* off for this group: later operations skip this call */
    return;
  }
  /* take_gen (an operation's first issue): the job is joined here, on the caller's thread
   * before the operation's rendezvous (which joins it anyway), rather than by the new thread
   * alongside it: the records' scope is then known before anything can fail. A failure is
   * the operation's to report (backend.c repeats it). */
  if (take_gen) {
    dlpg__saved_error_t se;
    dlpg__error_save(&se);
    dlpg__job_join(g);
    dlpg__error_restore(&se, DLPG_OK);
  }
  pthread_mutex_lock(&w->mu);
  if (!atomic_load(&w->started) && !w->stop) {
    atomic_store(&w->started, 1);
    dlpg__group_retain(g);
    int rc = pthread_create(&w->thread, NULL, dlpg__watch_main, g);
    if (rc == 0) {
      w->have_thread = 1;
    } else {
      dlpg__group_release(g);
      DLPG_WARN(INIT, g->rank, "group \"%s\": cannot start the failure watcher (%s); "
                "failures are not propagated", g->name, strerror(rc));
    }
  }
  pthread_mutex_unlock(&w->mu);
}

void dlpg__watch_op(struct dlpg_group *g) {
  if (g->watch && !atomic_load_explicit(&g->watch->started, memory_order_relaxed))
    dlpg__watch_start(g, 1);
}

void dlpg__watch_stop(struct dlpg_group *g) {
  struct dlpg__watch *w = g->watch;
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  w->stop = 1;
  pthread_cond_broadcast(&w->cv);
  if (!w->have_thread) {
    pthread_mutex_unlock(&w->mu);
    return;
  }
  int records = w->hard_pending || w->soft_pending || w->writing;
  int exited = dlpg__thread_wait_or_give_up(&w->mu, &w->cv, &w->exited, &w->detached,
                                            records ? DLPG__WATCH_JOIN_S : DLPG__WATCH_JOIN_IDLE_S);
  w->have_thread = 0;
  pthread_mutex_unlock(&w->mu);
  if (!exited && records)
    DLPG_WARN(INIT, g->rank, "group \"%s\": the failure watcher is stuck in the store; "
              "detaching it", g->name);
  else if (!exited)
    DLPG_INFO(INIT, g->rank, "group \"%s\": the failure watcher is in a store call with "
              "nothing left to write; it ends on its own", g->name);
  dlpg__thread_reap(w->thread, exited);
}
