/* dlpg_group_create_subset (dlpg.h, "subgroups"), MPI_Comm_create_group's semantics over a
 * dlpg group: only the members call it, and they exchange nothing. Each member derives the
 * child's key scope from what they all hold alike: the parent's job (agreed when they joined
 * it), the member list, and how many children of that same list this rank made of the parent
 * before -- "<parent scope>/u<ranks>k<k>" -- so children never meet each other's keys, and a
 * re-created parent (a new job) starts clean. Frameworks that make many small subgroups
 * (torch's new_group, DeviceMesh) thus pay no rendezvous and no job admission per subgroup;
 * what is left is the child's own connection at its first operation, as for any group (on
 * shared memory not even that: the child runs in an area of the parent's segment).
 * The child keeps copies of the parent (store, job, parent ranks), never the parent itself,
 * and joins the parent's list of children so that the parent's abort reaches it. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/status.h"
#include "core/door/group_make.h"
#include "core/exec/dispatch.h"
#include "core/group/group.h"
#include "core/group/job.h"
#include "core/group/split.h"
#include "core/lines/backend.h"
#include "dlpg/dlpg.h"

/* A member list written out in a scope at most this long; longer lists go by their hash. */
#define SUBSET_LIST_MAX 48

/* FNV-1a over n and the ranks: the list's identity for the count of its children, and its
 * name in a scope when it is too long to write out. */
static uint64_t subset_hash(int n, const int *ranks) {
  uint64_t h = 1469598103934665603ull;
  for (int i = -1; i < n; i++) {
    uint32_t v = (uint32_t)(i < 0 ? n : ranks[i]);
    for (int b = 0; b < 4; b++) h = (h ^ ((v >> (8 * b)) & 0xffu)) * 1099511628211ull;
  }
  return h;
}

/* "0-1-5" when it fits SUBSET_LIST_MAX, else "h<hash>n<n>". */
static void subset_list_name(int n, const int *ranks, uint64_t hash, char *out, size_t cap) {
  size_t len = 0;
  for (int i = 0; i < n && len < cap; i++)
    len += (size_t)snprintf(out + len, cap - len, "%s%d", i ? "-" : "", ranks[i]);
  if (len >= SUBSET_LIST_MAX || len >= cap)
    snprintf(out, cap, "h%016" PRIx64 "n%d", hash, n);
}

/* Every rank in the parent's range, none twice, this rank among them (its place: *rank). */
static dlpg_status_t subset_check_ranks(const char *fn, const struct dlpg_group *parent, int n,
                                        const int *ranks, int *rank) {
  unsigned char *seen = calloc((size_t)parent->size, 1);
  if (!seen) return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
  *rank = -1;
  for (int i = 0; i < n; i++) {
    int r = ranks[i];
    if (r < 0 || r >= parent->size) {
      free(seen);
      return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: ranks[%d] is %d, not a rank of group "
                         "\"%s\" (its ranks are 0..%d)", fn, i, r, parent->name,
                         parent->size - 1);
    }
    if (seen[r]) {
      int first = 0;
      while (ranks[first] != r) first++;
      free(seen);
      return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: ranks[%d] and ranks[%d] are both %d "
                         "(each member once)", fn, first, i, r);
    }
    seen[r] = 1;
    if (r == parent->rank) *rank = i;
  }
  free(seen);
  if (*rank < 0)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: rank %d of group \"%s\" is not among "
                       "the %d ranks it passed (only the members call it)", fn, parent->rank,
                       parent->name, n);
  return DLPG_OK;
}

