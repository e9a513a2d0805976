/* The reduction of every rank's slot of the current step (seg.h), below the collectives
 * that reduce (coll_reduce.c pipelined, eager.c in one step). */
#include <string.h>

#include "shm/reduce.h"
#include "shm/seg.h"

/* dst[0..n) = src[0] op src[1] op ... over the ranks' slots at byte offset off, in rank
 * order; then the avg division. */
void dlpg__shm_reduce_slots(dlpg__shm_t *sh, const dlpg__shm_reducer_t *rd, void *dst,
                            size_t off, size_t n) {
  if (n == 0) return;
  if (sh->size == 1) {
    memcpy(dst, dlpg__shm_cur_slot(sh, 0) + off, n * rd->elem);
  } else {
    rd->comb(dst, dlpg__shm_cur_slot(sh, 0) + off, dlpg__shm_cur_slot(sh, 1) + off, n);
    for (int q = 2; q < sh->size; q++) rd->acc(dst, dlpg__shm_cur_slot(sh, q) + off, n);
  }
  if (rd->avg) dlpg__shm_divide(rd->dt, dst, n, sh->size);
}
