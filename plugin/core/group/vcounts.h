/* The cross-rank agreement of the uneven collectives' counts (dlpg.h: "counts ... must agree
 * across ranks"), for the built-in backends that compare them: each rank publishes its
 * arrays to its peers in the backend's own way (a slot of the segment, the first message),
 * and every rank then judges all of them alike, so all fail with the same words. */
#ifndef DLPG_CORE_VCOUNTS_H_
#define DLPG_CORE_VCOUNTS_H_

#include <stddef.h>
#include <stdint.h>

#include "core/group/backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* int64 entries a rank publishes for kind (ALLGATHERV, REDUCE_SCATTER_V: its counts;
 * ALLTOALLV: its send_counts then its recv_counts); 0 for the other kinds. */
static inline size_t dlpg__vcounts_len(dlpg__op_kind_t kind, int size) {
  return kind == DLPG__OP_ALLTOALLV ? 2 * (size_t)size
         : kind == DLPG__OP_ALLGATHERV || kind == DLPG__OP_REDUCE_SCATTER_V ? (size_t)size
                                                                            : 0;
}

/* This rank's entries of op (dlpg__vcounts_len of them) into dst. */
void dlpg__vcounts_publish(const dlpg__be_op_t *op, int size, int64_t *dst);

/* pub[r]: rank r's published entries. 0 when they agree; else 1 and the first disagreement
 * in buf, in an order every rank follows: "rank 0 sends 4 elements to rank 2 but rank 2
 * expects 3 from rank 0" (ALLTOALLV), "rank 0 has counts[2] = 5 but rank 1 has counts[2] =
 * 4" (the others, every rank against rank 0). */
int dlpg__vcounts_disagree(dlpg__op_kind_t kind, int size, const int64_t *const *pub, char *buf,
                           size_t cap);

#ifdef __cplusplus
}
#endif
#endif
