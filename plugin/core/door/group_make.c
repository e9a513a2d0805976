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
  free((char *)g->comm.net_name);
  free((char *)g->comm.comm_name);
}

/* A communicator setting (options' nccl_* ints): negative (the library's default) or lo..hi. */
static dlpg_status_t dlpg__comm_int(const char *fn, const char *field, int v, int lo, int hi) {
  if (v < 0 || (v >= lo && v <= hi)) return DLPG_OK;
  return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: options->%s is %d (must be %d..%d, or -1 for the "
                     "library's default)", fn, field, v, lo, hi);
}

static dlpg_status_t dlpg__comm_check(const char *fn, const dlpg_group_options_t *o) {
  DLPG_CHECK(dlpg__comm_int(fn, "nccl_cga_cluster_size", o->nccl_cga_cluster_size, 0, 8));
  /* CTA counts of 0 mean nothing to the library: the default, as for a zeroed struct. */
  if (o->nccl_min_ctas) DLPG_CHECK(dlpg__comm_int(fn, "nccl_min_ctas", o->nccl_min_ctas, 1, 64));
  if (o->nccl_max_ctas) DLPG_CHECK(dlpg__comm_int(fn, "nccl_max_ctas", o->nccl_max_ctas, 1, 64));
  DLPG_CHECK(dlpg__comm_int(fn, "nccl_traffic_class", o->nccl_traffic_class, 0, 0x7fffffff));
  if (o->nccl_min_ctas > 0 && o->nccl_max_ctas > 0 && o->nccl_min_ctas > o->nccl_max_ctas)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: options->nccl_min_ctas (%d) exceeds "
                       "options->nccl_max_ctas (%d)", fn, o->nccl_min_ctas, o->nccl_max_ctas);
  return DLPG_OK;
}

/* The option's value where set, else the inherited one (owned copies of the strings). */
static int dlpg__comm_pick(int mine, int inherited) { return mine >= 0 ? mine : inherited; }
static int dlpg__comm_pick_ctas(int mine, int inherited) { return mine > 0 ? mine : inherited; }

static int dlpg__comm_str(const char **dst, const char *mine, const char *inherited) {
  const char *v = mine && mine[0] ? mine : inherited;
  *dst = v ? strdup(v) : NULL;
  return !v || *dst;
}

dlpg_status_t dlpg__group_set_comm(const char *fn, struct dlpg_group *g,
                                   const dlpg_group_options_t *o,
                                   const struct dlpg_group *parent) {
  static const dlpg__be_comm_config_t none = {-1, -1, -1, -1, NULL, NULL};
  const dlpg__be_comm_config_t *up = parent ? &parent->comm : &none;
  g->comm.cga_cluster_size = dlpg__comm_pick(o->nccl_cga_cluster_size, up->cga_cluster_size);
  g->comm.min_ctas = dlpg__comm_pick_ctas(o->nccl_min_ctas, up->min_ctas);
  g->comm.max_ctas = dlpg__comm_pick_ctas(o->nccl_max_ctas, up->max_ctas);
  g->comm.traffic_class = dlpg__comm_pick(o->nccl_traffic_class, up->traffic_class);
  if (!dlpg__comm_str(&g->comm.net_name, o->nccl_net_name, up->net_name) ||
      !dlpg__comm_str(&g->comm.comm_name, o->nccl_comm_name, up->comm_name))
    return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
  return DLPG_OK;
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
  return dlpg__comm_check(fn, out);
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
  g->comm = (dlpg__be_comm_config_t){-1, -1, -1, -1, NULL, NULL}; /* set by group_set_comm */
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
