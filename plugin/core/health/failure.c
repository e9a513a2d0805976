/* Failure propagation (failure.h): a failing operation's record, the timeout message naming
 * the ranks that had not arrived, and the group's abort with its record. The watcher thread
 * is in watch.c, the store records in failure_store.c, the failure state and a peer's cause
 * in failure_state.c, the abort's mechanics and the adoption of a peer's record in abort.c;
 * all of them sit below this file. */
#include "core/health/failure.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/health/abort.h"
#include "core/health/failure_impl.h"
#include "core/health/flight.h"
#include "core/health/progress.h"
#include "core/group/group.h"
#include "base/log.h"
#include "base/status.h"
#include "base/clock.h"
#include "store/store.h"

/* How long a failing operation waits for a peer's record that may explain it (the peer
 * records before it cuts its connections, so it is normally there already). */
#define DLPG__FAILURE_READ_S 0.25
/* Most peers a timeout message reads the progress of. */
#define DLPG__PROGRESS_READ_MAX 64

/* ------------------------------------------------------------------ causes */

/* Claim this rank's failed record; async: hand it to the watcher (it writes before it
 * exits). Returns 0 if the rank had already recorded a failure. */
static int dlpg__record(struct dlpg_group *g, dlpg_status_t st, const char *msg, int async) {
  struct dlpg__watch *w = g->watch;
  if (atomic_exchange(&w->recorded, 1)) return 0;
  char val[sizeof w->hard_val];
  snprintf(val, sizeof val, "%d %d\n%s", g->rank, (int)st, msg);
  if (!async) {
    dlpg__saved_error_t se;
    dlpg__error_save(&se);
    dlpg__fail_record_now(g, val);
    dlpg__error_restore(&se, DLPG_OK);
    return 1;
  }
  pthread_mutex_lock(&w->mu);
  memcpy(w->hard_val, val, sizeof val);
  w->hard_pending = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  dlpg__watch_start(g, 0);
  return 1;
}

void dlpg__failure_rejected(struct dlpg_group *g, dlpg__op_kind_t kind, int peer,
                            const char *msg) {
  if (!dlpg__fail_enabled(g) || atomic_load(&g->aborted)) return;
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
  dlpg__watch_rejected(g);
  dlpg__watch_start(g, 0);
}

void dlpg__failure_refused(struct dlpg_group *g, int rank, const char *msg) {
  if (!dlpg__fail_enabled(g)) return;
  char val[DLPG__ERROR_MAX + 64];
  snprintf(val, sizeof val, "%d %d\n%s", rank, (int)DLPG_ERR_INVALID_ARGUMENT, msg);
  dlpg__saved_error_t se;
  dlpg__error_save(&se);
  dlpg__fail_record_now(g, val); /* in rank's name: the watchers of the job's ranks adopt it */
  dlpg__error_restore(&se, DLPG_OK);
}

/* "coll_seq 7; rank 2 has not called dlpg_allreduce (coll_seq 7): its last call was
 * coll_seq 6, 12.3 s ago; rank 1 published no progress, so whether it reached coll_seq 7 is
 * unknown" for entry e (this rank's blocked operation; progress.h). */
static void dlpg__progress_note(struct dlpg_group *g, const dlpg__flight_entry_t *e, char *note,
                                size_t cap) {
  if (!e->id) {
    snprintf(note, cap, "no operation of the group is in the flight recorder");
    return;
  }
  if (e->p2p) {
    char who[DLPG__RANK_LABEL_MAX];
    if (e->peer < 0) snprintf(note, cap, "p2p_seq %" PRIu64 " with any rank", e->seq);
    else snprintf(note, cap, "p2p_seq %" PRIu64 " with %s", e->seq,
                  dlpg__rank_label(g, e->peer, who, sizeof who));
    return;
  }
  char clauses[DLPG__ERROR_MAX / 2];
  int read = 0, named = 0;
  dlpg__progress_coll_note(g, e, DLPG__PROGRESS_READ_MAX, clauses, sizeof clauses, &read, &named);
  if (!named)
    snprintf(note, cap, "coll_seq %" PRIu64 "; every rank%s had reached it", e->seq,
             read < g->size - 1 ? " read" : "");
  else
    snprintf(note, cap, "coll_seq %" PRIu64 "%s", e->seq, clauses);
}

