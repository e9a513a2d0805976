/* A rank's helper threads for the copies and reductions of its large collectives. One core
 * copies at a fraction of what the memory can do (16-core host: one core's memcpy 5-12 GB/s;
 * 2 ranks with 8 threads each ran a 16 MiB allreduce 4.3x as fast as with one), so where
 * the CPUs outnumber the ranks each rank splits its share of every chunk with threads of its
 * own, as DeepSpeed's CPU shared-memory allreduce does with OpenMP in some versions. The helpers only copy and reduce memory the
 * caller's thread hands them: every wait on a peer, every failure and every deadline stays
 * on the caller's thread, so a collective fails and ends exactly as without them.
 *
 * Parts are claimed, not assigned: a helper that is late (descheduled, asleep) leaves its
 * parts to the others, the caller included, so the caller never waits for a helper that
 * has not started. A helper that finished spins briefly for the next job (the next chunk
 * comes within microseconds), then sleeps on a private futex. */
#ifndef DLPG_SHM_TEAM_H_
#define DLPG_SHM_TEAM_H_

#include <stddef.h>

typedef struct dlpg__shm_team dlpg__shm_team_t;

/* Do the part [lo, hi) of a job of n units. */
typedef void (*dlpg__shm_part_fn)(void *arg, size_t lo, size_t hi);

/* A team of `threads` threads in all: the caller and threads - 1 helpers. NULL when
 * threads <= 1 or a helper could not be started (the caller then works alone). */
dlpg__shm_team_t *dlpg__shm_team_new(int threads);
/* Stop and join the helpers (in a forked child, which has none: only free). NULL ok. */
void dlpg__shm_team_free(dlpg__shm_team_t *t);

/* Run fn over [0, n) in parts of at least `grain` units (parts are multiples of it but the
 * last), on the caller and the helpers; returns once every part is done, with the parts'
 * writes visible to the caller (so a release by the caller publishes them). A NULL team or
 * a job of one part runs fn(arg, 0, n) on the caller alone. */
void dlpg__shm_team_run(dlpg__shm_team_t *t, dlpg__shm_part_fn fn, void *arg, size_t n,
                        size_t grain);

#endif
