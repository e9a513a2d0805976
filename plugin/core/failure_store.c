/* Failure propagation: the store records (failure_impl.h). Every call has a short timeout
 * or fails at once when the store is gone, and runs off the hot path (failure paths and the
 * watcher thread only). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/failure_impl.h"
#include "core/group.h"
#include "base/log.h"
#include "base/params.h"
#include "base/status.h"

/* Propagation applies to groups of two or more ranks, unless DLPG_PROPAGATE_FAILURES=0. */
int dlpg__fail_enabled(struct dlpg_group *g) {
  if (!g || !g->watch || g->size < 2) return 0;
  long on = 1;
  return !dlpg__param_long(DLPG__PARAM_PROPAGATE_FAILURES, &on) || on != 0;
}

/* ------------------------------------------------------------------ store access */

/* The incarnation number, taken from the store once (> 0), or 0 when the store failed. */
int64_t dlpg__fail_gen(struct dlpg_group *g) {
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
static int dlpg__fail_key(struct dlpg_group *g, const char *what, int rank, char *key, size_t cap) {
  int64_t gen = dlpg__fail_gen(g);
  if (!gen) return 0;
  if (rank >= 0) snprintf(key, cap, "%s/dlpg/%s/%" PRId64 "/%d", g->name, what, gen, rank);
  else snprintf(key, cap, "%s/dlpg/%s/%" PRId64, g->name, what, gen);
  return 1;
}

void dlpg__fail_put(struct dlpg_group *g, const char *what, int rank, const char *val) {
  char key[DLPG__ERROR_MAX];
  if (!dlpg__fail_key(g, what, rank, key, sizeof key)) return;
  if (dlpg_store_set(g->store, key, val, strlen(val)) != DLPG_OK)
    DLPG_WARN(INIT, g->rank, "group \"%s\": cannot write %s: %s", g->name, key,
              dlpg__last_error());
}

/* Read key into buf (NUL-terminated). wait_s > 0: block up to that long for it; else only
 * read it if it exists. 1 when read. */
int dlpg__fail_read(struct dlpg_group *g, const char *what, int rank, double wait_s,
                      char *buf, size_t cap) {
  char key[DLPG__ERROR_MAX];
  if (!dlpg__fail_key(g, what, rank, key, sizeof key)) return 0;
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
int dlpg__fail_parse(const char *v, int *rank, const char **msg) {
  int st = 0;
  if (sscanf(v, "%d %d", rank, &st) != 2) return 0;
  const char *nl = strchr(v, '\n');
  *msg = nl ? nl + 1 : "";
  return 1;
}

/* Write this rank's failed record unless one was written here or by a peer already. */
void dlpg__fail_record_now(struct dlpg_group *g, const char *val) {
  char old[DLPG__ERROR_MAX + 64];
  if (dlpg__fail_read(g, "failed", -1, 0, old, sizeof old)) return; /* the first failure stands */
  dlpg__fail_put(g, "failed", -1, val);
}
