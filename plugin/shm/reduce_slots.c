/* The reduction of every rank's slot of the current step (seg.h), below the collectives
 * that reduce (coll_reduce.c pipelined, eager.c in one step). */
#include <string.h>

#include "shm/reduce.h"
#include "shm/seg.h"

/* dst[0..n) = src[0] op src[1] op ... over the ranks' slots at byte offset off, in rank
 * order, with own (when not NULL) read in place of this rank's slot; then the avg
 * division. */
void dlpg__shm_reduce_from(dlpg__shm_t *sh, const dlpg__shm_reducer_t *rd, void *dst, size_t off,
                           size_t n, const void *own) {
  if (n == 0) return;
#define DLPG__SRC(q) \
  ((q) == sh->rank && own ? (const uint8_t *)own : dlpg__shm_cur_slot(sh, (q)) + off)
  if (sh->size == 1) {
    memcpy(dst, DLPG__SRC(0), n * rd->elem);
  } else {
    rd->comb(dst, DLPG__SRC(0), DLPG__SRC(1), n);
    for (int q = 2; q < sh->size; q++) rd->acc(dst, DLPG__SRC(q), n);
  }
#undef DLPG__SRC
  if (rd->avg) dlpg__shm_divide(rd->dt, dst, n, sh->size);
}

void dlpg__shm_reduce_slots(dlpg__shm_t *sh, const dlpg__shm_reducer_t *rd, void *dst,
                            size_t off, size_t n) {
  dlpg__shm_reduce_from(sh, rd, dst, off, n, NULL);
}
