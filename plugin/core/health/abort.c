/* The mechanics of a group's abort (abort.h), and the abort because of a peer's record
 * (failure_impl.h). They call the worker's queue and the backends' abort, never the failure
 * records or the watcher thread, so that the watcher, which aborts, and the abort of the
 * failure layer (failure.c), which wakes the watcher to write its record, both sit above. */
#include "core/health/abort.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/lines/backend.h"
#include "core/health/failure_impl.h"
#include "core/health/flight.h"
#include "core/group/group.h"
#include "core/group/observer.h"
#include "core/group/split.h"
#include "base/log.h"
#include "core/exec/worker.h"

int dlpg__group_set_aborted(struct dlpg_group *g, int log) {
  if (atomic_exchange(&g->aborted, 1) != 0) return 0;
  if (log) DLPG_WARN(INIT, g->rank, "group \"%s\" aborted", g->name);
  return 1;
}

void dlpg__group_cut(struct dlpg_group *g) {
  /* Waiters notice the flag within one wait slice. */
  dlpg__worker_abort(g);
  pthread_mutex_lock(&g->be_mu);
  for (int i = 0; i < DLPG__GROUP_BACKEND_SLOTS; i++) {
    const dlpg__backend_vtbl_t *be = g->be_state[i] ? dlpg__backend_loaded(i) : NULL;
    /* The worker cuts its own backend's run short; a p2p_direct backend's transfers live
     * in the same state unless they have one of their own (p2p_state_create). */
    if (be && (!be->on_worker || (be->p2p_direct && !dlpg__vtbl_has(be, p2p_state_create))))
      be->abort(g->be_state[i]);
    be = g->p2p_state[i] ? dlpg__backend_loaded(i) : NULL;
    if (be && dlpg__vtbl_has(be, p2p_abort)) be->p2p_abort(g->p2p_state[i]);
  }
  pthread_mutex_unlock(&g->be_mu);
  /* The group's live children of dlpg_group_split go with it (dlpg.h), and theirs with
   * them; never the other way round. */
  struct dlpg_group **kids = NULL;
  int n = dlpg__family_children(g, &kids);
  char how[DLPG__ERROR_MAX / 2];
  if (n) snprintf(how, sizeof how, "its parent, group \"%.400s\", was aborted", g->name);
  for (int i = 0; i < n; i++) {
    /* The whole abort (the failure layer's, through the child's observer: it sits above
     * this file): the child's peers, whose parent may not be aborted yet, learn it. */
    if (!atomic_load(&kids[i]->aborted)) dlpg__observe_abort_because(kids[i], how);
    dlpg__group_release(kids[i]);
  }
  free(kids);
}

void dlpg__fail_cause(struct dlpg_group *g, int rank, const char *msg) {
  struct dlpg__watch *w = g->watch;
  pthread_mutex_lock(&w->mu);
  if (!atomic_load(&w->remote)) {
    char who[DLPG__RANK_LABEL_MAX];
    snprintf(w->cause, sizeof w->cause, "group \"%s\" failed on %s%s: %s", g->name,
             dlpg__rank_label(g, rank, who, sizeof who), rank == g->rank ? " (this rank)" : "",
             msg);
    atomic_store(&w->remote, 1);
  }
  pthread_mutex_unlock(&w->mu);
}

/* The group failed because of rank's record: remember the cause and abort. The peer's record
 * is the cause, so this rank records nothing (as failure.c's abort would not once the cause
 * is set). Its one line names the cause; the log's dump and the abort's own line belong to
 * the rank that failed first, while the dump's file is written here too, so the trace tool
 * reads every rank's record side by side. */
void dlpg__fail_adopt(struct dlpg_group *g, int rank, const char *msg) {
  struct dlpg__watch *w = g->watch;
  int first = !atomic_load(&w->remote);
  dlpg__fail_cause(g, rank, msg);
  if (first) DLPG_WARN(COLL, g->rank, "%s; aborting the group", w->cause);
  if (dlpg__group_set_aborted(g, 0)) {
    char why[DLPG__ERROR_MAX];
    dlpg__failure_remote(g, why, sizeof why);
    dlpg__flight_dump_file_only(g, why);
  }
  dlpg__group_cut(g);
}
