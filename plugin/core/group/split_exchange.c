/* The exchange of a split's colors and keys (split.h), through the parent's store under its
 * job's scope, "<scope>/s<seq>": each rank posts "<color> <key>" under r<rank> and counts
 * itself in n; rank 0 reads them once n says all are there and posts the table under t;
 * the others read t. A split costs each rank three store writes and one read of the table,
 * rank 0 one read per rank: far less than a new group's job admission. A rank that did not
 * split leaves its r<rank> unposted, which is how a timeout names it. Keys are deleted
 * once read (best effort: a host store may not delete). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/status.h"
#include "core/group/group.h"
#include "core/group/job.h"
#include "core/group/rendezvous.h"
#include "core/group/split.h"
#include "store/store.h"

/* "<scope>/s<seq>", then a key under it (both well below the rendezvous helpers' limit). */
#define SPLIT_BASE_MAX (DLPG__JOB_SCOPE_MAX + 16)
#define SPLIT_KEY_MAX (SPLIT_BASE_MAX + 32)
/* Longest "<color> <key>" and one table entry. */
#define SPLIT_ENTRY_MAX 32
/* Polls start fast (ranks of one split arrive together) and back off to SPLIT_POLL_S, then,
 * after SPLIT_BUSY_S, to SPLIT_LATE_POLL_S. */
#define SPLIT_POLL_FIRST_S 0.00005
#define SPLIT_POLL_S 0.002
#define SPLIT_BUSY_S 1.0
#define SPLIT_LATE_POLL_S 0.01

typedef struct split_ctx {
  struct dlpg_group *g;
  const char *fn;
  int seq;
  double deadline, t0, sleep_s;
  char base[SPLIT_BASE_MAX];
} split_ctx_t;

static void split_key(const split_ctx_t *c, const char *what, int r, char *key, size_t cap) {
  if (r >= 0) snprintf(key, cap, "%s/%s%d", c->base, what, r);
  else snprintf(key, cap, "%s/%s", c->base, what);
}

/* One wait step: 0 to poll again, else the status that ends the exchange (DLPG_ERR_TIMEOUT
 * is left to the caller, which names who is missing). */
static dlpg_status_t split_wait(split_ctx_t *c, int *timed_out) {
  if (atomic_load(&c->g->aborted))
    return dlpg__error(DLPG_ERR_ABORTED, "%s: group \"%s\" was aborted during split %d", c->fn,
                       c->g->name, c->seq);
  double now = dlpg__now(), left = c->deadline - now;
  if (left <= 0) {
    *timed_out = 1;
    return DLPG_ERR_TIMEOUT;
  }
  dlpg__sleep(c->sleep_s < left ? c->sleep_s : left);
  double cap = now - c->t0 < SPLIT_BUSY_S ? SPLIT_POLL_S : SPLIT_LATE_POLL_S;
  c->sleep_s = c->sleep_s * 2 < cap ? c->sleep_s * 2 : cap;
  return DLPG_OK;
}

/* The timeout's message: which parent ranks had not posted their color (those that had not
 * called dlpg_group_split for this split). */
static dlpg_status_t split_timed_out(split_ctx_t *c, const char *waited_for) {
  struct dlpg_group *g = c->g;
  char list[256] = "", key[SPLIT_KEY_MAX];
  size_t len = 0;
  int missing = 0, unknown = 0;
  double old = dlpg__store_cap_deadline(dlpg__now() + 1.0); /* the report is bounded too */
  for (int r = 0; r < g->size; r++) {
    if (r == g->rank) continue;
    split_key(c, "r", r, key, sizeof key);
    int64_t n = dlpg__rdv_count(g->store, key);
    if (n < 0) {
      unknown = 1;
      break;
    }
    if (n > 0) continue;
    if (missing < 16 && len < sizeof list)
      len += (size_t)snprintf(list + len, sizeof list - len, "%s%d", missing ? ", " : "", r);
    else if (missing == 16 && len < sizeof list)
      len += (size_t)snprintf(list + len, sizeof list - len, " and more");
    missing++;
  }
  dlpg__store_cap_deadline(old);
  if (unknown || !missing)
    return dlpg__error(DLPG_ERR_TIMEOUT, "%s: group \"%s\": rank %d timed out after %g s "
                       "waiting for %s of split %d (every rank of the group must call "
                       "dlpg_group_split, in the same order)", c->fn, g->name, g->rank,
                       g->timeout_s, waited_for, c->seq);
  return dlpg__error(DLPG_ERR_TIMEOUT, "%s: group \"%s\": rank%s %s of the group did not call "
                     "dlpg_group_split (split %d of the group on rank %d) within %g s; every "
                     "rank of the group must call it, as often and in the same order", c->fn,
                     g->name, missing > 1 ? "s" : "", list, c->seq, g->rank, g->timeout_s);
}

