/* The group's reference count (group.h): the caller's handle, each live work and each of
 * the group's threads hold one; the last release frees the group's internals (the backends'
 * states, the store reference, the flight recorder, the failure state). It reaches only
 * what it frees, so the work records and threads that release it sit above it. */
#include <stdatomic.h>
#include <stdlib.h>

#include "core/backend.h"
#include "core/failure.h"
#include "core/flight.h"
#include "core/group.h"
#include "core/job.h"
#include "store/store.h"

void dlpg__group_retain(struct dlpg_group *g) { atomic_fetch_add(&g->refs, 1); }

void dlpg__group_release(struct dlpg_group *g) {
  if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
  /* The last reference: no work, worker thread or handle uses the group any more. */
  for (int i = 0; i < DLPG__GROUP_BACKEND_SLOTS; i++) {
    const dlpg__backend_vtbl_t *vt = g->p2p_state[i] ? dlpg__backend_loaded(i) : NULL;
    if (vt && dlpg__vtbl_has(vt, p2p_destroy)) vt->p2p_destroy(g->p2p_state[i]);
  }
  for (int i = 0; i < DLPG__GROUP_BACKEND_SLOTS; i++)
    if (g->be_state[i]) dlpg__backend_loaded(i)->destroy(g->be_state[i]);
  if (g->store) dlpg__store_release(g->store);
  dlpg__flight_free(g->flight);
  dlpg__watch_free(g->watch);
  dlpg__job_free(g->job);
  pthread_mutex_destroy(&g->be_mu);
  free(g->name);
  free(g);
}
