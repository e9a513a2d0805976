/* The per-group choice between two lines serving one device (backend.h): for host memory, a
 * backend that serves only groups whose ranks share a locality (one host) ahead of one that
 * serves any group. The rule, the same on every rank because every input is in the store:
 *
 *   - each rank publishes the locality string of every line that has one under its job's
 *     scope (core/group/job.h), rank 0 when it makes the group, the others at their first choice,
 *     once their worker joined the job (a store write: it waits for nobody);
 *   - at the group's first operation on that device, its worker reads every rank's string:
 *     the first line (registry order) whose strings are all equal, or that has none, wins;
 *     DLPG_CPU_BACKEND names a line instead (host memory only);
 *   - a winner whose state creation then says DLPG_ERR_UNSUPPORTED (it found the ranks
 *     apart after all; its creation makes every rank see the same outcome) gives way to the
 *     next line, on every rank alike.
 *
 * Sends and receives never wait for this: a line that leaves them out (its kinds mask)
 * passes them to the next line at validation (dlpg__backend_for_kind), and a line that
 * takes them (its table's p2p_state_create) decides per pair, from the two ranks' strings
 * alone (dlpg__backend_where_get), handing a pair it cannot serve to the next line
 * (dlpg__backend_p2p_pass); DLPG_CPU_BACKEND forces sends and receives too
 * (dlpg__backend_p2p_line). Core names no backend here: the lines, their names and their
 * locality functions come from the tables. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/params.h"
#include "base/status.h"
#include "core/lines/backend.h"
#include "core/group/group.h"
#include "core/group/job.h"
#include "core/group/rendezvous.h"

#define DLPG__WHERE_MAX 512
#define DLPG__WHERE_KEY_MAX (DLPG__WHERE_MAX + 600)

/* Whether lines a and b serve a device in common. */
static int dlpg__lines_overlap(int a, int b) {
  const dlpg__backend_entry_t *ea = dlpg__backend_entry(a), *eb = dlpg__backend_entry(b);
  return ea && eb && (ea->devices & eb->devices) != 0;
}

/* slot is the first line serving its devices: the one validation hands out. */
static int dlpg__line_is_first(int slot) {
  for (int i = 0; i < slot; i++)
    if (dlpg__lines_overlap(i, slot)) return 0;
  return 1;
}

/* Whether line i may take the collectives validated for slot: it serves slot's device,
 * is loaded, takes collectives, and runs where slot's operations were routed (the
 * worker, or the caller's thread). */
static const dlpg__backend_vtbl_t *dlpg__candidate(int slot, int i) {
  if (!dlpg__lines_overlap(slot, i)) return NULL;
  const dlpg__backend_vtbl_t *vt = dlpg__backend_loaded(i), *first = dlpg__backend_loaded(slot);
  if (!vt || !first || vt->on_worker != first->on_worker) return NULL;
  if (!dlpg__vtbl_serves(vt, DLPG__OP_ALLREDUCE)) return NULL;
  return vt;
}

/* "<job scope>/where/<backend>/<rank>": one job's, whatever earlier jobs of the name did;
 * for a child that took its parent's records, the parent's scope and rank. */
static void dlpg__where_key(struct dlpg_group *g, const char *backend, int rank, char *key,
                            size_t cap) {
  if (g->where_scope)
    snprintf(key, cap, "%s/where/%s/%d", g->where_scope, backend, g->where_ranks[rank]);
  else
    snprintf(key, cap, "%s/where/%s/%d", dlpg__job_scope(g->job), backend, rank);
}

static int dlpg__any_locality(void) {
  int n = dlpg__backend_count();
  for (int i = 0; i < n; i++) {
    const dlpg__backend_vtbl_t *vt = dlpg__backend_loaded(i);
    if (vt && vt->locality) return 1;
  }
  return 0;
}

