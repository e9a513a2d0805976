/* Health's subscription to a group's operations (core/group/observer.h): the flight recorder and
 * the failure propagation attached to a group when it is made, and the table through which
 * the execution path reports to them. Each hook is a thin forward to the part that owns
 * the concern (flight.c, failure.c, watch.c), so the order of what happens to one operation
 * reads here in one place: issued, started, finished or failed. */
#include "core/health/observe.h"

#include <stdatomic.h>

#include "core/health/failure.h"
#include "core/health/flight.h"
#include "core/group/observer.h"

static uint64_t dlpg__on_issued(struct dlpg_group *g, const dlpg__op_t *op, int tracked) {
  /* After a rejection of this rank's, its peers may have made it the group's failure. */
  dlpg__watch_check_rejected(g);
  uint64_t id = dlpg__flight_issue(g, op, tracked);
  /* The watcher starts at the group's first operation (one atomic load after that). */
  dlpg__watch_op(g);
  return id;
}

static void dlpg__on_started(struct dlpg_group *g, uint64_t id, int backend) {
  dlpg__flight_start_on(g, id, backend);
}

static void dlpg__on_finished(struct dlpg_group *g, uint64_t id, dlpg_status_t st) {
  dlpg__flight_finish(g, id, st);
}

static void dlpg__on_dropped(struct dlpg_group *g, uint64_t id) { dlpg__flight_untrack(g, id); }

static dlpg_status_t dlpg__on_failed(struct dlpg_group *g, uint64_t id, dlpg_status_t st,
                                     char *msg, size_t cap) {
  st = dlpg__failure_op_failed(g, id, st, msg, cap);
  /* A backend's own deadline expired (the group's): the group is as unusable as after
   * dlpg_work_wait's, also when failure propagation is off and nothing aborted it above. */
  if (st == DLPG_ERR_TIMEOUT) dlpg__group_abort(g);
  return st;
}

static void dlpg__on_rejected(struct dlpg_group *g, dlpg__op_kind_t kind, int peer,
                              const char *msg) {
  /* A call only this rank rejects leaves its peers blocked: tell them (failure.h). */
  dlpg__failure_rejected(g, kind, peer, msg);
}

static void dlpg__on_timed_out(struct dlpg_group *g, uint64_t id, const char *op_name,
                               double timeout_s, char *note, size_t cap) {
  dlpg__failure_timed_out(g, id, op_name, timeout_s, note, cap);
}

static void dlpg__on_refused(struct dlpg_group *g, int rank, const char *msg) {
  dlpg__failure_refused(g, rank, msg);
}

static const dlpg__observer_t dlpg__health = {
    .issued = dlpg__on_issued,
    .started = dlpg__on_started,
    .finished = dlpg__on_finished,
    .dropped = dlpg__on_dropped,
    .failed = dlpg__on_failed,
    .rejected = dlpg__on_rejected,
    .timed_out = dlpg__on_timed_out,
    .cause = dlpg__failure_remote,
    .abort = dlpg__group_abort,
    .refused = dlpg__on_refused,
    .abort_because = dlpg__group_abort_because,
};

void dlpg__health_attach(struct dlpg_group *g) {
  g->flight = dlpg__flight_new();
  g->watch = dlpg__watch_new();
  g->observer = &dlpg__health;
}

void dlpg__health_detach(struct dlpg_group *g) {
  dlpg__flight_free(g->flight);
  dlpg__watch_free(g->watch);
  g->flight = NULL;
  g->watch = NULL;
}
