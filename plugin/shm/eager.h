/* Collectives of one step (eager.c): run whole by the blocking functions, or started on the
 * caller's thread and finished later (shm.h's dlpg__shm_start and dlpg__shm_finish). */
#ifndef DLPG_SHM_EAGER_H_
#define DLPG_SHM_EAGER_H_

#include <stddef.h>

#include "shm/shm.h"

/* A handle's started collective (seg.h holds one per handle). */
typedef struct dlpg__shm_eager {
  int pending;           /* started and not finished yet */
  dlpg__shm_call_t call; /* what was started */
  long max_bytes;        /* most bytes dlpg__shm_start posts; < 0: it never does */
} dlpg__shm_eager_t;

/* The handle's (handle.c). */
dlpg__shm_eager_t *dlpg__shm_eager_of(dlpg__shm_t *sh);

/* 1 when c fits one step (*bytes: what this rank writes into its slot). */
int dlpg__shm_one_step(dlpg__shm_t *sh, const dlpg__shm_call_t *c, size_t *bytes);
/* Run c (one step) whole: start it waiting as long as the deadline allows, then finish it. */
dlpg_status_t dlpg__shm_run_one(dlpg__shm_t *sh, const dlpg__shm_call_t *c);

#endif
