/* The reduction of every rank's slot of the step in progress (reduce_slots.h). */
#include "shm/reduce_slots.h"

#include <string.h>

#include "shm/seg.h"
#include "shm/team.h"

/* dst[0..n) = src[0] op src[1] op ... over the ranks' slots at byte offset off, in rank
 * order, with own (when not NULL) read in place of this rank's slot; then the avg
 * division. */
void dlpg__shm_reduce_from(dlpg__shm_t *sh, const dlpg__shm_reducer_t *rd, void *dst, size_t off,
                           size_t n, const void *own) {
  if (n == 0) return;
  const dlpg__shm_steps_t *st = &sh->st;
#define DLPG__SRC(q) \
  ((q) == st->rank && own ? (const uint8_t *)own : dlpg__shm_step_slot(st, (q)) + off)
  if (sh->st.size == 1) {
    memcpy(dst, DLPG__SRC(0), n * rd->elem);
  } else {
    rd->comb(dst, DLPG__SRC(0), DLPG__SRC(1), n);
    for (int q = 2; q < sh->st.size; q++) rd->acc(dst, DLPG__SRC(q), n);
  }
#undef DLPG__SRC
  if (rd->avg) dlpg__shm_divide(rd->dt, dst, n, sh->st.size);
}

void dlpg__shm_reduce_slots(dlpg__shm_t *sh, const dlpg__shm_reducer_t *rd, void *dst,
                            size_t off, size_t n) {
  dlpg__shm_reduce_from(sh, rd, dst, off, n, NULL);
}

typedef struct dlpg__shm_reduce_job {
  dlpg__shm_t *sh;
  const dlpg__shm_reducer_t *rd;
  uint8_t *dst;
  size_t off;
  const uint8_t *own;
} dlpg__shm_reduce_job_t;

/* Elements [lo, hi) of the job. */
static void dlpg__shm_reduce_part(void *arg, size_t lo, size_t hi) {
  const dlpg__shm_reduce_job_t *j = arg;
  size_t E = j->rd->elem;
  dlpg__shm_reduce_from(j->sh, j->rd, j->dst + lo * E, j->off + lo * E, hi - lo,
                        j->own ? j->own + lo * E : NULL);
}

void dlpg__shm_reduce_many(dlpg__shm_t *sh, const dlpg__shm_reducer_t *rd, void *dst, size_t off,
                           size_t n, const void *own) {
  dlpg__shm_reduce_job_t j = {sh, rd, dst, off, own};
  size_t grain = DLPG__SHM_PART_BYTES / rd->elem;
  dlpg__shm_team_run(dlpg__shm_helpers(sh), dlpg__shm_reduce_part, &j, n, grain);
}
