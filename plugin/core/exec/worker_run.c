/* One task of the group's queue run to its end (worker_impl.h), on the worker thread or
 * inline on a caller's thread that waits for it: the op started earlier finished first, the
 * group's line resolved to the backend state that runs the task (core/lines/line_state.c), the
 * backend's issue, the outcome reported to every op's work. */
#include <stdio.h>
#include <string.h>

#include "core/lines/backend.h"
#include "base/log.h"
#include "base/status.h"
#include "core/group/observer.h"
#include "core/group/work_impl.h"
#include "core/exec/worker_impl.h"

void dlpg__worker_run(dlpg__worker_t *w, dlpg__op_t *const *ops, int n) {
  struct dlpg_group *g = w->g;
  /* Ops run in issue order: one started before this task ends first. */
  dlpg__worker_finish_started(w);
  if (atomic_load(&g->aborted) || w->aborted) {
    dlpg__ops_finish(ops, n, DLPG_ERR_ABORTED, "group aborted");
    return;
  }
  /* The ops carry their device's first line; the group's choice (made at its first
   * operation, the same on every rank) says which line runs them. */
  int first = ops[0]->backend, slot = first;
  void *state = NULL;
  dlpg_status_t st = dlpg__line_resolve(g, first, &slot, &state);
  if (st != DLPG_OK) {
    /* A resolution an abort cut short reports the abort. */
    if (atomic_load(&g->aborted) || w->aborted) {
      dlpg__ops_finish(ops, n, DLPG_ERR_ABORTED, "group aborted");
      return;
    }
    char m[DLPG__ERROR_MAX];
    /* Ranks that did not meet within the group's timeout: a failure like an operation's
     * timeout, told to the observer (recorded for the peers with who had not arrived, the
     * group aborted). Other failures of the resolution are final for this line only. */
    if (st == DLPG_ERR_TIMEOUT)
      st = dlpg__worker_outcome(g, ops[0]->work->flight_id, st, m, sizeof m);
    else
      snprintf(m, sizeof m, "%s", dlpg__last_error());
    dlpg__ops_finish(ops, n, st, m);
    return;
  }
  const dlpg__backend_vtbl_t *be = dlpg__backend_loaded(slot);
  if (slot != first || w->chosen[first] != slot + 1) {
    pthread_mutex_lock(&w->mu);
    w->running_slot = slot;      /* what an abort must cut short */
    w->chosen[first] = slot + 1; /* where the eager path may start the group's next ops */
    pthread_mutex_unlock(&w->mu);
    for (int i = 0; i < n; i++) ops[i]->backend = slot;
  }
  /* An abort during the rendezvous found no state to cut short: honour it here. */
  if (atomic_load(&g->aborted) || w->aborted) {
    dlpg__ops_finish(ops, n, DLPG_ERR_ABORTED, "group aborted");
    return;
  }
  DLPG_TRACE(COLL, g->rank, "running %s (%d op%s) on %s", dlpg__op_name(ops[0]->kind), n,
             n == 1 ? "" : "s", be->name);
  for (int i = 0; i < n; i++) {
    ops[i]->state = state;
    dlpg__observe_started(g, ops[i]->work->flight_id, slot);
  }
  dlpg__clear_error();
  st = be->issue(dlpg__op_views(ops), n);
  char m[DLPG__ERROR_MAX];
  st = dlpg__worker_outcome(g, ops[0]->work->flight_id, st, m, sizeof m);
  dlpg__ops_finish(ops, n, st, m);
}
