/* The group's reference count (group.h): the caller's handle, each live work and each of
 * the group's threads hold one; the last release frees the group. What its parts hold (the
 * backends' states, the diagnostics) is freed by the teardown its creator set, so this file
 * reaches nothing above the group, and everything that holds a reference may sit above it. */
#include <stdatomic.h>
#include <stdlib.h>

#include "core/group/group.h"
#include "core/group/job.h"
#include "store/store.h"

void dlpg__group_retain(struct dlpg_group *g) { atomic_fetch_add(&g->refs, 1); }

void dlpg__group_release(struct dlpg_group *g) {
  if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
  /* The last reference: no work, worker thread or handle uses the group any more. */
  if (g->teardown) g->teardown(g);
  if (g->store) dlpg__store_release(g->store);
  dlpg__job_free(g->job);
  pthread_mutex_destroy(&g->be_mu);
  pthread_mutex_destroy(&g->worker_mu);
  free(g->name);
  free(g);
}
