/* The group object behind dlpg_group_t. Core and the built-in backends read it; a module
 * sees only its view (g->view, a dlpg__be_group_t of core/group/backend_abi.h). */
#ifndef DLPG_CORE_GROUP_H_
#define DLPG_CORE_GROUP_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "dlpg/dlpg.h"
#include "base/clock.h"
#include "core/group/op.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dlpg__worker;
struct dlpg__observer;

/* One state slot per registered backend (core/lines/backend.h). */
#define DLPG__GROUP_BACKEND_SLOTS 4

/* How the group's line resolution ended so far (core/lines/line_state.c), written only by the
 * thread that runs the group's queued operations. Per first line of a device: why the
 * group's choice failed (OK: it did not); per slot: whether its state was tried and why that
 * failed. A failure is final: every later operation fails with it. */
typedef struct dlpg__group_lines {
  dlpg_status_t choice_status[DLPG__GROUP_BACKEND_SLOTS];
  char *choice_msg[DLPG__GROUP_BACKEND_SLOTS];
  int state_tried[DLPG__GROUP_BACKEND_SLOTS];
  dlpg_status_t state_status[DLPG__GROUP_BACKEND_SLOTS];
  char *state_msg[DLPG__GROUP_BACKEND_SLOTS];
} dlpg__group_lines_t;

struct dlpg_group {
  dlpg_store_t *store;   /* retained */
  int rank, size;
  double timeout_s;      /* resolved (base/timeout.h), > 0 */
  char *name;            /* resolved key prefix */
  atomic_int aborted;
  atomic_int refs;       /* the caller's handle, each live work, the worker */

  /* The executor of on_worker backends' operations (core/exec/worker.h), started at the group's
   * first task: read with one atomic load; worker_mu guards its start and its removal at
   * destroy, and keeps it alive while another thread aborts it. */
  struct dlpg__worker *worker;
  pthread_mutex_t worker_mu;

  /* Each backend's per-group state, indexed by registry slot, created lazily at the
   * group's first operation on that backend: by the worker for on_worker backends, else
   * under be_mu. Set once and read lock-free. */
  pthread_mutex_t be_mu;
  void *be_state[DLPG__GROUP_BACKEND_SLOTS];

  /* Core only (appended: a module never reads them). The flight recorder (core/health/flight.h)
   * and the failure watcher (core/health/failure.h); either may be NULL (no memory). */
  struct dlpg__flight *flight;
  struct dlpg__watch *watch;
  /* Diagnostics' view of the group's operations (core/group/observer.h): what the execution path
   * reports to, set at creation. */
  const struct dlpg__observer *observer;
  /* Frees what the group's parts hold (backend states, diagnostics) at the last release;
   * set at creation by the code that made them, so the reference count below them needs
   * to know none of them. */
  void (*teardown)(struct dlpg_group *g);

  /* The per-group choice between lines serving one device (core/lines/backend.h,
   * dlpg__backend_choose): indexed by the device's first line, the slot chosen + 1 (0 while
   * undecided). Written once by the group's worker, read lock-free by validation. */
  atomic_int be_choice[DLPG__GROUP_BACKEND_SLOTS];
  /* Nonzero when the choice was the rule's (auto), so a backend that turns out unable to
   * serve the group may give way to the next line; 0 when DLPG_CPU_BACKEND forced it. */
  int be_choice_auto[DLPG__GROUP_BACKEND_SLOTS];
  /* Nonzero once this rank published its localities (under the job's scope: rank 0 when it
   * makes the group, the others when they join the job), or once a child took its parent's
   * (where_scope below). Set by whichever thread publishes first. */
  atomic_int where_gen;
  /* A child's ranks' localities are its parent's records (the child writes none): the job
   * scope they are under and, per child rank, the rank there (an ancestor's, through a
   * child of a child). NULL: the group's own job scope and ranks. */
  char *where_scope;
  int *where_ranks;
  /* The job this group belongs to (core/group/job.h): the scope of every key above. NULL: no
   * memory (the first operation fails). */
  struct dlpg__job *job;

  /* Each line's state of sends and receives when its table has p2p_state_create
   * (backend_abi.h): created on a caller's thread under be_mu, set once, read lock-free. */
  void *p2p_state[DLPG__GROUP_BACKEND_SLOTS];
  /* A child's seeds from its parent's states (backend_abi.h's child_seed), per line, taken
   * by the line's state creation (under be_mu) or freed at the release. */
  void *be_seed[DLPG__GROUP_BACKEND_SLOTS];
  dlpg__group_lines_t lines;

  /* What a backend is handed instead of the group (filled by dlpg__group_view_init). */
  dlpg__be_group_t view;
  /* The device communicator settings (options' nccl_*; the strings owned), which view.comm
   * points at. */
  dlpg__be_comm_config_t comm;

  /* Subgroups (core/group/split.h). splits: how many times this rank split the group (the
   * next split's number, the same on every rank that split alike). kids: the list of its
   * live children, made at its first split (under be_mu), shared with them so that either
   * may go first. up: for a child, the list it is registered in (NULL otherwise), and
   * parent_ranks[r] the parent rank of its rank r (NULL for a created group). */
  atomic_int splits;
  /* Nonzero once a collective on host memory (or a barrier) was issued on the group (the
   * door sets it, door/ops_api.c): every rank issues the same collectives, so every rank of a
   * well-formed program sees the same value at a split, which then exchanges through the
   * group's host-memory backend instead of the store. */
  atomic_int host_colls;
  struct dlpg__family *kids;
  struct dlpg__family *up;
  int *parent_ranks;
};

#ifndef __cplusplus
_Static_assert(sizeof(atomic_int) == sizeof(int), "the view reads the abort flag as an int");
#endif

/* Fill g's view once rank, size, timeout_s, name and store are set. */
static inline void dlpg__group_view_init(struct dlpg_group *g) {
  g->view.struct_size = sizeof g->view;
  g->view.rank = g->rank;
  g->view.size = g->size;
  g->view.timeout_s = g->timeout_s;
  g->view.name = g->name;
  g->view.store = g->store;
  g->view.aborted = (const int *)&g->aborted;
  g->view.comm = &g->comm;
}

/* The group whose view v is (built-in backends, which may read the group itself). */
static inline struct dlpg_group *dlpg__group_of_view(const dlpg__be_group_t *v) {
  return (struct dlpg_group *)((char *)(uintptr_t)v - offsetof(struct dlpg_group, view));
}

/* Bind op to g: its core pointer and the view a backend reads. */
static inline void dlpg__op_set_group(dlpg__op_t *op, struct dlpg_group *g) {
  op->group = g;
  op->gview = &g->view;
  op->struct_size = sizeof(dlpg__be_op_t);
}


void dlpg__group_retain(struct dlpg_group *g);
void dlpg__group_release(struct dlpg_group *g);

/* "rank 1" or, in a child whose rank 1 is another rank of its parent, "rank 1 (parent rank
 * 5)": how messages name rank r of g (rank_label.c). Returns buf. dlpg__rank_num: the same
 * without "rank " ("1 (parent rank 5)"), for lists ("ranks 1, 3"). */
const char *dlpg__rank_label(const struct dlpg_group *g, int r, char *buf, size_t cap);
const char *dlpg__rank_num(const struct dlpg_group *g, int r, char *buf, size_t cap);
/* The buffer a label fits in. */
#define DLPG__RANK_LABEL_MAX 48

#ifdef __cplusplus
}
#endif
#endif