static dlpg_status_t dlpg__op_failed(struct dlpg_group *g, uint64_t flight_id,
                                     dlpg_status_t st, char *msg, size_t cap) {
  if (st == DLPG_OK || st == DLPG_ERR_INVALID_ARGUMENT || st == DLPG_ERR_UNSUPPORTED ||
      !dlpg__fail_enabled(g))
    return st;
  char cause[DLPG__ERROR_MAX];
  if (dlpg__failure_remote(g, cause, sizeof cause)) {
    snprintf(msg, cap, "%s", cause);
    return DLPG_ERR_REMOTE;
  }
  if (st == DLPG_ERR_ABORTED && atomic_load(&g->aborted)) return st; /* recorded at abort */
  dlpg__saved_error_t se;
  dlpg__error_save(&se);
  char v[DLPG__ERROR_MAX + 64];
  int rank = -1;
  const char *pmsg = NULL;
  /* A rank whose own deadline expired records at once: waiting here for a peer's record would
   * let a peer that merely saw this rank's connection drop (Gloo closes it on its timeout)
   * record first and be blamed. Any other failure may be a peer's consequence: wait briefly
   * for the peer's record. */
  double wait_s = st == DLPG_ERR_TIMEOUT ? 0 : DLPG__FAILURE_READ_S;
  if (dlpg__fail_read(g, "failed", -1, wait_s, v, sizeof v) &&
      dlpg__fail_parse(v, &rank, &pmsg) &&
      !(rank == g->rank && atomic_load(&g->watch->recorded))) {
    /* A peer failed first (or recorded this rank's rejected call): this failure is its
     * consequence. */
    char local[DLPG__ERROR_MAX];
    snprintf(local, sizeof local, "%s", msg);
    dlpg__fail_adopt(g, rank, pmsg);
    dlpg__failure_remote(g, cause, sizeof cause);
    snprintf(msg, cap, "%s (here: %s)", cause, local);
    dlpg__error_restore(&se, DLPG_OK);
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
  } else if (e.id && e.p2p) {
    /* The transfer in the user's terms: which peer, which tag. */
    char who[DLPG__RANK_LABEL_MAX];
    if (e.peer < 0) snprintf(who, sizeof who, "any rank");
    else dlpg__rank_label(g, e.peer, who, sizeof who);
    snprintf(what, sizeof what, "%s %s %s (tag %d, p2p_seq %" PRIu64 "): %.960s",
             dlpg__op_name(e.kind), e.kind == DLPG__OP_SEND ? "to" : "from", who, e.tag,
             e.seq, orig);
  } else if (e.id) {
    snprintf(what, sizeof what, "%s (coll_seq %" PRIu64 "): %s", dlpg__op_name(e.kind), e.seq,
             orig);
  } else {
    snprintf(what, sizeof what, "%s", orig);
  }
  if (dlpg__fail_store_lost(g)) {
    /* No record could be read: a peer this rank lost may only have given up after losing
     * another (the store's host, say); the message says what this rank knows, no more. */
    char store[300], here[DLPG__ERROR_MAX];
    dlpg__fail_store_name(g, store, sizeof store);
    snprintf(here, sizeof here, "%s", msg);
    snprintf(msg, cap, "%s; %s is unreachable too, so the ranks cannot compare notes: which "
             "rank failed first is unknown", here, store);
  }
  dlpg__record(g, st, what, 0);
  dlpg__error_restore(&se, DLPG_OK);
  /* The backend blames a peer (a lost connection, a dead rank): this rank's later calls name
   * that failure as its peers do, rather than an abort of unknown cause. */
  if (st == DLPG_ERR_REMOTE) dlpg__fail_cause(g, g->rank, what);
  dlpg__flight_dump_cause(what); /* the dump's reason */
  dlpg__group_abort(g);
  return st;
}