void dlpg__backend_where_publish(struct dlpg_group *g) {
  /* One rank shares everything with itself; a rank not in its job yet publishes later. */
  if (g->size < 2 || atomic_load(&g->where_gen) || !dlpg__job_scope(g->job) ||
      !dlpg__any_locality())
    return;
  /* The caller's thread (a split) and the group's worker may both get here: one writes. */
  if (atomic_exchange(&g->where_gen, 1)) return;
  int n = dlpg__backend_count();
  char key[DLPG__WHERE_KEY_MAX];
  for (int i = 0; i < n; i++) {
    const dlpg__backend_vtbl_t *vt = dlpg__backend_loaded(i);
    if (!vt || !vt->locality) continue;
    char where[DLPG__WHERE_MAX];
    /* A rank that cannot say where it is publishes nothing a peer could equal. */
    if (vt->locality(where, sizeof where) != DLPG_OK) {
      DLPG_INFO(INIT, g->rank, "group \"%s\": no locality for %s: %s", g->name, vt->name,
                dlpg__last_error());
      snprintf(where, sizeof where, "?%d", g->rank);
    }
    dlpg__where_key(g, vt->name, g->rank, key, sizeof key);
    /* Posted (core/group/rendezvous.h): a peer polls for it without a get that may time out. */
    dlpg__rdv_post(g->store, key, where);
  }
}

int dlpg__backend_where_inherit(struct dlpg_group *child, struct dlpg_group *parent) {
  if (child->size < 2 || !child->parent_ranks) return 0;
  dlpg__backend_where_publish(parent);
  const char *scope = parent->where_scope ? parent->where_scope : dlpg__job_scope(parent->job);
  if (!atomic_load(&parent->where_gen) || !scope) return 0;
  char *s = strdup(scope);
  int *ranks = malloc(sizeof *ranks * (size_t)child->size);
  if (!s || !ranks) { /* no memory: the child publishes its own */
    free(s);
    free(ranks);
    return 0;
  }
  for (int i = 0; i < child->size; i++) {
    int p = child->parent_ranks[i];
    ranks[i] = parent->where_ranks ? parent->where_ranks[p] : p;
  }
  child->where_scope = s;
  child->where_ranks = ranks;
  atomic_store(&child->where_gen, 1);
  return 1;
}

int dlpg__backend_for_kind(int slot, dlpg__op_kind_t kind) {
  const dlpg__backend_vtbl_t *vt = dlpg__backend_loaded(slot);
  if (!vt || dlpg__vtbl_serves(vt, kind)) return slot;
  int n = dlpg__backend_count();
  for (int i = slot + 1; i < n; i++) {
    const dlpg__backend_vtbl_t *o = dlpg__backend_loaded(i);
    if (o && dlpg__lines_overlap(slot, i) && dlpg__vtbl_serves(o, kind))
      return i;
  }
  return slot; /* nobody else: validation refuses it, naming slot's backend */
}

/* The forced name (DLPG_CPU_BACKEND) for slot's devices, or NULL when the rule decides. */
static const char *dlpg__forced(int slot) {
  const dlpg__backend_entry_t *e = dlpg__backend_entry(slot);
  const char *forced = e && (e->devices & DLPG__DEV_BIT(kDLCPU))
                           ? dlpg__param_str(DLPG__PARAM_CPU_BACKEND) : NULL;
  return forced && forced[0] && strcmp(forced, "auto") != 0 ? forced : NULL;
}

int dlpg__backend_p2p_line(int slot) {
  const char *forced = dlpg__forced(slot);
  if (!forced) return slot;
  int n = dlpg__backend_count();
  for (int i = 0; i < n; i++) {
    const dlpg__backend_vtbl_t *vt = dlpg__backend_loaded(i);
    if (vt && dlpg__lines_overlap(slot, i) && strcmp(vt->name, forced) == 0 &&
        dlpg__vtbl_serves(vt, DLPG__OP_SEND))
      return i;
  }
  return slot; /* an unknown name: the collectives' choice reports it */
}

int dlpg__backend_p2p_forced(int slot) {
  const char *forced = dlpg__forced(slot);
  return forced && strcmp(forced, dlpg__backend_name(slot)) == 0;
}

int dlpg__backend_chosen(struct dlpg_group *g, int slot) {
  if (slot < 0 || slot >= DLPG__GROUP_BACKEND_SLOTS) return slot;
  int c = atomic_load_explicit(&g->be_choice[slot], memory_order_acquire);
  return c ? c - 1 : slot;
}

/* Rank q's published string for vt, polled up to the group's timeout (an abort ends it).
 * A rank publishes at its first collective, so the string may not be there yet: polled
 * with counter probes, never a get that times out (after one, torch's TCPStore client
 * reads the server's late answer as the reply to its next request). */
