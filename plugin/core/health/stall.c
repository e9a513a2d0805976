/* Stall warnings (stall.h). The wording is the timeout headline's (progress.h): a rank is
 * named as not having called the operation only when its own progress record says so; a
 * rank without a record (no operation issued yet, stopped before its watcher wrote, cut off
 * from the store) is named as one whose progress is unknown. Point-to-point sequence
 * numbers are per rank, so for a send or receive the peer's record is quoted as it is. */
#include "core/health/stall.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "base/params.h"
#include "base/status.h"
#include "core/health/failure_impl.h"
#include "core/health/progress.h"
#include "core/group/group.h"
#include "core/lines/tensor.h"

/* The default: a minute, or half the group's timeout when that is shorter. */
#define DLPG__STALL_DEFAULT_S 60.0
/* The shortest threshold: a peer that reached the operation publishes its progress after
 * about 0.2 s of blocking (watch.c), so an earlier look could call it late. */
#define DLPG__STALL_MIN_S 0.5
/* Most peers whose records one warning reads (one store round trip each). */
#define DLPG__STALL_READ_MAX 64

/* DLPG_STALL_WARN_S parsed once (an unparsable or negative value is reported once, then the
 * default applies): < 0 unset, else the threshold (0: off). */
static pthread_once_t dlpg__stall_once = PTHREAD_ONCE_INIT;
static double dlpg__stall_param = -1;

static void dlpg__stall_load(void) {
  double v = 0;
  if (!dlpg__param_double_min(DLPG__PARAM_STALL_WARN_S, 0, 1,
                              "0 (off) or a number of seconds > 0", &v))
    return;
  dlpg__stall_param = v == 0 ? 0 : v < DLPG__STALL_MIN_S ? DLPG__STALL_MIN_S : v;
}

double dlpg__stall_after_s(const struct dlpg_group *g) {
  pthread_once(&dlpg__stall_once, dlpg__stall_load);
  if (dlpg__stall_param >= 0) return dlpg__stall_param;
  double half = g->timeout_s / 2;
  return half < DLPG__STALL_DEFAULT_S ? half : DLPG__STALL_DEFAULT_S;
}

/* The collective case: what the peers' progress records say (progress.h). */
static void dlpg__stall_coll_note(struct dlpg_group *g, const dlpg__flight_entry_t *e,
                                  char *buf, size_t cap) {
  int read = 0, named = 0;
  dlpg__progress_coll_note(g, e, DLPG__STALL_READ_MAX, buf, cap, &read, &named);
  size_t n = strlen(buf);
  if (!named && n < cap)
    n += (size_t)snprintf(buf + n, cap - n,
                          "; the progress records of %s show coll_seq %" PRIu64 " started",
                          read < g->size - 1 ? "the ranks read" : "every other rank", e->seq);
  if (read < g->size - 1 && n < cap)
    snprintf(buf + n, cap - n, "; the records of %d ranks were not read", g->size - 1 - read);
}

/* The point-to-point case: the peer's record as it is (its p2p numbers are its own). */
static void dlpg__stall_p2p_note(struct dlpg_group *g, const dlpg__flight_entry_t *e,
                                 char *buf, size_t cap) {
  char v[128], who[DLPG__RANK_LABEL_MAX];
  unsigned long long cs = 0, cd = 0, ps = 0, pd = 0;
  dlpg__rank_label(g, e->peer, who, sizeof who);
  const char *other = e->kind == DLPG__OP_SEND ? "receive" : "send";
  if (e->peer >= 0 && e->peer < g->size &&
      dlpg__fail_read(g, "progress", e->peer, 0, v, sizeof v) &&
      sscanf(v, "%llu %llu %llu %llu", &cs, &cd, &ps, &pd) == 4) {
    snprintf(buf, cap,
             "; %s's last progress record: coll_seq %llu started, %llu completed; %llu "
             "point-to-point operations started, %llu completed (whether it posted the "
             "matching %s is not known from these counts)",
             who, cs, cd, ps, pd, other);
  } else {
    snprintf(buf, cap,
             "; %s published no progress, so whether it posted the matching %s is unknown",
             who, other);
  }
}

void dlpg__stall_check(struct dlpg_group *g, const dlpg__flight_progress_t *p, double blocked_s,
                       uint64_t *warned) {
  const dlpg__flight_entry_t *e = &p->oldest;
  if (!e->id || *warned == e->id) return;
  double after = dlpg__stall_after_s(g);
  if (after <= 0 || blocked_s < after) return;
  /* The watcher's look at the failure record took a while: the operation may be done. */
  dlpg__flight_entry_t now;
  if (!dlpg__flight_get(g, e->id, &now) ||
      (now.state != DLPG__FL_QUEUED && now.state != DLPG__FL_STARTED))
    return;
  *warned = e->id;
  if (!dlpg__log_enabled(DLPG__LOG_WARN, e->p2p ? DLPG__SUB_P2P : DLPG__SUB_COLL)) return;
  dlpg__saved_error_t se;
  dlpg__error_save(&se);
  char what[200], note[640], peer[DLPG__RANK_LABEL_MAX];
  dlpg__rank_label(g, e->peer, peer, sizeof peer);
  const char *dt = e->dtype >= 0 ? dlpg__dtype_name((dlpg__dtype_t)e->dtype) : NULL;
  if (e->p2p && e->peer < 0) /* a receive from any source */
    snprintf(what, sizeof what, "%s from any rank (p2p_seq %" PRIu64 " on this rank, %s x%" PRId64 ")",
             dlpg__op_name(e->kind), e->seq, dt ? dt : "-", e->count);
  else if (e->p2p)
    snprintf(what, sizeof what, "%s %s %s (p2p_seq %" PRIu64 " on this rank, %s x%" PRId64 ")",
             dlpg__op_name(e->kind), e->kind == DLPG__OP_SEND ? "to" : "from", peer, e->seq,
             dt ? dt : "-", e->count);
  else if (dt)
    snprintf(what, sizeof what, "%s (coll_seq %" PRIu64 ", %s x%" PRId64 ")",
             dlpg__op_name(e->kind), e->seq, dt, e->count);
  else
    snprintf(what, sizeof what, "%s (coll_seq %" PRIu64 ")", dlpg__op_name(e->kind), e->seq);
  if (e->p2p) dlpg__stall_p2p_note(g, e, note, sizeof note);
  else dlpg__stall_coll_note(g, e, note, sizeof note);
  dlpg__error_restore(&se, DLPG_OK);
  dlpg__log(DLPG__LOG_WARN, e->p2p ? DLPG__SUB_P2P : DLPG__SUB_COLL, g->rank,
            "group \"%s\": %s still blocked after %.1f s (DLPG_STALL_WARN_S=%g; the group's "
            "timeout is %g s)%s",
            g->name, what, blocked_s, after, g->timeout_s, note);
}
