/* A rank's progress record, "progress/<rank>" under the group's job scope (failure.h):
 * "<coll started> <coll done> <p2p started> <p2p done> <unix time of the last collective's
 * issue> <unix time of the write>", written by the failure watcher (watch.c) while an
 * operation is blocked (again every DLPG__PROGRESS_BEAT_S while it stays blocked), when an
 * operation the record showed open has ended, and, while none is in flight, at most once a
 * second when the rank issued a collective since its last write; so a rank that is slow
 * outside dlpg (in its data loader) still says which collective it last called and when, and
 * a rank inside a collective whose record stopped being rewritten is one whose process stopped
 * running (SIGSTOP, a hang, no CPU). Read by the stall warning and the timeout message to say
 * which ranks have not called the collective a rank is blocked in, or are stuck inside it. */
#ifndef DLPG_CORE_PROGRESS_H_
#define DLPG_CORE_PROGRESS_H_

#include <stddef.h>
#include <stdint.h>

#include "core/health/flight.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dlpg_group;

/* While blocked, a rank rewrites its record at least this often. */
#define DLPG__PROGRESS_BEAT_S 0.5
/* A record that shows its rank inside the collective but was written this long ago names the
 * rank as possibly stuck: four missed rewrites. */
#define DLPG__PROGRESS_STALE_S (4 * DLPG__PROGRESS_BEAT_S)

/* The record's state for p (this rank's counters, without the write time) into v. */
void dlpg__progress_format(const dlpg__flight_progress_t *p, char *v, size_t cap);
/* The record to write: state (from dlpg__progress_format) and the write time, into rec. */
void dlpg__progress_stamp(const char *state, char *rec, size_t cap);

/* What the records of the peers say about coll_seq e->seq (e: this rank's blocked
 * collective), as clauses each starting with "; ": "; rank 1 has not called dlpg_allreduce
 * (coll_seq 16): its last call was coll_seq 15, 12.3 s ago" (once this rank was blocked
 * long enough for the records to have caught up; before, "; rank 1 had not reached coll_seq
 * 16 (rank 1 last started coll_seq 15)": as of its record), "; rank 2 published no
 * progress, so whether it reached coll_seq 16 is unknown", "; rank 3 reached coll_seq 16
 * but has not rewritten its progress record for 2.9 s (...)". Reads at most read_max records
 * (one store round trip each). *read: the records read; *named: the ranks named (behind,
 * unknown or stuck); 0 means every record read shows the collective started by a rank that
 * still runs. */
void dlpg__progress_coll_note(struct dlpg_group *g, const dlpg__flight_entry_t *e, int read_max,
                              char *buf, size_t cap, int *read, int *named);

#ifdef __cplusplus
}
#endif
#endif
