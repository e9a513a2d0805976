/* Failure propagation (failure.h): the records a failing rank writes, the watcher thread
 * that reads them while an operation is blocked, and the messages built from them. Every
 * store call here has a short timeout or fails at once when the store is gone, runs off the
 * hot path (failure paths and the watcher thread only), and keeps the caller's last error. */
#include "core/failure.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/flight.h"
#include "core/group.h"
#include "core/log.h"
#include "core/params.h"
#include "core/status.h"

/* An operation is "blocked" once nothing completed for this long while it is in flight. */
#define DLPG__WATCH_BLOCKED_S 0.2
/* The watcher's blocking read of the failure key (its poll period while blocked); a record
 * ends the read at once, so a longer read only slows the rejected-call check. After
 * DLPG__WATCH_LONG_S of blocking the reads lengthen, keeping the store's load from many
 * ranks waiting in one long operation at about two requests a second each. */
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
/* How long a failing operation waits for a peer's record that may explain it (the peer
 * records before it cuts its connections, so it is normally there already). */
#define DLPG__FAILURE_READ_S 0.25
/* After rejecting a call, how long the rank keeps reading the failure key while idle, so it
 * learns when its peers turned the rejection into the group's failure. */
#define DLPG__WATCH_REJECTED_WINDOW_S 3.0
/* How long destroy waits for the watcher (it may be inside a store call). */
#define DLPG__WATCH_JOIN_S 3.0
/* Most peers a timeout message reads the progress of. */
#define DLPG__PROGRESS_READ_MAX 64

struct dlpg__watch {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC: stop, a record to write, thread exit */
  atomic_int started;
  int have_thread, stop, exited, detached;
  pthread_t thread;
  /* The incarnation number (0 until known; -1: the store could not give one). */
  pthread_mutex_t gen_mu;
  int64_t gen;
  /* The group failed because of a peer: cause is final once remote is set. */
  atomic_int remote;
  char cause[DLPG__ERROR_MAX];
  atomic_int recorded;              /* this rank wrote (or is writing) the failed key */
  int hard_pending, soft_pending;   /* records for the watcher to write (under mu) */
  char hard_val[DLPG__ERROR_MAX + 64], soft_val[DLPG__ERROR_MAX + 64];
};

struct dlpg__watch *dlpg__watch_new(void) {
  struct dlpg__watch *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&w->gen_mu, NULL);
  return w;
}

void dlpg__watch_free(struct dlpg__watch *w) {
  if (!w) return;
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  pthread_mutex_destroy(&w->gen_mu);
  free(w);
}

/* Propagation applies to groups of two or more ranks, unless DLPG_PROPAGATE_FAILURES=0. */
static int dlpg__enabled(struct dlpg_group *g) {
  if (!g || !g->watch || g->size < 2) return 0;
  long on = 1;
  return !dlpg__param_long(DLPG__PARAM_PROPAGATE_FAILURES, &on) || on != 0;
}

/* ------------------------------------------------------------------ store access */

/* The caller's last error survives the store calls made on its behalf. */
typedef struct dlpg__saved_error {
  char msg[DLPG__ERROR_MAX];
} dlpg__saved_error_t;
static void dlpg__save_error(dlpg__saved_error_t *s) {
  snprintf(s->msg, sizeof s->msg, "%s", dlpg__last_error());
}
static void dlpg__restore_error(const dlpg__saved_error_t *s) {
  if (s->msg[0]) dlpg__error(DLPG_ERR_INTERNAL, "%s", s->msg);
  else dlpg__clear_error();
}

/* The incarnation number, taken from the store once (> 0), or 0 when the store failed. */
static int64_t dlpg__gen(struct dlpg_group *g) {
  struct dlpg__watch *w = g->watch;
  pthread_mutex_lock(&w->gen_mu);
  if (w->gen == 0) {
    char key[DLPG__ERROR_MAX];
    snprintf(key, sizeof key, "%s/dlpg/incarnation/%d", g->name, g->rank);
    int64_t v = 0;
    if (dlpg_store_add(g->store, key, 1, &v) == DLPG_OK && v > 0) {
      w->gen = v;
    } else {
      w->gen = -1;
      DLPG_WARN(INIT, g->rank, "group \"%s\": failure propagation is off: %s", g->name,
                dlpg__last_error());
    }
  }
  int64_t gen = w->gen;
  pthread_mutex_unlock(&w->gen_mu);
  return gen > 0 ? gen : 0;
}