static dlpg_status_t dlpg__where_read(struct dlpg_group *g, const dlpg__backend_vtbl_t *vt, int q,
                                      char *buf, size_t cap) {
  char key[DLPG__WHERE_KEY_MAX];
  dlpg__where_key(g, vt->name, q, key, sizeof key);
  double deadline = dlpg__now() + g->timeout_s, sleep_s = 0.0005;
  for (;;) {
    if (atomic_load(&g->aborted))
      return dlpg__error(DLPG_ERR_ABORTED, "group \"%s\" was aborted while rank %d chose its "
                         "backend", g->name, g->rank);
    double left = deadline - dlpg__now();
    char who[DLPG__RANK_LABEL_MAX];
    if (left <= 0)
      return dlpg__error(DLPG_ERR_TIMEOUT, "group \"%s\": %s did not publish where it runs "
                         "within %g s (has it made the group?)", g->name,
                         dlpg__rank_label(g, q, who, sizeof who), g->timeout_s);
    int r = dlpg__rdv_try_get(g->store, key, buf, cap);
    if (r > 0) return DLPG_OK;
    if (r < 0)
      return dlpg__error(DLPG_ERR_REMOTE, "group \"%s\": reading where rank %d runs: %s",
                         g->name, q, dlpg__last_error());
    dlpg__sleep(sleep_s < left ? sleep_s : left);
    if (sleep_s < 0.01) sleep_s *= 2;
  }
}

dlpg_status_t dlpg__backend_where_get(const dlpg__be_group_t *gv, const char *line, int q,
                                      char *buf, size_t cap) {
  struct dlpg_group *g = dlpg__group_of_view(gv);
  int n = dlpg__backend_count();
  for (int i = 0; i < n; i++) {
    const dlpg__backend_vtbl_t *vt = dlpg__backend_loaded(i);
    if (vt && vt->locality && strcmp(vt->name, line) == 0) {
      if (!g->where_gen)
        return dlpg__error(DLPG_ERR_UNSUPPORTED, "group \"%s\": rank %d could not publish "
                           "where it runs", g->name, g->rank);
      return dlpg__where_read(g, vt, q, buf, cap);
    }
  }
  return dlpg__error(DLPG_ERR_INTERNAL, "no line named %s publishes a locality", line);
}

/* 1 when vt may serve g by its locality (none, one rank, or every rank's string equal),
 * with the reason appended to why; 0 when a rank is elsewhere; < 0 on a store failure
 * (recorded as the thread's error, status in *st). */
static int dlpg__where_match(struct dlpg_group *g, const dlpg__backend_vtbl_t *vt, char *why,
                             size_t cap, dlpg_status_t *st) {
  size_t len = strlen(why);
  if (!vt->locality) {
    snprintf(why + len, cap - len, "%s serves any group", vt->name);
    return 1;
  }
  if (g->size < 2) {
    snprintf(why + len, cap - len, "%s: one rank", vt->name);
    return 1;
  }
  if (!g->where_gen) {
    snprintf(why + len, cap - len, "%s: this rank could not publish where it runs; ", vt->name);
    return 0;
  }
  char first[DLPG__WHERE_MAX], other[DLPG__WHERE_MAX];
  if ((*st = dlpg__where_read(g, vt, 0, first, sizeof first)) != DLPG_OK) return -1;
  for (int q = 1; q < g->size; q++) {
    if ((*st = dlpg__where_read(g, vt, q, other, sizeof other)) != DLPG_OK) return -1;
    if (strcmp(first, other) != 0 || first[0] == '?') {
      snprintf(why + len, cap - len, "%s: rank %d runs at \"%s\", rank 0 at \"%s\"; ", vt->name,
               q, other, first);
      return 0;
    }
  }
  snprintf(why + len, cap - len, "%s: all %d ranks run at \"%s\"", vt->name, g->size, first);
  return 1;
}

static void dlpg__choice_set(struct dlpg_group *g, int slot, int chosen, int automatic,
                             const char *why) {
  g->be_choice_auto[slot] = automatic;
  atomic_store_explicit(&g->be_choice[slot], chosen + 1, memory_order_release);
  char devices[256];
  dlpg__backend_line_devices(slot, devices, sizeof devices);
  DLPG_INFO(INIT, g->rank, "group \"%s\": collectives on %s tensors run on %s (%s)", g->name,
            devices, dlpg__backend_name(chosen), why);
}

