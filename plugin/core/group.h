/* The group object behind dlpg_group_t, visible to the backends (they read the store, the
 * rank, the size, the name, the deadline and the abort flag). */
#ifndef DLPG_CORE_GROUP_H_
#define DLPG_CORE_GROUP_H_

#include <pthread.h>
#include <stdatomic.h>
#include "dlpg/dlpg.h"
#include "core/clock.h"
#include "core/op.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dlpg__gloo_ctx;
struct dlpg__nccl;
struct dlpg__worker;

struct dlpg_group {
  dlpg_store_t *store;   /* retained */
  int rank, size;
  double timeout_s;      /* resolved: option > DLPG_TIMEOUT > 300 */
  char *name;            /* resolved key prefix */
  atomic_int aborted;
  atomic_int refs;       /* the caller's handle, each live work, the worker */

  /* CPU path: one worker thread runs Gloo operations in submission order; the Gloo
   * context is created lazily by that thread at its first operation. */
  struct dlpg__worker *worker;
  struct dlpg__gloo_ctx *gloo;

  /* CUDA path, created lazily at the first CUDA operation. */
  pthread_mutex_t nccl_mu;
  struct dlpg__nccl *nccl;
};


void dlpg__group_retain(struct dlpg_group *g);
void dlpg__group_release(struct dlpg_group *g);

#ifdef __cplusplus
}
#endif
#endif