/* "<name>/dlpg/<what>/<gen>" (rank >= 0: "/<rank>" appended); 0 without an incarnation. */
static int dlpg__key(struct dlpg_group *g, const char *what, int rank, char *key, size_t cap) {
  int64_t gen = dlpg__gen(g);
  if (!gen) return 0;
  if (rank >= 0) snprintf(key, cap, "%s/dlpg/%s/%" PRId64 "/%d", g->name, what, gen, rank);
  else snprintf(key, cap, "%s/dlpg/%s/%" PRId64, g->name, what, gen);
  return 1;
}

static void dlpg__put(struct dlpg_group *g, const char *what, int rank, const char *val) {
  char key[DLPG__ERROR_MAX];
  if (!dlpg__key(g, what, rank, key, sizeof key)) return;
  if (dlpg_store_set(g->store, key, val, strlen(val)) != DLPG_OK)
    DLPG_WARN(INIT, g->rank, "group \"%s\": cannot write %s: %s", g->name, key,
              dlpg__last_error());
}

/* Read key into buf (NUL-terminated). wait_s > 0: block up to that long for it; else only
 * read it if it exists. 1 when read. */
static int dlpg__read(struct dlpg_group *g, const char *what, int rank, double wait_s,
                      char *buf, size_t cap) {
  char key[DLPG__ERROR_MAX];
  if (!dlpg__key(g, what, rank, key, sizeof key)) return 0;
  const char *k = key;
  int exists = 0;
  if (wait_s <= 0 && (dlpg_store_check(g->store, &k, 1, &exists) != DLPG_OK || !exists))
    return 0;
  size_t len = 0;
  if (dlpg_store_get(g->store, key, wait_s > 0 ? wait_s : 1.0, buf, cap - 1, &len) != DLPG_OK)
    return 0;
  buf[len < cap - 1 ? len : cap - 1] = '\0';
  return 1;
}

/* A failed record: "<rank> <status>\n<message>". */
static int dlpg__parse_failed(const char *v, int *rank, const char **msg) {
  int st = 0;
  if (sscanf(v, "%d %d", rank, &st) != 2) return 0;
  const char *nl = strchr(v, '\n');
  *msg = nl ? nl + 1 : "";
  return 1;
}

/* ------------------------------------------------------------------ causes */

int dlpg__failure_remote(struct dlpg_group *g, char *buf, size_t cap) {
  struct dlpg__watch *w = g ? g->watch : NULL;
  if (!w || !atomic_load(&w->remote)) return 0;
  snprintf(buf, cap, "%s", w->cause); /* final once remote is set */
  return 1;
}

/* The group failed because of rank's record: remember the cause and abort. */
static void dlpg__adopt(struct dlpg_group *g, int rank, const char *msg) {
  struct dlpg__watch *w = g->watch;
  pthread_mutex_lock(&w->mu);
  int first = !atomic_load(&w->remote);
  if (first) {
    snprintf(w->cause, sizeof w->cause, "group \"%s\" failed on rank %d%s: %s", g->name, rank,
             rank == g->rank ? " (this rank)" : "", msg);
    atomic_store(&w->remote, 1);
  }
  pthread_mutex_unlock(&w->mu);
  if (first) DLPG_WARN(COLL, g->rank, "%s; aborting the group", w->cause);
  dlpg_group_abort(g);
}

/* Write this rank's failed record unless one was written here or by a peer already. */
static void dlpg__record_now(struct dlpg_group *g, const char *val) {
  char old[64];
  if (dlpg__read(g, "failed", -1, 0, old, sizeof old)) return; /* the first failure stands */
  dlpg__put(g, "failed", -1, val);
}

static void dlpg__start(struct dlpg_group *g, int take_gen);

/* Claim this rank's failed record; async: hand it to the watcher (it writes before it
 * exits). Returns 0 if the rank had already recorded a failure. */
