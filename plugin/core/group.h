/* The group object behind dlpg_group_t, visible to the backends (they read the store, the
 * rank, the size, the name, the deadline and the abort flag). */
#ifndef DLPG_CORE_GROUP_H_
#define DLPG_CORE_GROUP_H_

#include <pthread.h>
#include <stdatomic.h>
#include "dlpg/dlpg.h"
#include "base/clock.h"
#include "core/op.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dlpg__worker;

/* One state slot per registered backend (core/backend.h). */
#define DLPG__GROUP_BACKEND_SLOTS 4

struct dlpg_group {
  dlpg_store_t *store;   /* retained */
  int rank, size;
  double timeout_s;      /* resolved (base/timeout.h), > 0 */
  char *name;            /* resolved key prefix */
  atomic_int aborted;
  atomic_int refs;       /* the caller's handle, each live work, the worker */

  /* One worker thread runs the operations of on_worker backends (Gloo) in submission
   * order; it creates their state lazily at its first operation. */
  struct dlpg__worker *worker;

  /* Each backend's per-group state, indexed by registry slot, created lazily at the
   * group's first operation on that backend: by the worker for on_worker backends, else
   * under be_mu. Set once and read lock-free. */
  pthread_mutex_t be_mu;
  void *be_state[DLPG__GROUP_BACKEND_SLOTS];

  /* Core only (appended: a module never reads them). The flight recorder (core/flight.h)
   * and the failure watcher (core/failure.h); either may be NULL (no memory). */
  struct dlpg__flight *flight;
  struct dlpg__watch *watch;
};


void dlpg__group_retain(struct dlpg_group *g);
void dlpg__group_release(struct dlpg_group *g);

#ifdef __cplusplus
}
#endif
#endif
