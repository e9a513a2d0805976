/* The step interface the engine's algorithms (coll_reduce.c, coll_move.c, eager.c) are
 * written against, over the segment's transport (step.c, sync.c; layout in seg.h, which no
 * algorithm includes). A collective is a sequence of steps; in each, a rank writes its own
 * slot, posts the step, waits for the ranks whose slots it needs, and reads them:
 *
 *   dlpg__shm_coll_start   an operation begins (what every rank compares at its first step)
 *   dlpg__shm_step_begin   wait until this rank's slot of the next step is free
 *   dlpg__shm_step_slot    rank q's slot of the step in progress (write your own, read others)
 *   dlpg__shm_step_post    publish this rank's slot (the first step also compares the calls)
 *   dlpg__shm_step_wait    wait until rank q posted the step in progress
 *
 * Step k uses slot k % 2. A rank writes step k only after every rank posted k - 1, which
 * means every rank finished reading step k - 2 (reads of a step end before its reader posts
 * the next one), so a slot is never overwritten while a peer reads it, and no rank is ever
 * more than one step ahead of another.
 *
 * The algorithms read the fixed facts (rank, size, slot and piece bytes) and fill the
 * scratch copies of dlpg__shm_steps(sh); step, cur and op_first_step are the step functions'
 * own. The slot address is inline: the algorithms take it per rank per step. */
#ifndef DLPG_SHM_STEP_H_
#define DLPG_SHM_STEP_H_

#include <stddef.h>
#include <stdint.h>

#include "dlpg/dlpg.h"
#include "shm/shm.h"

struct dlpg__shm_copy;

typedef struct dlpg__shm_steps {
  int rank, size;
  uint8_t *slots;      /* rank r, slot b: slots + (2r + b) * slot_bytes */
  size_t slot_bytes;
  /* Bytes of each rank's piece of a slot where a step carries one piece per destination
   * (reduce_scatter, alltoall): the slot split in one whole number of lines per rank. */
  size_t piece_bytes;
  struct dlpg__shm_copy *copies; /* [size + 2]: scratch for dlpg__shm_copy_many */
  /* The step functions' own: */
  uint32_t step;          /* last step this rank posted */
  uint32_t cur;           /* the step in progress (step + 1 once begun) */
  uint32_t op_first_step; /* the operation in progress's first step */
} dlpg__shm_steps_t;

/* The handle's steps: its first member (seg.h), so this is a cast, not a call. */
static inline dlpg__shm_steps_t *dlpg__shm_steps(dlpg__shm_t *sh) {
  return (dlpg__shm_steps_t *)(void *)sh;
}

/* Rank q's slot of the step in progress. */
static inline uint8_t *dlpg__shm_step_slot(const dlpg__shm_steps_t *st, int q) {
  return st->slots + ((size_t)2 * (size_t)q + (st->cur & 1u)) * st->slot_bytes;
}
/* This rank's slot of the step after the one in progress: writable once every rank posted
 * the step in progress (dlpg__shm_step_wait for each), which is all step_begin of the next
 * step waits for, so a rank may write it while it still reads the step in progress. */
static inline uint8_t *dlpg__shm_step_next_slot(const dlpg__shm_steps_t *st) {
  return st->slots + ((size_t)2 * (size_t)st->rank + ((st->cur + 1u) & 1u)) * st->slot_bytes;
}

/* Start collective kind (fails when broken or aborted, or while a started one is pending);
 * count, dtype, rop and root go into the descriptor peers compare. */
dlpg_status_t dlpg__shm_coll_start(dlpg__shm_t *sh, dlpg__op_kind_t kind, uint64_t count,
                                   int dtype, int rop, int root);
/* Begin the next step: wait until every rank posted the previous one. */
dlpg_status_t dlpg__shm_step_begin(dlpg__shm_t *sh);
/* Publish this rank's slot of the step in progress. On an operation's first step, then wait
 * until every rank posted it and compare what each called with what rank 0 called: a
 * mismatch fails the operation on every rank alike (DLPG_ERR_INVALID_ARGUMENT naming both
 * ranks and both sides) after the same step, so the handle stays usable for the next,
 * matching operation. */
dlpg_status_t dlpg__shm_step_post(dlpg__shm_t *sh);
/* Publish only: the first step's comparison is left to dlpg__shm_step_check_first (a
 * collective started now and finished later). */
void dlpg__shm_step_publish(dlpg__shm_t *sh);
/* The first step's check of step_post (every rank posted it, none failed, all called the
 * same), bounded by until as dlpg__shm_wait_until: *ready = 0 when a peer has not posted
 * yet. */
dlpg_status_t dlpg__shm_step_check_first(dlpg__shm_t *sh, double until, int *ready);
/* Whether a step could begin now without waiting or failing: the handle is neither broken
 * nor aborted and every peer posted the previous step. */
int dlpg__shm_step_free(const dlpg__shm_t *sh);
/* Wait until rank q (this rank: at once) posted the step in progress. */
dlpg_status_t dlpg__shm_step_wait(dlpg__shm_t *sh, int q);
dlpg_status_t dlpg__shm_step_wait_all(dlpg__shm_t *sh);

#endif
