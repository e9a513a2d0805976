/* The reduction of every rank's slot of the step in progress (reduce_slots.c), below the
 * collectives that reduce (coll_reduce.c pipelined, eager.c in one step). */
#ifndef DLPG_SHM_REDUCE_SLOTS_H_
#define DLPG_SHM_REDUCE_SLOTS_H_

#include <stddef.h>

#include "shm/reduce.h"
#include "shm/shm.h"

/* dst[0..n) = the reduction of every rank's slot of the step in progress at byte offset
 * off, in rank order (then the avg division). */
void dlpg__shm_reduce_slots(dlpg__shm_t *sh, const dlpg__shm_reducer_t *rd, void *dst,
                            size_t off, size_t n);
/* The same with own (not NULL) read in place of this rank's slot. */
void dlpg__shm_reduce_from(dlpg__shm_t *sh, const dlpg__shm_reducer_t *rd, void *dst,
                           size_t off, size_t n, const void *own);
/* dlpg__shm_reduce_from split between the rank's helper threads (team.h). */
void dlpg__shm_reduce_many(dlpg__shm_t *sh, const dlpg__shm_reducer_t *rd, void *dst,
                           size_t off, size_t n, const void *own);

#endif
