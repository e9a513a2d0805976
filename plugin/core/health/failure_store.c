/* Failure propagation: the store records (failure_impl.h). Every call has a short timeout
 * or fails at once when the store is gone, and runs off the hot path (failure paths and the
 * watcher thread only). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/health/failure_impl.h"
#include "core/group/group.h"
#include "core/group/job.h"
#include "store/store.h"
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

/* The job's number once this rank is in its job (job.h), else 0: a rank that never joined
 * its job has no records to write or read (never blocks). */
int64_t dlpg__fail_gen(struct dlpg_group *g) { return dlpg__job_id(g->job); }

/* "<job scope>/<what>" (rank >= 0: "/<rank>" appended); 0 outside a job. */
static int dlpg__fail_key(struct dlpg_group *g, const char *what, int rank, char *key, size_t cap) {
  const char *scope = dlpg__job_scope(g->job);
  if (!scope) return 0;
  if (rank >= 0) snprintf(key, cap, "%s/%s/%d", scope, what, rank);
  else snprintf(key, cap, "%s/%s", scope, what);
  return 1;
}

void dlpg__fail_put(struct dlpg_group *g, const char *what, int rank, const char *val) {
  char key[DLPG__ERROR_MAX];
  if (!dlpg__fail_key(g, what, rank, key, sizeof key)) return;
  if (dlpg_store_set(g->store, key, val, strlen(val)) != DLPG_OK)
    DLPG_WARN(INIT, g->rank, "group \"%s\": cannot write %s: %s", g->name, key,
              dlpg__last_error());
}

/* A record read's store status: the store answered (a record present or absent, a wait
 * that timed out, a host store without check) or did not (it is gone: DLPG_ERR_REMOTE, or
 * an I/O failure). */
static void dlpg__fail_note_store(struct dlpg_group *g, dlpg_status_t st) {
  int lost = st == DLPG_ERR_REMOTE || st == DLPG_ERR_SYSTEM;
  atomic_store(&g->watch->store_lost, lost);
}

/* Read key into buf (NUL-terminated). wait_s > 0: block up to that long for it; else only
 * read it if it exists. 1 when read. */
int dlpg__fail_read(struct dlpg_group *g, const char *what, int rank, double wait_s,
                      char *buf, size_t cap) {
  char key[DLPG__ERROR_MAX];
  if (!dlpg__fail_key(g, what, rank, key, sizeof key)) return 0;
  const char *k = key;
  int exists = 0;
  dlpg_status_t st = DLPG_OK;
  if (wait_s <= 0 && ((st = dlpg_store_check(g->store, &k, 1, &exists)) != DLPG_OK || !exists)) {
    dlpg__fail_note_store(g, st);
    return 0;
  }
  size_t len = 0;
  st = dlpg_store_get(g->store, key, wait_s > 0 ? wait_s : 1.0, buf, cap - 1, &len);
  dlpg__fail_note_store(g, st);
  if (st != DLPG_OK) return 0;
  buf[len < cap - 1 ? len : cap - 1] = '\0';
  return 1;
}

int dlpg__fail_store_lost(struct dlpg_group *g) {
  return g->watch && atomic_load(&g->watch->store_lost);
}

void dlpg__fail_store_name(struct dlpg_group *g, char *buf, size_t cap) {
  const char *host = dlpg__store_host(g->store);
  int port = 0;
  dlpg__saved_error_t se;
  dlpg__error_save(&se);
  if (host && dlpg_store_port(g->store, &port) == DLPG_OK && port > 0)
    snprintf(buf, cap, "the store at %s:%d", host, port);
  else if (host)
    snprintf(buf, cap, "the store at %s", host);
  else
    snprintf(buf, cap, "the store");
  dlpg__error_restore(&se, DLPG_OK);
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