dlpg_status_t dlpg_group_create_subset(dlpg_group_t *parent, int n, const int *ranks,
                                       const dlpg_group_options_t *options,
                                       dlpg_group_t **child) {
  static const char fn[] = "dlpg_group_create_subset";
  DLPG_ARG_CHECK(parent != NULL, "%s: parent is NULL", fn);
  DLPG_ARG_CHECK(child != NULL, "%s: child is NULL", fn);
  DLPG_ARG_CHECK(ranks != NULL, "%s: ranks is NULL", fn);
  DLPG_ARG_CHECK(n >= 1 && n <= parent->size, "%s: n is %d but group \"%s\" has %d ranks "
                 "(1 <= n <= %d)", fn, n, parent->name, parent->size, parent->size);
  DLPG_ARG_CHECK(dlpg__batch_depth() == 0, "%s: called inside a dlpg_group_start/end batch "
                 "(make the subgroup before dlpg_group_start or after dlpg_group_end)", fn);
  *child = NULL;
  int rank = -1;
  DLPG_CHECK(subset_check_ranks(fn, parent, n, ranks, &rank));
  dlpg_group_options_t o;
  DLPG_CHECK(dlpg__group_read_options(fn, options, &o));
  double timeout_s = parent->timeout_s;
  if (options) {
    double t = 0;
    DLPG_CHECK(dlpg__group_resolve_timeout(fn, &o, &t));
    if (o.timeout_s > 0) timeout_s = t;
  }
  uint64_t hash = subset_hash(n, ranks);
  char list[SUBSET_LIST_MAX + 8], name[DLPG__GROUP_NAME_MAX + 1];
  subset_list_name(n, ranks, hash, list, sizeof list);
  if (o.name && o.name[0]) {
    size_t len = strlen(o.name);
    DLPG_ARG_CHECK(len <= DLPG__GROUP_NAME_MAX, "%s: options->name has %zu bytes (at most %d)",
                   fn, len, DLPG__GROUP_NAME_MAX);
    snprintf(name, sizeof name, "%s", o.name);
  } else {
    int keep = DLPG__GROUP_NAME_MAX - (int)strlen(list) - 1;
    snprintf(name, sizeof name, "%.*s/%s", keep, parent->name, list);
  }
  if (atomic_load(&parent->aborted)) return dlpg__op_aborted(fn, parent);

  /* The child's scope is under the parent's job: join it if this rank has not (the parent's
   * rank 0 starts admitting here; the others ask it). */
  dlpg_status_t st = dlpg__job_join(parent);
  if (st != DLPG_OK) {
    char msg[DLPG__ERROR_MAX];
    snprintf(msg, sizeof msg, "%s", dlpg__last_error());
    return dlpg__error(st, "%s: the subgroup lives in group \"%s\"'s job, which rank %d could "
                       "not join (the group's rank 0 admits its ranks from its first "
                       "operation, dlpg_group_split or dlpg_group_create_subset on it): %.700s",
                       fn, parent->name, parent->rank, msg);
  }
  int *members = malloc(sizeof *members * (size_t)n);
  if (!members) return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
  memcpy(members, ranks, sizeof *members * (size_t)n);
  struct dlpg_group *c = NULL;
  st = dlpg__group_make(fn, parent->store, rank, n, timeout_s, name, &c);
  if (st != DLPG_OK) {
    free(members);
    return st;
  }
  c->parent_ranks = members;
  /* Counted last of what can fail alone on this rank (no memory), so that a count taken
   * is a child made, as on the other members. */
  int k = dlpg__family_subset_seq(parent, hash);
  if (k < 0) {
    dlpg__group_release(c);
    return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
  }
  char suffix[SUBSET_LIST_MAX + 40];
  snprintf(suffix, sizeof suffix, "/u%sk%d", list, k);
  st = dlpg__job_inherit(c, parent->job, suffix);
  if (st == DLPG_OK && !dlpg__family_add(parent, c))
    st = dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
  if (st != DLPG_OK) {
    dlpg__group_release(c); /* frees members with it */
    return dlpg__error_prefix(st, fn);
  }
  /* The parent's choice where the members would make the same (a subset of ranks that all
   * share the parent's locality, or a forced line). A member whose parent has not chosen
   * yet applies the rule instead, reading every member's locality: the parent's records,
   * so the child writes none (the parent's are written once per rank, waiting for nobody). */
  dlpg__backend_choice_inherit(c, parent);
  if (!dlpg__backend_where_inherit(c, parent)) dlpg__backend_where_publish(c);
  /* What the parent's backend states hand the child (shared memory: an area of the
   * parent's segment, so the members' first operation needs no meeting). */
  dlpg__line_states_seed(parent, c);
  DLPG_INFO(INIT, parent->rank, "group \"%s\": made subgroup \"%s\" of %d ranks (%s): rank %d, "
            "keys under %s", parent->name, c->name, n, list, rank, dlpg__job_scope(c->job));
  *child = c;
  return DLPG_OK;
}