static int dlpg__record(struct dlpg_group *g, dlpg_status_t st, const char *msg, int async) {
  struct dlpg__watch *w = g->watch;
  if (atomic_exchange(&w->recorded, 1)) return 0;
  char val[sizeof w->hard_val];
  snprintf(val, sizeof val, "%d %d\n%s", g->rank, (int)st, msg);
  if (!async) {
    dlpg__saved_error_t se;
    dlpg__save_error(&se);
    dlpg__record_now(g, val);
    dlpg__restore_error(&se);
    return 1;
  }
  pthread_mutex_lock(&w->mu);
  memcpy(w->hard_val, val, sizeof val);
  w->hard_pending = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  dlpg__start(g, 0);
  return 1;
}

void dlpg__failure_rejected(struct dlpg_group *g, dlpg__op_kind_t kind, int peer,
                            const char *msg) {
  if (!dlpg__enabled(g) || atomic_load(&g->aborted)) return;
  int p2p = kind == DLPG__OP_SEND || kind == DLPG__OP_RECV;
  dlpg__flight_progress_t p;
  dlpg__flight_progress(g, &p);
  /* The sequence number the call would have had: peers blocked in that one are stuck. */
  uint64_t seq = (p2p ? p.p2p_started : p.coll_started) + 1;
  struct dlpg__watch *w = g->watch;
  pthread_mutex_lock(&w->mu);
  snprintf(w->soft_val, sizeof w->soft_val, "%d %d %" PRIu64 " %d\n%s", g->rank, p2p, seq,
           p2p ? peer : -1, msg);
  w->soft_pending = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  dlpg__start(g, 0);
}

/* "coll_seq 7; ranks 1, 2 had not reached it (rank 1 last started coll_seq 5, rank 2
 * published no progress)" for entry e (this rank's blocked operation). */
static void dlpg__progress_note(struct dlpg_group *g, const dlpg__flight_entry_t *e, char *note,
                                size_t cap) {
  if (!e->id) {
    snprintf(note, cap, "no operation of the group is in the flight recorder");
    return;
  }
  if (e->p2p) {
    snprintf(note, cap, "p2p_seq %" PRIu64 " with rank %d", e->seq, e->peer);
    return;
  }
  char missing[512] = "", detail[512] = "";
  size_t nm = 0, nd = 0;
  int count = 0, read = 0;
  for (int r = 0; r < g->size && read < DLPG__PROGRESS_READ_MAX; r++) {
    if (r == g->rank) continue;
    read++;
    char v[128];
    unsigned long long started = 0;
    int have = dlpg__read(g, "progress", r, 0, v, sizeof v) && sscanf(v, "%llu", &started) == 1;
    if (have && started >= e->seq) continue;
    count++;
    if (nm < sizeof missing)
      nm += (size_t)snprintf(missing + nm, sizeof missing - nm, "%s%d", count > 1 ? ", " : "", r);
    if (nd < sizeof detail) {
      if (have)
        nd += (size_t)snprintf(detail + nd, sizeof detail - nd, "%srank %d last started coll_seq %llu",
                               count > 1 ? ", " : "", r, started);
      else
        nd += (size_t)snprintf(detail + nd, sizeof detail - nd, "%srank %d published no progress",
                               count > 1 ? ", " : "", r);
    }
  }
  if (count == 0)
    snprintf(note, cap, "coll_seq %" PRIu64 "; every rank%s had reached it", e->seq,
             read < g->size - 1 ? " read" : "");
  else
    snprintf(note, cap, "coll_seq %" PRIu64 "; rank%s %s had not reached coll_seq %" PRIu64 " (%s)",
             e->seq, count > 1 ? "s" : "", missing, e->seq, detail);
}

