/* A rank's progress record, "progress/<rank>" under the group's job scope (failure.h):
 * "<coll started> <coll done> <p2p started> <p2p done> <unix time of the last collective's
 * issue>", written by the failure watcher (watch.c) while an operation is blocked and, while
 * none is, at most once a second when the rank issued a collective since its last write; so
 * a rank that is slow outside dlpg (in its data loader) still says which collective it last
 * called and when. Read by the stall warning and the timeout message to say which ranks have
 * not called the collective a rank is blocked in. */
#ifndef DLPG_CORE_PROGRESS_H_
#define DLPG_CORE_PROGRESS_H_

#include <stddef.h>
#include <stdint.h>

#include "core/health/flight.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dlpg_group;

/* The record's value for p (this rank's counters) into v. */
void dlpg__progress_format(const dlpg__flight_progress_t *p, char *v, size_t cap);

/* What the records of the peers say about coll_seq e->seq (e: this rank's blocked
 * collective), as clauses each starting with "; ": "; rank 1 has not called dlpg_allreduce
 * (coll_seq 16): its last call was coll_seq 15, 12.3 s ago" (once this rank was blocked
 * long enough for the records to have caught up; before, "; rank 1 had not reached coll_seq
 * 16 (rank 1 last started coll_seq 15)": as of its record), "; rank 2 published no
 * progress, so whether it reached coll_seq 16 is unknown". Reads at most read_max records
 * (one store round trip each). *read: the records read; *named: the ranks named (behind or
 * unknown); 0 means every record read shows the collective started. */
void dlpg__progress_coll_note(struct dlpg_group *g, const dlpg__flight_entry_t *e, int read_max,
                              char *buf, size_t cap, int *read, int *named);

#ifdef __cplusplus
}
#endif
#endif
