/* dlpg_group_split (dlpg.h, "subgroups"), MPI_Comm_split's semantics over a dlpg group:
 * the parent's ranks exchange their colors and keys once through the parent's store
 * (group/split_exchange.c), and each rank with a color makes its child from the table
 * alone: its rank is its place among the ranks of its color ordered by key, then parent
 * rank. The child needs no rendezvous of its own: it is in the parent's job, with a key
 * scope under the parent's that names the split and the color, "<scope>/s<seq>c<color>",
 * so that children never meet each other's keys and a re-created parent (a new job) starts
 * clean. Its backends connect lazily, as a created group's, but for a caller-thread line
 * that can split what the parent made (lines/line_split.c). It keeps copies, never the
 * parent itself: so either may be destroyed first; the parent's abort reaches it through the
 * list they share (group/split.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/status.h"
#include "core/door/group_make.h"
#include "core/exec/dispatch.h"
#include "core/group/group.h"
#include "core/group/job.h"
#include "core/group/split.h"
#include "core/lines/backend.h"
#include "dlpg/dlpg.h"

/* The child's ranks from the exchanged table: members[0..*n) the parent ranks of color,
 * ordered by key, then by parent rank; *rank this rank's place among them. */
static int *dlpg__split_members(const int *table, int size, int color, int me, int *n,
                                int *rank) {
  int *m = malloc(sizeof *m * (size_t)size);
  if (!m) return NULL;
  int k = 0;
  for (int r = 0; r < size; r++) {
    if (table[2 * r] != color) continue;
    /* Insertion keeps equal keys in parent-rank order (r grows). */
    int j = k++;
    while (j > 0 && table[2 * m[j - 1] + 1] > table[2 * r + 1]) {
      m[j] = m[j - 1];
      j--;
    }
    m[j] = r;
  }
  *n = k;
  for (int i = 0; i < k; i++)
    if (m[i] == me) *rank = i;
  return m;
}

/* The child's display name: options->name, else "<parent name>/<color>" (cut to the longest
 * name a group takes). */
static dlpg_status_t dlpg__split_name(const char *fn, const dlpg_group_options_t *o,
                                      const struct dlpg_group *parent, int color, char *out,
                                      size_t cap) {
  if (o->name && o->name[0]) {
    size_t len = strlen(o->name);
    DLPG_ARG_CHECK(len <= DLPG__GROUP_NAME_MAX, "%s: options->name has %zu bytes (at most %d)",
                   fn, len, DLPG__GROUP_NAME_MAX);
    snprintf(out, cap, "%s", o->name);
    return DLPG_OK;
  }
  char suffix[16];
  int sl = snprintf(suffix, sizeof suffix, "/%d", color);
  int keep = DLPG__GROUP_NAME_MAX - sl;
  snprintf(out, cap, "%.*s%s", keep, parent->name, suffix);
  return DLPG_OK;
}

/* The exchange as one allgather of (color, key) on the parent: the parent's collective
 * coll_seq N in its flight recorder. A rank that never splits leaves it to time out as any
 * collective (naming the ranks that had not called it) and aborts the parent. */
static dlpg_status_t dlpg__split_allgather(const char *fn, struct dlpg_group *parent, int seq,
                                           int color, int key, int *table) {
  int32_t mine[2] = {color, key};
  int64_t n_in = 2, n_out = 2 * (int64_t)parent->size;
  _Static_assert(sizeof(int) == sizeof(int32_t), "the table is gathered as int32");
  DLTensor in = {.data = mine, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLInt, 32, 1},
                 .shape = &n_in};
  DLTensor out = {.data = table, .device = {kDLCPU, 0}, .ndim = 1, .dtype = {kDLInt, 32, 1},
                  .shape = &n_out};
  DLTensor *ip = &in, *op = &out;
  dlpg_status_t st = dlpg_allgather(parent, &ip, &op, 1, NULL, NULL);
  if (st == DLPG_OK) return DLPG_OK;
  char msg[DLPG__ERROR_MAX];
  snprintf(msg, sizeof msg, "%s", dlpg__last_error());
  return dlpg__error(st, "%s: group \"%s\": split %d exchanges the colors as an allgather of "
                     "the group, which failed (every rank of the group must call "
                     "dlpg_group_split, as often and in the same order): %.700s", fn,
                     parent->name, seq, msg);
}

