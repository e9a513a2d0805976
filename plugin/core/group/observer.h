/* What the execution path tells the group's observer about each operation, and the only way
 * it reaches diagnostics: the flight recorder, the failure records and the watcher thread
 * (health) subscribe when the group is made, through this table, so the door, dispatch,
 * the worker and the work record call no failure, flight or job function and sit below
 * them. Model: torch's flight recorder, fed by record() when a work is created and by
 * retire_id() when it ends, beside the collective rather than inside it.
 *
 * dlpg_group_create sets it on every group (health's table, core/health/observe.c); a work record
 * without a group has none. Hooks are called without the locks other operations need,
 * except where said. */
#ifndef DLPG_CORE_OBSERVER_H_
#define DLPG_CORE_OBSERVER_H_

#include <stddef.h>
#include <stdint.h>

#include "core/group/group.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlpg__observer {
  /* A validated op is about to be queued or issued; tracked: a work record will report its
   * end. Returns its flight recorder id (0: none). May adopt a failure its peers recorded
   * in this rank's name after one of its calls was rejected, aborting the group. */
  uint64_t (*issued)(struct dlpg_group *g, const dlpg__op_t *op, int tracked);
  /* The op started running on backend slot (-1: the one it was issued to). */
  void (*started)(struct dlpg_group *g, uint64_t id, int backend);
  /* Its work completed with st (called with the work's mutex held: must not block). */
  void (*finished)(struct dlpg_group *g, uint64_t id, dlpg_status_t st);
  /* Its work was freed before it completed (a caller-thread op nobody waited for). */
  void (*dropped)(struct dlpg_group *g, uint64_t id);
  /* It failed with st and msg: returns the status to report and rewrites msg (a peer's
   * earlier failure becomes DLPG_ERR_REMOTE naming it); the group is aborted unless the
   * status is one every rank sees alike. May block on the store, bounded. */
  dlpg_status_t (*failed)(struct dlpg_group *g, uint64_t id, dlpg_status_t st, char *msg,
                          size_t cap);
  /* A call of this rank was refused by validation (msg: its message). */
  void (*rejected)(struct dlpg_group *g, dlpg__op_kind_t kind, int peer, const char *msg);
  /* dlpg_work_wait's deadline passed on op_name: records it for the peers and writes into
   * note which ranks had not arrived (the caller then aborts the group). */
  void (*timed_out)(struct dlpg_group *g, uint64_t id, const char *op_name, double timeout_s,
                    char *note, size_t cap);
  /* 1 and "group "x" failed on rank 1: <message>" into buf when the group was aborted
   * because of a peer's failure, else 0. */
  int (*cause)(struct dlpg_group *g, char *buf, size_t cap);
  /* Abort the group (an operation failed in a way that leaves it unusable). */
  void (*abort)(struct dlpg_group *g);
  /* Rank 0's job refused rank (its world size differs: msg) and that rank read the refusal:
   * the job's ranks are told, so they fail at once with msg (called on rank 0's thread that
   * admits the others; may block on the store, bounded). */
  void (*refused)(struct dlpg_group *g, int rank, const char *msg);
  /* Abort the group because how (the words its peers read after "group "x" failed on rank
   * N: "): what the abort of a parent does to each of its live children of
   * dlpg_group_split, so that the child's peers learn it as from any aborted rank. */
  void (*abort_because)(struct dlpg_group *g, const char *how);
} dlpg__observer_t;

static inline uint64_t dlpg__observe_issued(struct dlpg_group *g, const dlpg__op_t *op,
                                            int tracked) {
  return g->observer ? g->observer->issued(g, op, tracked) : 0;
}
static inline void dlpg__observe_started(struct dlpg_group *g, uint64_t id, int backend) {
  if (g->observer && id) g->observer->started(g, id, backend);
}
static inline void dlpg__observe_finished(struct dlpg_group *g, uint64_t id, dlpg_status_t st) {
  if (g && g->observer && id) g->observer->finished(g, id, st);
}
static inline void dlpg__observe_dropped(struct dlpg_group *g, uint64_t id) {
  if (g && g->observer && id) g->observer->dropped(g, id);
}
static inline dlpg_status_t dlpg__observe_failed(struct dlpg_group *g, uint64_t id,
                                                 dlpg_status_t st, char *msg, size_t cap) {
  return g && g->observer ? g->observer->failed(g, id, st, msg, cap) : st;
}
static inline void dlpg__observe_rejected(struct dlpg_group *g, dlpg__op_kind_t kind, int peer,
                                          const char *msg) {
  if (g && g->observer) g->observer->rejected(g, kind, peer, msg);
}
static inline void dlpg__observe_timed_out(struct dlpg_group *g, uint64_t id,
                                           const char *op_name, double timeout_s, char *note,
                                           size_t cap) {
  if (g && g->observer) g->observer->timed_out(g, id, op_name, timeout_s, note, cap);
}
static inline int dlpg__observe_cause(struct dlpg_group *g, char *buf, size_t cap) {
  return g && g->observer ? g->observer->cause(g, buf, cap) : 0;
}
static inline void dlpg__observe_abort(struct dlpg_group *g) {
  if (g && g->observer) g->observer->abort(g);
}
static inline void dlpg__observe_refused(struct dlpg_group *g, int rank, const char *msg) {
  if (g && g->observer && g->observer->refused) g->observer->refused(g, rank, msg);
}
static inline void dlpg__observe_abort_because(struct dlpg_group *g, const char *how) {
  if (g && g->observer && g->observer->abort_because) g->observer->abort_because(g, how);
}

#ifdef __cplusplus
}
#endif
#endif
