/* Failure propagation, private to core (failure.h is the interface): the per-group state
 * that failure.c (records, causes, messages), failure_store.c (the store records) and
 * watch.c (the watcher thread) share. */
#ifndef DLPG_CORE_FAILURE_IMPL_H_
#define DLPG_CORE_FAILURE_IMPL_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/failure.h"
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
  /* The incarnation number (0 until known; -1: the store could not give one). */
  pthread_mutex_t gen_mu;
  int64_t gen;
  /* The group failed because of a peer: cause is final once remote is set. */
  atomic_int remote;
  char cause[DLPG__ERROR_MAX];
  atomic_int recorded;              /* this rank wrote (or is writing) the failed key */
  int hard_pending, soft_pending;   /* records for the watcher to write (under mu) */
  /* Until when (dlpg__now() in ms) this rank's calls look for the group's failure record at
   * the door: set when this rank rejected a call (dlpg__watch_rejected). */
  atomic_llong rejected_until_ms;
  char hard_val[DLPG__ERROR_MAX + 64], soft_val[DLPG__ERROR_MAX + 64];
};

/* Propagation applies to groups of two or more ranks, unless DLPG_PROPAGATE_FAILURES=0. */
int dlpg__fail_enabled(struct dlpg_group *g);

/* The incarnation number, taken from the store once (> 0), or 0 when the store failed. */
int64_t dlpg__fail_gen(struct dlpg_group *g);
/* Write "<name>/dlpg/<what>/<gen>[/<rank>]" (rank < 0: no rank part); a failure is logged. */
void dlpg__fail_put(struct dlpg_group *g, const char *what, int rank, const char *val);
/* Read that key into buf (NUL-terminated). wait_s > 0: block up to that long for it; else
 * only read it if it exists. 1 when read. */
int dlpg__fail_read(struct dlpg_group *g, const char *what, int rank, double wait_s, char *buf,
                    size_t cap);
/* A failed record: "<rank> <status>\n<message>". */
int dlpg__fail_parse(const char *v, int *rank, const char **msg);

/* The group failed because of rank's record: remember the cause and abort (abort.c). */
void dlpg__fail_adopt(struct dlpg_group *g, int rank, const char *msg);
/* Write a failed record unless one exists (the first failure stands; failure_store.c). */
void dlpg__fail_record_now(struct dlpg_group *g, const char *val);
/* Start the watcher thread (once). take_gen: take the incarnation on this thread first
 * (watch.c). */
void dlpg__watch_start(struct dlpg_group *g, int take_gen);

#ifdef __cplusplus
}
#endif
#endif
