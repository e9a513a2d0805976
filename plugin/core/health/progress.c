/* Progress records (progress.h): their format, and what the peers' records say about a
 * collective this rank is blocked in. A rank is said not to have called it only when its own
 * record says so; a rank without a record (it issued nothing on the group yet, stopped before
 * its watcher wrote, or is cut off from the store) may be anywhere and is named as unknown. */
#include "core/health/progress.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "core/group/group.h"
#include "core/group/op_kind.h"
#include "core/health/failure_impl.h"

/* A peer's watcher publishes a collective it issued within about a second while idle
 * (watch.c: DLPG__WATCH_PUBLISH_S), within 0.2 s while blocked: only a rank blocked longer
 * than this reads records that say for certain whether the peer called its collective. */
#define DLPG__PROGRESS_SETTLED_S 1.5
/* Ranks quoted one by one with their last call; further ones are listed. */
#define DLPG__PROGRESS_QUOTE_MAX 4
#define DLPG__PROGRESS_LIST_MAX 16

static double dlpg__unix_now(void) {
  struct timespec rt;
  clock_gettime(CLOCK_REALTIME, &rt);
  return (double)rt.tv_sec + (double)rt.tv_nsec * 1e-9;
}

void dlpg__progress_format(const dlpg__flight_progress_t *p, char *v, size_t cap) {
  /* The issue time travels as Unix time: the readers' monotonic clocks are their own. */
  double issued = p->coll_issued_at > 0 ? dlpg__unix_now() - (dlpg__now() - p->coll_issued_at) : 0;
  snprintf(v, cap, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %.3f", p->coll_started,
           p->coll_done, p->p2p_started, p->p2p_done, issued);
}

void dlpg__progress_stamp(const char *state, char *rec, size_t cap) {
  snprintf(rec, cap, "%s %.3f", state, dlpg__unix_now());
}

typedef struct dlpg__rank_text {
  char text[400];
  size_t len;
  int n;
} dlpg__rank_text_t;

static void dlpg__rank_text_add(struct dlpg_group *g, dlpg__rank_text_t *l, int r) {
  char num[DLPG__RANK_LABEL_MAX];
  if (l->n < DLPG__PROGRESS_LIST_MAX && l->len < sizeof l->text)
    l->len += (size_t)snprintf(l->text + l->len, sizeof l->text - l->len, "%s%s",
                               l->n ? ", " : "", dlpg__rank_num(g, r, num, sizeof num));
  else if (l->n == DLPG__PROGRESS_LIST_MAX && l->len < sizeof l->text)
    l->len += (size_t)snprintf(l->text + l->len, sizeof l->text - l->len, " and more");
  l->n++;
}

static size_t dlpg__put(char *buf, size_t cap, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static size_t dlpg__put(char *buf, size_t cap, size_t n, const char *fmt, ...) {
  if (n >= cap) return n;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(buf + n, cap - n, fmt, ap);
  va_end(ap);
  return k > 0 ? n + (size_t)k : n;
}

void dlpg__progress_coll_note(struct dlpg_group *g, const dlpg__flight_entry_t *e, int read_max,
                              char *buf, size_t cap, int *read, int *named) {
  const char *op = dlpg__op_name(e->kind);
  dlpg__rank_text_t more = {0}, behind = {0}, unknown = {0}, stuck = {0};
  double stuck_s = 0; /* the most recent of the stuck ranks' records: how long all were silent */
  char behind_detail[400] = "";
  size_t n = 0, nd = 0;
  int quoted = 0;
  *read = 0;
  buf[0] = '\0';
  double unix_now = dlpg__unix_now();
  int settled = e->t_issue > 0 && dlpg__now() - e->t_issue >= DLPG__PROGRESS_SETTLED_S;
  for (int r = 0; r < g->size && *read < read_max; r++) {
    if (r == g->rank) continue;
    (*read)++;
    char v[160];
    unsigned long long cs = 0, cd = 0, ps = 0, pd = 0;
    double at = 0, wrote = 0;
    int f = dlpg__fail_read(g, "progress", r, 0, v, sizeof v)
                ? sscanf(v, "%llu %llu %llu %llu %lf %lf", &cs, &cd, &ps, &pd, &at, &wrote) : 0;
    if (f >= 1 && cs >= e->seq) {
      /* Inside it as of its record, which it has not rewritten since (a record without the
       * write time is a peer of an earlier version: no such claim). */
      double silent = unix_now - wrote;
      if (f == 6 && settled && cd < e->seq && silent >= DLPG__PROGRESS_STALE_S) {
        if (!stuck.n || silent < stuck_s) stuck_s = silent;
        dlpg__rank_text_add(g, &stuck, r);
      }
      continue;
    }
    if (f < 1) {
      dlpg__rank_text_add(g, &unknown, r);
    } else if (f >= 5 && settled) { /* the record says when it last called a collective */
      if (quoted == DLPG__PROGRESS_QUOTE_MAX) {
        dlpg__rank_text_add(g, &more, r);
        continue;
      }
      quoted++;
      char who[DLPG__RANK_LABEL_MAX];
      dlpg__rank_label(g, r, who, sizeof who);
      if (cs == 0)
        n = dlpg__put(buf, cap, n, "; %s has not called %s (coll_seq %" PRIu64 "): it has "
                      "called no collective on the group", who, op, e->seq);
      else
        n = dlpg__put(buf, cap, n, "; %s has not called %s (coll_seq %" PRIu64 "): its "
                      "last call was coll_seq %llu, %.1f s ago", who, op, e->seq, cs,
                      unix_now > at ? unix_now - at : 0.0);
    } else { /* a record that may predate a call (this rank blocked only briefly), or one
              * without the time (a peer of an earlier version) */
      char who[DLPG__RANK_LABEL_MAX];
      if (behind.n < 4 && nd < sizeof behind_detail)
        nd = dlpg__put(behind_detail, sizeof behind_detail, nd, "%s%s last started "
                       "coll_seq %llu", behind.n ? ", " : "",
                       dlpg__rank_label(g, r, who, sizeof who), cs);
      dlpg__rank_text_add(g, &behind, r);
    }
  }
  if (more.n)
    n = dlpg__put(buf, cap, n, "; rank%s %s ha%s not called it either", more.n > 1 ? "s" : "",
                  more.text, more.n > 1 ? "ve" : "s");
  if (behind.n)
    n = dlpg__put(buf, cap, n, "; rank%s %s had not reached coll_seq %" PRIu64 " (%s%s)",
                  behind.n > 1 ? "s" : "", behind.text, e->seq, behind_detail,
                  behind.n > 4 ? ", ..." : "");
  if (unknown.n)
    n = dlpg__put(buf, cap, n, "; rank%s %s published no progress, so whether %s reached "
                  "coll_seq %" PRIu64 " is unknown", unknown.n > 1 ? "s" : "", unknown.text,
                  unknown.n > 1 ? "they" : "it", e->seq);
  if (stuck.n)
    n = dlpg__put(buf, cap, n, "; rank%s %s reached coll_seq %" PRIu64 " but ha%s not rewritten "
                  "%s progress record%s for %.1f s (a rank blocked in an operation does every "
                  "%g s): %s may be stopped, hung or starved of CPU", stuck.n > 1 ? "s" : "",
                  stuck.text, e->seq, stuck.n > 1 ? "ve" : "s", stuck.n > 1 ? "their" : "its",
                  stuck.n > 1 ? "s" : "", stuck_s, DLPG__PROGRESS_BEAT_S,
                  stuck.n > 1 ? "they" : "it");
  *named = quoted + more.n + behind.n + unknown.n + stuck.n;
}
