/* Group lifecycle (dlpg.h, "Group"): create (cheap, no connection), rank/size, abort and
 * destroy, the public entry points (core's own code calls dlpg__group_abort, failure.h).
 * The reference count that keeps the group's internals alive while work handles or a stuck
 * worker thread still use them is group_ref.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/door/group_make.h"
#include "core/lines/backend.h"
#include "core/health/failure.h"
#include "core/group/group.h"
#include "core/group/job.h"
#include "core/group/split.h"
#include "base/log.h"
#include "base/params.h"
#include "base/status.h"
#include "core/exec/worker.h"
#include "store/launcher.h"
#include "store/store.h"

dlpg_status_t dlpg_group_create(dlpg_store_t *store, int rank, int world_size,
                                const dlpg_group_options_t *options, dlpg_group_t **group) {
  static const char fn[] = "dlpg_group_create";
  DLPG_ARG_CHECK(store != NULL, "%s: store is NULL", fn);
  DLPG_ARG_CHECK(group != NULL, "%s: group is NULL", fn);
  DLPG_ARG_CHECK(world_size >= 1, "%s: world_size is %d (must be >= 1)", fn, world_size);
  DLPG_ARG_CHECK(rank >= 0 && rank < world_size, "%s: rank is %d but world_size is %d (rank "
                 "must be in [0, %d))", fn, rank, world_size, world_size);
  dlpg_group_options_t o;
  DLPG_CHECK(dlpg__group_read_options(fn, options, &o));
  double timeout_s = 0;
  DLPG_CHECK(dlpg__group_resolve_timeout(fn, &o, &timeout_s));

  const char *name = (o.name && o.name[0]) ? o.name : dlpg__param_str(DLPG__PARAM_GROUP_NAME);
  if (!name || !name[0]) name = "dlpg";
  size_t nlen = strlen(name);
  DLPG_ARG_CHECK(nlen <= DLPG__GROUP_NAME_MAX, "%s: name has %zu bytes (at most %d)", fn, nlen,
                 DLPG__GROUP_NAME_MAX);

  struct dlpg_group *g = NULL;
  DLPG_CHECK(dlpg__group_make(fn, store, rank, world_size, timeout_s, name, &g));
  dlpg_status_t st = dlpg__group_set_comm(fn, g, &o, NULL);
  if (st != DLPG_OK) {
    dlpg__group_release(g);
    return st;
  }
  /* Rank 0 takes the job's number now (the others ask it for the number at their first
   * operation, job.h), then says where it runs, for the group's choice of backend
   * (backend_choice.c; the others say so when they join): creation waits for nobody. */
  dlpg__job_start(g);
  dlpg__backend_where_publish(g);
  DLPG_INFO(INIT, rank, "group \"%s\" created: rank %d of %d, timeout %g s", g->name, rank,
            world_size, timeout_s);
  *group = g;
  return DLPG_OK;
}

/* The launcher's rank and size (store/launcher.h reads its variables), with a message
 * naming what is missing; then the group on the launcher's store (env://). */
dlpg_status_t dlpg_group_create_from_env(const dlpg_group_options_t *options,
                                         dlpg_group_t **group) {
  static const char fn[] = "dlpg_group_create_from_env";
  DLPG_ARG_CHECK(group != NULL, "%s: group is NULL", fn);
  dlpg__launch_t l;
  dlpg_status_t st = dlpg__launch_detect_env(0, &l);
  if (st != DLPG_OK) return dlpg__error_prefix(st, fn);
  if (!l.launcher)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "%s: no launcher's variables are set: RANK and WORLD_SIZE (torchrun, "
                       "with MASTER_ADDR and MASTER_PORT), OMPI_COMM_WORLD_RANK (Open MPI's "
                       "mpirun), PMI_RANK (MPICH's mpiexec) or SLURM_PROCID (Slurm's srun)", fn);
  if (l.size < 1)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "%s: %s set this process's rank (%d) but not the number of ranks "
                       "(WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE or SLURM_NTASKS)", fn,
                       l.launcher, l.rank);
  dlpg_group_options_t o;
  DLPG_CHECK(dlpg__group_read_options(fn, options, &o));
  double timeout_s = 0;
  DLPG_CHECK(dlpg__group_resolve_timeout(fn, &o, &timeout_s));

  dlpg_store_t *store = NULL;
  st = dlpg_store_open("env://", timeout_s, &store);
  if (st != DLPG_OK) return dlpg__error_prefix(st, fn);
  st = dlpg_group_create(store, l.rank, l.size, &o, group);
  /* The group holds its own reference to the store. */
  dlpg__saved_error_t se;
  dlpg__error_save(&se);
  dlpg_store_close(store);
  if (st == DLPG_OK)
    DLPG_INFO(INIT, l.rank, "%s: rank %d of %d launched by %s (local rank %d of %d)", fn,
              l.rank, l.size, l.launcher, l.local_rank, l.local_size);
  return st == DLPG_OK ? DLPG_OK : dlpg__error_restore(&se, st);
}

dlpg_status_t dlpg_group_rank(const dlpg_group_t *group, int *rank) {
  DLPG_ARG_CHECK(group != NULL, "dlpg_group_rank: group is NULL");
  DLPG_ARG_CHECK(rank != NULL, "dlpg_group_rank: rank is NULL");
  *rank = group->rank;
  return DLPG_OK;
}

dlpg_status_t dlpg_group_size(const dlpg_group_t *group, int *world_size) {
  DLPG_ARG_CHECK(group != NULL, "dlpg_group_size: group is NULL");
  DLPG_ARG_CHECK(world_size != NULL, "dlpg_group_size: world_size is NULL");
  *world_size = group->size;
  return DLPG_OK;
}

dlpg_status_t dlpg_group_abort(dlpg_group_t *g) {
  DLPG_ARG_CHECK(g != NULL, "dlpg_group_abort: group is NULL");
  dlpg__group_abort_because(g, "dlpg_group_abort was called");
  return DLPG_OK;
}

dlpg_status_t dlpg_group_destroy(dlpg_group_t *g) {
  if (!g) return DLPG_OK;
  /* A child leaves its parent's list first: the parent's abort no longer reaches it. */
  dlpg__family_leave(g);
  /* Let queued CPU operations finish (within the group's timeout), then drop the handle's
   * reference; communicators and the Gloo context go when the last work is freed. */
  if (!dlpg__worker_drain(g)) { /* so that a stuck operation returns */
    char how[160];
    snprintf(how, sizeof how, "dlpg_group_destroy was called while an operation of the group "
             "had not finished within %g s", g->timeout_s);
    dlpg__group_abort_because(g, how);
  }
  dlpg__worker_shutdown(g);
  /* The watcher first: it writes the records still queued (a rejected call's, an abort's),
   * joining the job for them if this rank had not (bounded by the watcher's stop); then a
   * join still in progress, and rank 0's admission, end. */
  dlpg__watch_stop(g);
  dlpg__job_stop(g);
  DLPG_INFO(INIT, g->rank, "group \"%s\" destroyed", g->name);
  dlpg__group_release(g);
  return DLPG_OK;
}