/* Rank 0: every rank's entry, then the table. */
static dlpg_status_t split_collect(split_ctx_t *c, int *table) {
  struct dlpg_group *g = c->g;
  char key[SPLIT_KEY_MAX], v[SPLIT_ENTRY_MAX + 8];
  split_key(c, "n", -1, key, sizeof key);
  for (;;) {
    int64_t n = dlpg__rdv_count(g->store, key);
    if (n < 0)
      return dlpg__error(DLPG_ERR_REMOTE, "%s: group \"%s\": the store failed during split "
                         "%d: %s", c->fn, g->name, c->seq, dlpg__last_error());
    if (n >= g->size) break;
    int timed_out = 0;
    dlpg_status_t st = split_wait(c, &timed_out);
    if (timed_out) return split_timed_out(c, "the other ranks' colors");
    if (st != DLPG_OK) return st;
  }
  size_t cap = (size_t)g->size * SPLIT_ENTRY_MAX + 1, len = 0;
  char *t = malloc(cap);
  if (!t) return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", c->fn);
  for (int r = 1; r < g->size; r++) {
    split_key(c, "r", r, key, sizeof key);
    if (dlpg__rdv_try_get(g->store, key, v, sizeof v) != 1 ||
        sscanf(v, "%d %d", &table[2 * r], &table[2 * r + 1]) != 2) {
      free(t);
      return dlpg__error(DLPG_ERR_REMOTE, "%s: group \"%s\": cannot read rank %d's color of "
                         "split %d from the store (\"%.32s\"): %s", c->fn, g->name, r, c->seq,
                         v, dlpg__last_error());
    }
  }
  for (int r = 0; r < g->size; r++)
    len += (size_t)snprintf(t + len, cap - len, "%d %d ", table[2 * r], table[2 * r + 1]);
  split_key(c, "t", -1, key, sizeof key);
  dlpg__rdv_post(g->store, key, t);
  free(t);
  /* Rank 0 alone read the entries: they go now. */
  for (int r = 1; r < g->size; r++) {
    split_key(c, "r", r, key, sizeof key);
    dlpg__rdv_unpost(g->store, key);
  }
  split_key(c, "n", -1, key, sizeof key);
  dlpg_store_delete_key(g->store, key, NULL);
  return DLPG_OK;
}

/* Ranks != 0: the table rank 0 posted. */
static dlpg_status_t split_read_table(split_ctx_t *c, int *table) {
  struct dlpg_group *g = c->g;
  char key[SPLIT_KEY_MAX];
  size_t cap = (size_t)g->size * SPLIT_ENTRY_MAX + 1;
  char *t = malloc(cap);
  if (!t) return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", c->fn);
  split_key(c, "t", -1, key, sizeof key);
  for (;;) {
    int r = dlpg__rdv_try_get(g->store, key, t, cap);
    if (r > 0) break;
    dlpg_status_t st = DLPG_OK;
    int timed_out = 0;
    if (r < 0)
      st = dlpg__error(DLPG_ERR_REMOTE, "%s: group \"%s\": the store failed during split %d: "
                       "%s", c->fn, g->name, c->seq, dlpg__last_error());
    else
      st = split_wait(c, &timed_out);
    if (timed_out) st = split_timed_out(c, "rank 0's table of colors");
    if (st != DLPG_OK) {
      free(t);
      return st;
    }
  }
  const char *p = t;
  for (int r = 0; r < g->size; r++) {
    int n = 0;
    if (sscanf(p, "%d %d %n", &table[2 * r], &table[2 * r + 1], &n) < 2 || n <= 0) {
      free(t);
      return dlpg__error(DLPG_ERR_REMOTE, "%s: group \"%s\": rank 0's table of split %d "
                         "lists fewer than %d ranks", c->fn, g->name, c->seq, g->size);
    }
    p += n;
  }
  free(t);
  /* The last reader deletes the table. */
  int64_t done = 0;
  split_key(c, "d", -1, key, sizeof key);
  if (dlpg_store_add(g->store, key, 1, &done) == DLPG_OK && done == g->size - 1) {
    dlpg_store_delete_key(g->store, key, NULL);
    split_key(c, "t", -1, key, sizeof key);
    dlpg__rdv_unpost(g->store, key);
  }
  return DLPG_OK;
}

dlpg_status_t dlpg__split_exchange(struct dlpg_group *g, const char *fn, int seq, int color,
                                   int key, double deadline, int *table) {
  table[2 * g->rank] = color;
  table[2 * g->rank + 1] = key;
  if (g->size == 1) return DLPG_OK;
  const char *scope = dlpg__job_scope(g->job);
  if (!scope) return dlpg__error(DLPG_ERR_INTERNAL, "%s: the group has no job", fn);
  split_ctx_t c = {.g = g, .fn = fn, .seq = seq, .deadline = deadline, .t0 = dlpg__now(),
                   .sleep_s = SPLIT_POLL_FIRST_S};
  snprintf(c.base, sizeof c.base, "%s/s%d", scope, seq);
  dlpg__saved_error_t se;
  dlpg__error_save(&se);
  dlpg_status_t st = DLPG_OK;
  char k[SPLIT_KEY_MAX], v[SPLIT_ENTRY_MAX];
  if (g->rank != 0) {
    snprintf(v, sizeof v, "%d %d", color, key);
    split_key(&c, "r", g->rank, k, sizeof k);
    dlpg__rdv_post(g->store, k, v);
    split_key(&c, "n", -1, k, sizeof k);
    st = dlpg_store_add(g->store, k, 1, NULL);
    if (st == DLPG_OK) st = split_read_table(&c, table);
  } else {
    split_key(&c, "r", 0, k, sizeof k);
    dlpg__rdv_post(g->store, k, "0"); /* only to be named present by a timeout */
    split_key(&c, "n", -1, k, sizeof k);
    st = dlpg_store_add(g->store, k, 1, NULL);
    if (st == DLPG_OK) st = split_collect(&c, table);
    split_key(&c, "r", 0, k, sizeof k);
    if (st == DLPG_OK) dlpg__rdv_unpost(g->store, k);
  }
  if (st == DLPG_OK) dlpg__error_restore(&se, DLPG_OK);
  return st;
}
