/* The job a group belongs to. A store may outlive many jobs that use one group name (a
 * long-lived dlpg-store or Redis server, a process that re-makes a group after a failure),
 * so every key a group writes after its creation (failure records, progress, localities,
 * the backends' rendezvous) lives under a scope that belongs to exactly one job and that
 * all its ranks agree on: "<name>/dlpg/j<id>".
 *
 * Rank 0 takes id with one atomic add on "<name>/dlpg/job/n" when it makes the group and,
 * from its first operation on (a group it makes and destroys unused admits nobody), a
 * thread of its group answers the others: rank r != 0, at its first operation, posts
 * "<name>/dlpg/job/hello/<r>" = "<nonce> <size>" (a fresh random nonce), knocks (adds 1 to
 * "<name>/dlpg/job/knock") and waits for "<name>/dlpg/job/welcome/<r>/<nonce>", which only
 * this job's rank 0 can write: the id, or "!<id> message" (world sizes differ; the rank then
 * adds 1 to "<scope>/refused/<r>" and rank 0's thread has the job's ranks told, through the
 * group's observer, so they fail at once with the same message). It then counts
 * itself in under "<scope>/claim/<r>" (2 there: two processes claim rank r) and knocks again;
 * rank 0's thread ends once every rank claimed its place. A stale hello (of a rank of an
 * earlier job) gets an answer nobody reads, so whatever an earlier job's ranks did, a new
 * job never reads its keys. A rank's first operation waits only for rank 0 to have issued
 * its first operation on the group, not for the other ranks (pairwise transfers between
 * two ranks need no third). */
#ifndef DLPG_CORE_JOB_H_
#define DLPG_CORE_JOB_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "dlpg/dlpg.h"
#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dlpg_group;

/* "<name>/dlpg/j<id>" with its NUL: group names are at most 512 bytes. */
#define DLPG__JOB_SCOPE_MAX 560

struct dlpg__job {
  pthread_mutex_t mu; /* the join, and the fields below */
  pthread_cond_t cv;  /* CLOCK_MONOTONIC: the answering thread's sleep and exit */
  int64_t id;         /* > 0 agreed; 0 not yet; -1 this rank could not join (err, msg) */
  atomic_int known;   /* id > 0 and scope set: read lock-free after this (acquire) */
  dlpg_status_t err;
  char msg[DLPG__ERROR_MAX];
  char scope[DLPG__JOB_SCOPE_MAX];
  atomic_int stop;    /* destroy: end a join in progress and the answering thread */
  atomic_int admitting; /* rank 0: its first operation started the answering thread */
  int have_thread, exited, detached;
  pthread_t thread;
};

/* With the group (job_state.c); NULL on no memory (the group then fails its first
 * operation). Freed at the group's last release. */
struct dlpg__job *dlpg__job_new(void);
void dlpg__job_free(struct dlpg__job *j);

/* At creation, once name, rank, size and store are set: rank 0 takes the id (a failure is
 * kept and reported by the first operation). Other ranks do nothing yet: creation waits for
 * nobody. */
void dlpg__job_start(struct dlpg_group *g);
/* The id agreed with rank 0, joining now if this rank has not (blocking: up to the group's
 * timeout for rank 0's answer; the group's abort or destroy ends it); on rank 0, the first
 * call starts admitting the others (two or more ranks). DLPG_OK once known;
 * a failure is final for the group and every later call repeats its status and message. */
dlpg_status_t dlpg__job_join(struct dlpg_group *g);
/* The id if already known (> 0), else 0; never blocks. Inline: readers of the scope (the
 * failure records, the localities) need no call into the join. */
static inline int64_t dlpg__job_id(const struct dlpg__job *j) {
  return j && atomic_load_explicit(&j->known, memory_order_acquire) ? j->id : 0;
}
/* "<name>/dlpg/j<id>" once known, else NULL; never blocks. */
static inline const char *dlpg__job_scope(const struct dlpg__job *j) {
  return j && atomic_load_explicit(&j->known, memory_order_acquire) ? j->scope : NULL;
}
/* A child of dlpg_group_split (g, not yet handed out): in parent's job, already agreed,
 * with the scope "<parent's scope><suffix>"; nobody is admitted. DLPG_ERR_INVALID_ARGUMENT
 * when the scope would not fit DLPG__JOB_SCOPE_MAX (a long name split many levels deep). */
dlpg_status_t dlpg__job_inherit(struct dlpg_group *g, const struct dlpg__job *parent,
                                const char *suffix);
/* At destroy: end a join in progress and rank 0's thread (bounded; a thread stuck in the
 * store is detached and ends on its own, holding its reference to the group). */
void dlpg__job_stop(struct dlpg_group *g);

#ifdef __cplusplus
}
#endif
#endif