dlpg_status_t dlpg__backend_choose(struct dlpg_group *g, int slot, int *chosen) {
  *chosen = slot;
  if (slot < 0 || slot >= DLPG__GROUP_BACKEND_SLOTS) return DLPG_OK;
  int c = atomic_load_explicit(&g->be_choice[slot], memory_order_acquire);
  if (c) {
    *chosen = c - 1;
    return DLPG_OK;
  }
  /* The localities are read under the job's scope, which the worker joined before calling
   * this: say where this rank runs first (once). */
  dlpg__backend_where_publish(g);
  int n = dlpg__backend_count(), ncand = 0;
  for (int i = 0; i < n; i++) ncand += dlpg__candidate(slot, i) != NULL;
  if (ncand < 2 || !dlpg__line_is_first(slot)) {
    atomic_store_explicit(&g->be_choice[slot], slot + 1, memory_order_release);
    return DLPG_OK;
  }
  const dlpg__backend_entry_t *e = dlpg__backend_entry(slot);
  const char *forced = (e->devices & DLPG__DEV_BIT(kDLCPU))
                           ? dlpg__param_str(DLPG__PARAM_CPU_BACKEND) : NULL;
  if (forced && forced[0] && strcmp(forced, "auto") != 0) {
    char names[128] = "";
    for (int i = 0; i < n; i++) {
      const dlpg__backend_vtbl_t *vt = dlpg__candidate(slot, i);
      if (!vt) continue;
      if (strcmp(vt->name, forced) == 0) {
        char why[160];
        snprintf(why, sizeof why, "DLPG_CPU_BACKEND=%s", forced);
        dlpg__choice_set(g, slot, i, 0, why);
        *chosen = i;
        return DLPG_OK;
      }
      size_t l = strlen(names);
      snprintf(names + l, sizeof names - l, ", %s", vt->name);
    }
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "DLPG_CPU_BACKEND is \"%s\": no backend of that name serves cpu (auto%s)",
                       forced, names);
  }
  char why[2048] = "";
  for (int i = 0; i < n; i++) {
    const dlpg__backend_vtbl_t *vt = dlpg__candidate(slot, i);
    if (!vt) continue;
    dlpg_status_t st = DLPG_OK;
    int m = dlpg__where_match(g, vt, why, sizeof why, &st);
    if (m < 0) return st;
    if (m) {
      dlpg__choice_set(g, slot, i, 1, why);
      *chosen = i;
      return DLPG_OK;
    }
  }
  return dlpg__error(DLPG_ERR_UNSUPPORTED, "group \"%s\": no backend can serve it (%s)", g->name,
                     why);
}

int dlpg__backend_choice_inherit(struct dlpg_group *child, const struct dlpg_group *parent) {
  int any = 0;
  for (int slot = 0; slot < DLPG__GROUP_BACKEND_SLOTS; slot++) {
    int c = atomic_load_explicit(&parent->be_choice[slot], memory_order_acquire);
    if (!c) continue;
    const dlpg__backend_vtbl_t *vt = dlpg__backend_loaded(c - 1);
    /* Forced, or every parent rank's locality equal (a line with one was chosen by the
     * rule): the child's ranks, a subset, would choose the same. A line chosen because the
     * ranks are apart is not inherited: the child's may be together. */
    if (!vt || (parent->be_choice_auto[slot] && !vt->locality)) continue;
    child->be_choice_auto[slot] = parent->be_choice_auto[slot];
    atomic_store_explicit(&child->be_choice[slot], c, memory_order_release);
    DLPG_INFO(INIT, child->rank, "group \"%s\": collectives on host memory run on %s, as on its "
              "parent \"%s\"", child->name, vt->name, parent->name);
    any = 1;
  }
  return any;
}

int dlpg__backend_give_way(struct dlpg_group *g, int slot, int failed, const char *why) {
  if (slot < 0 || slot >= DLPG__GROUP_BACKEND_SLOTS || !g->be_choice_auto[slot]) return -1;
  char reason[2048];
  snprintf(reason, sizeof reason, "%s could not serve the group: %s; ", dlpg__backend_name(failed),
           why ? why : "");
  int n = dlpg__backend_count();
  for (int i = failed + 1; i < n; i++) {
    const dlpg__backend_vtbl_t *vt = dlpg__candidate(slot, i);
    if (!vt) continue;
    dlpg_status_t st = DLPG_OK;
    if (dlpg__where_match(g, vt, reason, sizeof reason, &st) == 1) {
      dlpg__choice_set(g, slot, i, 1, reason);
      return i;
    }
  }
  return -1;
}
