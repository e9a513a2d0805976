/* The work record behind dlpg_work_t (private to core). Backends use only work.h. */
#ifndef DLPG_CORE_WORK_IMPL_H_
#define DLPG_CORE_WORK_IMPL_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/group/work.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dlpg_group;

struct dlpg_work {
  pthread_mutex_t mu;
  pthread_cond_t cv;        /* CLOCK_MONOTONIC; signalled at completion */
  int done;
  /* A failure on its way to the group's observer (dlpg__work_complete): the result comes
   * within the failure path's bounded store budget, and the group's abort that the observer
   * makes meanwhile is this work's consequence, not its cause (waiters wait for it). */
  int completing;
  dlpg_status_t status;
  char *message;            /* heap; NULL until a failure is recorded */
  atomic_int refs;          /* the caller's handle + the executor's (until it completes) */
  struct dlpg_group *group; /* retained, so the group's internals outlive its work */
  const char *op_name;      /* "dlpg_allreduce", ...; static string, for timeout messages */
  /* CUDA work: the backend's poller (owns the executor's reference). */
  dlpg__work_backend_t be;
  void *be_data;
  int has_be;
  /* RECV: the peer, DLPG_ANY_SOURCE until the backend names the matched sender
   * (dlpg__work_set_source); -2 for every other kind. */
  int source;
  uint64_t flight_id;       /* the group's flight recorder entry (core/health/flight.h); 0: none */
  /* A CPU op its backend started on the caller's thread (the worker's eager path): a waiter
   * may finish it itself, waiting at most wait_s (0: a look). Returns 1 when it tried, 0 when
   * another thread is at it or nothing is left to do here (then sleep on cv). Called
   * without mu. Set before the handle is handed out. */
  int (*drive)(struct dlpg_work *w, double wait_s);
};

/* Record the result under w->mu (held by the caller), once: a later result is ignored. An
 * abort caused by a peer's failure becomes DLPG_ERR_REMOTE naming it. */
void dlpg__work_finish_locked(struct dlpg_work *w, dlpg_status_t status, const char *msg);
/* dlpg__work_complete for the executor whose outcome the group's observer already has (the
 * worker's dlpg__worker_outcome) or that needs none (an abort's, a refusal's). */
void dlpg__work_complete_observed(struct dlpg_work *w, dlpg_status_t status, const char *msg);
/* Whether it completed; its status (DLPG_OK while pending) and message into msg. */
int dlpg__work_is_done(struct dlpg_work *w);
dlpg_status_t dlpg__work_status(struct dlpg_work *w, char *msg, size_t cap);
/* dlpg_work_wait for core's own callers (timeout_s <= 0: the group's timeout). */
dlpg_status_t dlpg__work_wait(struct dlpg_work *w, double timeout_s);
/* Name the operation the work belongs to (for "dlpg_allreduce did not complete ..."). */
void dlpg__work_set_op_name(struct dlpg_work *w, const char *name);
/* Whether the work has neither completed nor been handed to a backend poller: used after a
 * failed backend issue to fail the works that the backend did not take. */
int dlpg__work_is_unclaimed(struct dlpg_work *w);

#ifdef __cplusplus
}
#endif
#endif
