/* The making of a group struct (group_make.h), shared by dlpg_group_create (door/group.c)
 * and dlpg_group_split (door/split.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/timeout.h"
#include "core/door/group_make.h"
#include "core/group/group.h"
#include "core/group/job.h"
#include "core/group/split.h"
#include "core/health/observe.h"
#include "core/lines/backend.h"
#include "store/store.h"

/* At the last release (group_ref.c): what the group's parts made for it. */
static void dlpg__group_teardown(struct dlpg_group *g) {
  dlpg__line_states_free(g);
  dlpg__health_detach(g);
  dlpg__family_release_all(g); /* the subgroup lists it shares (split.h) */
}

/* A caller built against an older header passes fewer bytes; a newer one more, of which
 * only the fields known here are read. */
dlpg_status_t dlpg__group_read_options(const char *fn, const dlpg_group_options_t *in,
                                       dlpg_group_options_t *out) {
  dlpg_group_options_t def = DLPG_GROUP_OPTIONS_INIT;
  *out = def;
  if (!in) return DLPG_OK;
  if (in->struct_size < sizeof(size_t))
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "%s: options->struct_size is %zu; initialise options with "
                       "DLPG_GROUP_OPTIONS_INIT",
                       fn, in->struct_size);
  size_t n = in->struct_size < sizeof *out ? in->struct_size : sizeof *out;
  memcpy(out, in, n);
  out->struct_size = sizeof *out;
  return DLPG_OK;
}

/* The option must be finite; the rest is the timeout rule of every blocking step
 * (base/timeout.h: option > DLPG_TIMEOUT > default). */
dlpg_status_t dlpg__group_resolve_timeout(const char *fn, const dlpg_group_options_t *o,
                                          double *timeout_s) {
  if (isnan(o->timeout_s) || isinf(o->timeout_s))
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: options->timeout_s is %g (must be finite)",
                       fn, o->timeout_s);
  *timeout_s = dlpg__timeout_resolve(o->timeout_s);
  return DLPG_OK;
}

dlpg_status_t dlpg__group_make(const char *fn, dlpg_store_t *store, int rank, int size,
                               double timeout_s, const char *name, struct dlpg_group **out) {
  struct dlpg_group *g = calloc(1, sizeof *g);
  char *name_copy = strdup(name);
  if (!g || !name_copy) {
    free(g);
    free(name_copy);
    return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
  }
  if (pthread_mutex_init(&g->be_mu, NULL) != 0 || pthread_mutex_init(&g->worker_mu, NULL) != 0) {
    free(g);
    free(name_copy);
    return dlpg__error(DLPG_ERR_SYSTEM, "%s: cannot initialise a mutex", fn);
  }
  g->store = store;
  dlpg__store_retain(store);
  g->rank = rank;
  g->size = size;
  g->timeout_s = timeout_s;
  g->name = name_copy;
  dlpg__group_view_init(g);
  atomic_init(&g->aborted, 0);
  atomic_init(&g->refs, 1); /* the caller's handle */
  atomic_init(&g->splits, 0);
  dlpg__health_attach(g);
  g->teardown = dlpg__group_teardown;
  g->job = dlpg__job_new();
  *out = g;
  return DLPG_OK;
}