static dlpg_status_t dlpg__split_make(const char *fn, struct dlpg_group *parent, int seq,
                                      int color, double timeout_s, const char *name,
                                      int *members, int n, int rank, int via_coll,
                                      const dlpg_group_options_t *o, struct dlpg_group **out) {
  struct dlpg_group *c = NULL;
  DLPG_CHECK(dlpg__group_make(fn, parent->store, rank, n, timeout_s, name, &c));
  c->parent_ranks = members;
  char suffix[48];
  snprintf(suffix, sizeof suffix, "/s%dc%d", seq, color);
  dlpg_status_t st = dlpg__group_set_comm(fn, c, o, parent);
  if (st == DLPG_OK) st = dlpg__job_inherit(c, parent->job, suffix);
  if (st == DLPG_OK && !dlpg__family_add(parent, c))
    st = dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
  if (st != DLPG_OK) {
    dlpg__group_release(c); /* frees members with it */
    return dlpg__error_prefix(st, fn);
  }
  /* The parent's choice of backend where the child's ranks would make the same (every
   * parent rank has made it: the exchange was its collective); else the child's choice at
   * its first collective (or a send's or receive's per pair) reads where its ranks run:
   * the parent's records, which every rank published before the exchange. */
  int inherited = via_coll && dlpg__backend_choice_inherit(c, parent);
  if (!dlpg__backend_where_inherit(c, parent) && !inherited) dlpg__backend_where_publish(c);
  /* What the parent's backend states hand the child (shared memory: an area of the
   * parent's segment for the child's first operation). */
  dlpg__line_states_seed(parent, c);
  *out = c;
  return DLPG_OK;
}

dlpg_status_t dlpg_group_split(dlpg_group_t *parent, int color, int key,
                               const dlpg_group_options_t *options, dlpg_group_t **child) {
  static const char fn[] = "dlpg_group_split";
  DLPG_ARG_CHECK(parent != NULL, "%s: parent is NULL", fn);
  DLPG_ARG_CHECK(child != NULL, "%s: child is NULL", fn);
  DLPG_ARG_CHECK(dlpg__batch_depth() == 0, "%s: called inside a dlpg_group_start/end batch "
                 "(split the group before dlpg_group_start or after dlpg_group_end)", fn);
  dlpg_group_options_t o;
  DLPG_CHECK(dlpg__group_read_options(fn, options, &o));
  /* The child's deadline: the option's when it gives one, else the parent's (not the
   * environment's default, which the parent resolved already). */
  double timeout_s = parent->timeout_s;
  if (options) {
    double t = 0;
    DLPG_CHECK(dlpg__group_resolve_timeout(fn, &o, &t)); /* a finite option */
    if (o.timeout_s > 0) timeout_s = t;
  }
  char name[DLPG__GROUP_NAME_MAX + 1];
  DLPG_CHECK(dlpg__split_name(fn, &o, parent, color, name, sizeof name));
  if (atomic_load(&parent->aborted)) return dlpg__op_aborted(fn, parent);

  /* The exchange writes under the parent's job: join it first, as the parent's first
   * operation would (rank 0 starts admitting; the others ask rank 0). */
  dlpg_status_t st = dlpg__job_join(parent);
  if (st != DLPG_OK) return dlpg__error_prefix(st, fn);
  dlpg__backend_where_publish(parent);
  int seq = atomic_fetch_add(&parent->splits, 1) + 1;
  int *table = malloc(sizeof *table * 2 * (size_t)parent->size);
  if (!table) return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
  /* Once the parent ran a host-memory collective (on every rank alike), its backend state
   * exists and one allgather there is far cheaper than the store's round trips. */
  int via_coll = atomic_load_explicit(&parent->host_colls, memory_order_relaxed) != 0;
  st = via_coll ? dlpg__split_allgather(fn, parent, seq, color, key, table)
                : dlpg__split_exchange(parent, fn, seq, color, key,
                                       dlpg__now() + parent->timeout_s, table);
  int n = 0, rank = 0, *members = NULL;
  if (st == DLPG_OK && color >= 0) {
    members = dlpg__split_members(table, parent->size, color, parent->rank, &n, &rank);
    if (!members) st = dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
  }
  free(table);
  if (st != DLPG_OK) return st;

  struct dlpg_group *c = NULL;
  if (color >= 0) {
    st = dlpg__split_make(fn, parent, seq, color, timeout_s, name, members, n, rank,
                          via_coll, &o, &c);
    if (st != DLPG_OK) return st;
  }
  /* Collective over the parent, with or without a child. */
  st = dlpg__line_states_split(fn, parent, c, color, key);
  if (st != DLPG_OK) {
    if (c) dlpg_group_destroy(c);
    return st;
  }
  if (c)
    DLPG_INFO(INIT, parent->rank, "group \"%s\": split %d made group \"%s\" (color %d): rank %d "
              "of %d, keys under %s", parent->name, seq, c->name, color, rank, n,
              dlpg__job_scope(c->job));
  else
    DLPG_INFO(INIT, parent->rank, "group \"%s\": split %d: this rank takes part in no group "
              "(color %d)", parent->name, seq, color);
  *child = c;
  return DLPG_OK;
}