dlpg_status_t dlpg__failure_op_failed(struct dlpg_group *g, uint64_t flight_id,
                                      dlpg_status_t st, char *msg, size_t cap) {
  if (st == DLPG_OK || st == DLPG_ERR_INVALID_ARGUMENT || st == DLPG_ERR_UNSUPPORTED ||
      !dlpg__enabled(g))
    return st;
  char cause[DLPG__ERROR_MAX];
  if (dlpg__failure_remote(g, cause, sizeof cause)) {
    snprintf(msg, cap, "%s", cause);
    return DLPG_ERR_REMOTE;
  }
  if (st == DLPG_ERR_ABORTED && atomic_load(&g->aborted)) return st; /* recorded at abort */
  dlpg__saved_error_t se;
  dlpg__save_error(&se);
  char v[DLPG__ERROR_MAX + 64];
  int rank = -1;
  const char *pmsg = NULL;
  if (dlpg__read(g, "failed", -1, DLPG__FAILURE_READ_S, v, sizeof v) &&
      dlpg__parse_failed(v, &rank, &pmsg) &&
      !(rank == g->rank && atomic_load(&g->watch->recorded))) {
    /* A peer failed first (or recorded this rank's rejected call): this failure is its
     * consequence. */
    char local[DLPG__ERROR_MAX];
    snprintf(local, sizeof local, "%s", msg);
    dlpg__adopt(g, rank, pmsg);
    dlpg__failure_remote(g, cause, sizeof cause);
    snprintf(msg, cap, "%s (here: %s)", cause, local);
    dlpg__restore_error(&se);
    return DLPG_ERR_REMOTE;
  }
  dlpg__flight_entry_t e = {0};
  dlpg__flight_get(g, flight_id, &e);
  char orig[DLPG__ERROR_MAX], what[DLPG__ERROR_MAX + 64];
  snprintf(orig, sizeof orig, "%s", msg);
  if (st == DLPG_ERR_TIMEOUT) {
    char note[DLPG__ERROR_MAX / 2];
    dlpg__progress_note(g, &e, note, sizeof note);
    /* The record is bounded (the message quotes the op's message after the note). */
    snprintf(what, sizeof what, "%s (%.400s): %.560s", dlpg__op_name(e.kind), note, orig);
    snprintf(msg, cap, "%s; %s", orig, note);
  } else if (e.id) {
    snprintf(what, sizeof what, "%s (%s %" PRIu64 "): %s", dlpg__op_name(e.kind),
             e.p2p ? "p2p_seq" : "coll_seq", e.seq, orig);
  } else {
    snprintf(what, sizeof what, "%s", orig);
  }
  dlpg__record(g, st, what, 0);
  dlpg__restore_error(&se);
  dlpg_group_abort(g);
  return st;
}

void dlpg__failure_timed_out(struct dlpg_group *g, uint64_t flight_id, const char *op_name,
                             double timeout_s, char *note, size_t cap) {
  note[0] = '\0';
  if (!dlpg__enabled(g)) return;
  if (dlpg__failure_remote(g, note, cap)) return;
  dlpg__saved_error_t se;
  dlpg__save_error(&se);
  dlpg__flight_entry_t e = {0};
  dlpg__flight_get(g, flight_id, &e);
  dlpg__progress_note(g, &e, note, cap);
  char what[1280];
  snprintf(what, sizeof what, "%s did not complete within %g s (%s)", op_name, timeout_s, note);
  dlpg__record(g, DLPG_ERR_TIMEOUT, what, 0);
  dlpg__restore_error(&se);
}

void dlpg__failure_on_abort(struct dlpg_group *g) {
  if (!g || !g->watch) return;
  char why[DLPG__ERROR_MAX];
  if (!dlpg__failure_remote(g, why, sizeof why)) {
    snprintf(why, sizeof why, "group \"%.512s\" aborted", g->name);
    /* Written by the watcher, so an abort never waits on the store. */
    if (dlpg__enabled(g))
      dlpg__record(g, DLPG_ERR_ABORTED, "the group was aborted (dlpg_group_abort)", 1);
  }
  dlpg__flight_dump(g, why);
}

/* ------------------------------------------------------------------ the watcher */

typedef struct dlpg__watch_loop {
  uint64_t last_finished;
  double last_change;
  int published_blocked;
  char last_progress[128];
  char soft_seen[DLPG__ERROR_MAX + 64];
  double soft_seen_at;
  double rejected_until; /* this rank rejected a call: read the failure key until then */
} dlpg__watch_loop_t;

static void dlpg__publish_progress(struct dlpg_group *g, dlpg__watch_loop_t *L,
                                   const dlpg__flight_progress_t *p) {
  char v[128];
  snprintf(v, sizeof v, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64, p->coll_started,
           p->coll_done, p->p2p_started, p->p2p_done);
  if (strcmp(v, L->last_progress) == 0) return;
  dlpg__put(g, "progress", g->rank, v);
  snprintf(L->last_progress, sizeof L->last_progress, "%s", v);
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
  return e->p2p && e->peer == *rank && peer == g->rank;
}