static void dlpg__timed_out(struct dlpg_group *g, uint64_t flight_id, const char *op_name,
                            double timeout_s, char *note, size_t cap) {
  note[0] = '\0';
  if (!dlpg__fail_enabled(g)) return;
  if (dlpg__failure_remote(g, note, cap)) return;
  dlpg__saved_error_t se;
  dlpg__error_save(&se);
  dlpg__flight_entry_t e = {0};
  dlpg__flight_get(g, flight_id, &e);
  dlpg__progress_note(g, &e, note, cap);
  char what[1280];
  snprintf(what, sizeof what, "%s did not complete within %g s (%s)", op_name, timeout_s, note);
  dlpg__record(g, DLPG_ERR_TIMEOUT, what, 0);
  dlpg__error_restore(&se, DLPG_OK);
  dlpg__flight_dump_cause(what); /* the dump's reason (work_wait.c aborts next) */
}

/* The store requests made on a failing operation's thread (records, progress of the peers)
 * end within this: a rank cut off from the store (its host stopped) still returns within its
 * deadline + 1 s, with room for a loaded machine's delays (the reads of a reachable store
 * take milliseconds). */
#define DLPG__FAILURE_STORE_S 0.4

dlpg_status_t dlpg__failure_op_failed(struct dlpg_group *g, uint64_t flight_id,
                                      dlpg_status_t st, char *msg, size_t cap) {
  double old = dlpg__store_cap_deadline(dlpg__now() + DLPG__FAILURE_STORE_S);
  st = dlpg__op_failed(g, flight_id, st, msg, cap);
  dlpg__store_cap_deadline(old);
  return st;
}

void dlpg__failure_timed_out(struct dlpg_group *g, uint64_t flight_id, const char *op_name,
                             double timeout_s, char *note, size_t cap) {
  double old = dlpg__store_cap_deadline(dlpg__now() + DLPG__FAILURE_STORE_S);
  dlpg__timed_out(g, flight_id, op_name, timeout_s, note, cap);
  dlpg__store_cap_deadline(old);
}

/* The group is being aborted (first time): record why for the peers unless a failure was
 * already recorded or came from a peer, and dump the flight recorder. */
static void dlpg__failure_on_abort(struct dlpg_group *g, const char *how) {
  if (!g || !g->watch) return;
  char why[DLPG__ERROR_MAX], what[DLPG__ERROR_MAX / 2], me[DLPG__RANK_LABEL_MAX];
  if (!dlpg__failure_remote(g, why, sizeof why)) {
    if (how)
      snprintf(what, sizeof what, "%s", how);
    else
      snprintf(what, sizeof what, "%s aborted the group after an operation of its failed",
               dlpg__rank_label(g, g->rank, me, sizeof me));
    snprintf(why, sizeof why, "group \"%.400s\" aborted: %.500s", g->name, what);
    /* Written by the watcher, so an abort never waits on the store. */
    if (dlpg__fail_enabled(g)) dlpg__record(g, DLPG_ERR_ABORTED, what, 1);
  }
  dlpg__flight_dump_all(g, why);
}

void dlpg__group_abort_because(struct dlpg_group *g, const char *how) {
  /* Before connections are cut: peers learn why (failure.h); the flight recorder's dump. */
  if (dlpg__group_set_aborted(g, 1)) dlpg__failure_on_abort(g, how);
  dlpg__group_cut(g);
}

void dlpg__group_abort(struct dlpg_group *g) { dlpg__group_abort_because(g, NULL); }
