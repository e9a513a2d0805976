/* Failure propagation, private to core (failure.h is the interface): the per-group state
 * that failure.c (records, causes, messages), failure_store.c (the store records) and
 * watch.c (the watcher thread) share. */
#ifndef DLPG_CORE_FAILURE_IMPL_H_
#define DLPG_CORE_FAILURE_IMPL_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/health/failure.h"
#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dlpg__watch {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* CLOCK_MONOTONIC: stop, a record to write, thread exit */
  atomic_int started;
  int have_thread, stop, exited, detached;
  pthread_t thread;
  /* The group failed because of a peer: cause is final once remote is set. */
  atomic_int remote;
  char cause[DLPG__ERROR_MAX];
  atomic_int recorded;              /* this rank wrote (or is writing) the failed key */
  int hard_pending, soft_pending;   /* records for the watcher to write (under mu) */
  int writing;                      /* the watcher is writing one of them (under mu) */
  /* Until when (dlpg__now() in ms) this rank's calls look for the group's failure record at
   * the door: set when this rank rejected a call (dlpg__watch_rejected). */
  atomic_llong rejected_until_ms;
  /* The last read of a record failed because the store did not answer (not: the record is
   * absent): the ranks cannot compare notes, so a failure's message must not guess whose
   * fault it was. Cleared by a read the store answered. */
  atomic_int store_lost;
  char hard_val[DLPG__ERROR_MAX + 64], soft_val[DLPG__ERROR_MAX + 64];
};

/* Propagation applies to groups of two or more ranks, unless DLPG_PROPAGATE_FAILURES=0. */
int dlpg__fail_enabled(struct dlpg_group *g);

/* The job's number (core/group/job.h) once this rank is in it, else 0 (records are then off). */
int64_t dlpg__fail_gen(struct dlpg_group *g);
/* Write "<job scope>/<what>[/<rank>]" (rank < 0: no rank part); a failure is logged. */
void dlpg__fail_put(struct dlpg_group *g, const char *what, int rank, const char *val);
/* Read that key into buf (NUL-terminated). wait_s > 0: block up to that long for it; else
 * only read it if it exists. 1 when read. */
int dlpg__fail_read(struct dlpg_group *g, const char *what, int rank, double wait_s, char *buf,
                    size_t cap);
/* 1 when the last record read found the store unreachable (store_lost above). */
int dlpg__fail_store_lost(struct dlpg_group *g);
/* "the store at HOST:PORT" (or "the store") into buf, for messages. */
void dlpg__fail_store_name(struct dlpg_group *g, char *buf, size_t cap);
/* A failed record: "<rank> <status>\n<message>". */
int dlpg__fail_parse(const char *v, int *rank, const char **msg);

/* The group failed because of rank's record: remember the cause and abort (abort.c). */
void dlpg__fail_adopt(struct dlpg_group *g, int rank, const char *msg);
/* Make rank's failure (msg) the group's cause, which later calls name, unless one is set. */
void dlpg__fail_cause(struct dlpg_group *g, int rank, const char *msg);
/* Write a failed record unless one exists (the first failure stands; failure_store.c). */
void dlpg__fail_record_now(struct dlpg_group *g, const char *val);
/* Start the watcher thread (once). take_gen: join the job on this thread first (watch.c);
 * otherwise the watcher joins it. */
void dlpg__watch_start(struct dlpg_group *g, int take_gen);

#ifdef __cplusplus
}
#endif
#endif