/* The group's failure record, if a peer wrote one (or one in this rank's name). Waits up to
 * wait_s for it; 1 when found (the group is then aborted). */
static int dlpg__watch_failed(struct dlpg_group *g, double wait_s) {
  char v[DLPG__ERROR_MAX + 64];
  int rank = -1;
  const char *msg = NULL;
  if (dlpg__read(g, "failed", -1, wait_s, v, sizeof v) &&
      dlpg__parse_failed(v, &rank, &msg) &&
      !(rank == g->rank && atomic_load(&g->watch->recorded))) { /* not this rank's own */
    dlpg__adopt(g, rank, msg);
    return 1;
  }
  return 0;
}

/* One look while blocked. Returns 1 when the group was aborted. */
static int dlpg__watch_blocked(struct dlpg_group *g, dlpg__watch_loop_t *L,
                               const dlpg__flight_progress_t *p, double blocked_s) {
  dlpg__publish_progress(g, L, p);
  L->published_blocked = 1;
  if (dlpg__watch_failed(g, blocked_s < DLPG__WATCH_LONG_S ? DLPG__WATCH_POLL_S
                                                           : DLPG__WATCH_LONG_POLL_S))
    return 1;
  char v[DLPG__ERROR_MAX + 64];
  int rank = -1;
  const char *msg = NULL;
  if (!dlpg__read(g, "rejected", -1, 0, v, sizeof v) ||
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
  dlpg__record_now(g, val);
  dlpg__adopt(g, rank, msg);
  return 1;
}

static void *dlpg__watch_main(void *arg) {
  struct dlpg_group *g = arg;
  struct dlpg__watch *w = g->watch;
  dlpg__watch_loop_t L;
  memset(&L, 0, sizeof L);
  L.last_finished = UINT64_MAX;
  int idle = 1;
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
      pthread_mutex_unlock(&w->mu);
      if (hard) {
        dlpg__record_now(g, val);
      } else {
        dlpg__put(g, "rejected", -1, val);
        L.rejected_until = dlpg__now() + DLPG__WATCH_REJECTED_WINDOW_S;
      }
      pthread_mutex_lock(&w->mu);
      continue;
    }
    if (w->stop || !dlpg__gen(g)) break;
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
      dlpg__watch_blocked(g, &L, &p, now - since);
    } else if (L.published_blocked && p.inflight == 0) {
      dlpg__publish_progress(g, &L, &p); /* unblocked: where this rank got to */
      L.published_blocked = 0;
    } else if (now < L.rejected_until) {
      dlpg__watch_failed(g, DLPG__WATCH_POLL_S);
    }
    pthread_mutex_lock(&w->mu);
  }
  w->exited = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  dlpg__group_release(g); /* may free w when destroy gave up on this thread */
  return NULL;
}

static void dlpg__start(struct dlpg_group *g, int take_gen) {
  struct dlpg__watch *w = g->watch;
  if (!dlpg__enabled(g) || atomic_load(&w->started)) return;
  /* take_gen (an operation's first issue): the incarnation is taken here, on the caller's
   * thread before the operation's rendezvous, rather than by the new thread alongside it:
   * one more store round trip in sequence instead of a second connection in parallel. */
  if (take_gen) {
    dlpg__saved_error_t se;
    dlpg__save_error(&se);
    dlpg__gen(g);
    dlpg__restore_error(&se);
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
    dlpg__start(g, 1);
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
  double deadline = dlpg__now() + DLPG__WATCH_JOIN_S;
  while (!w->exited && dlpg__now() < deadline) {
    struct timespec ts = dlpg__abstime_in(0.05);
    pthread_cond_timedwait(&w->cv, &w->mu, &ts);
  }
  int exited = w->exited;
  if (!exited) w->detached = 1;
  w->have_thread = 0;
  pthread_mutex_unlock(&w->mu);
  if (exited) {
    pthread_join(w->thread, NULL);
  } else {
    DLPG_WARN(INIT, g->rank, "group \"%s\": the failure watcher is stuck in the store; "
              "detaching it", g->name);
    pthread_detach(w->thread);
  }
}
