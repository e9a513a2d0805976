/* Failure propagation. A rank whose operation fails (timeout, abort, a
 * backend I/O or NCCL error, an argument check that only it failed) records that in the
 * store under the group; a per-group watcher thread polls the store while the group's
 * operations are blocked and aborts the local group when a peer's record appears, so peers
 * end within about a second with DLPG_ERR_REMOTE naming the failing rank and its message
 * instead of after their full deadline.
 *
 * Keys, all under the group's job scope "<group>/dlpg/j<id>" (core/group/job.h: one job's, agreed
 * by its ranks, so a new job under the same name never reads an earlier one's records, and
 * a rank that never joined its job writes and reads none):
 *   failed              "<rank> <status>\n<message>": the group's fatal failure
 *   rejected            "<rank> <p2p> <seq> <peer>\n<message>": an operation refused at the
 *                       call on one rank; peers still blocked in that operation a moment
 *                       later treat it as fatal (a rank that rejects and retries at once is
 *                       not a failure)
 *   progress/<rank>     "<coll started> <coll done> <p2p started> <p2p done> <unix time of
 *                       the last collective's issue>", written by the watcher while an
 *                       operation is blocked (and once when it unblocks) and, while none is,
 *                       at most once a second when the rank issued a collective since
 *                       (progress.h); read by a stall warning and a timing-out rank to say
 *                       who had not called the collective, and when they last called one.
 * Nothing is written or read on the hot path: an operation costs one atomic load here. */
#ifndef DLPG_CORE_FAILURE_H_
#define DLPG_CORE_FAILURE_H_

#include <stddef.h>
#include <stdint.h>

#include "dlpg/dlpg.h"
#include "core/group/op.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dlpg_group;

/* The group's watcher state (no thread yet). NULL on no memory: propagation is then off. */
struct dlpg__watch *dlpg__watch_new(void);
/* At the group's last release (the thread, if any, has exited or holds a reference). */
void dlpg__watch_free(struct dlpg__watch *w);
/* An operation was issued: start the watcher at the group's first (one atomic load after). */
void dlpg__watch_op(struct dlpg_group *g);
/* This rank rejected a call: for a while, each of its next calls first reads the group's
 * failure record (dlpg__watch_check_rejected), so one its peers wrote in its name while it
 * was rejected ends that call at the door instead of letting it meet their failed op. */
void dlpg__watch_rejected(struct dlpg_group *g);
/* At an operation's door: within that while, read the failure record (a read that does not
 * wait) and abort the group when there is one; otherwise one atomic load. */
void dlpg__watch_check_rejected(struct dlpg_group *g);
/* At destroy: stop the watcher (bounded; a thread stuck in the store is detached). */
void dlpg__watch_stop(struct dlpg_group *g);

/* 1 and "group "x" failed on rank 1: <message>" into buf once the group was aborted because
 * of a peer's failure; else 0. */
int dlpg__failure_remote(struct dlpg_group *g, char *buf, size_t cap);
/* An operation of this rank was rejected at the call (msg: its message). */
void dlpg__failure_rejected(struct dlpg_group *g, dlpg__op_kind_t kind, int peer,
                            const char *msg);
/* Rank 0 refused rank into the group's job and rank read why (msg: its world size differs;
 * core/group/job.c): record it as the group's failure in rank's name, so every rank of the
 * job fails within about a second with msg instead of at its timeout. */
void dlpg__failure_refused(struct dlpg_group *g, int rank, const char *msg);
/* An operation of this rank failed with st and msg (flight_id: its flight recorder entry).
 * Statuses that peers see too (INVALID_ARGUMENT, UNSUPPORTED: a mismatch every rank
 * detects) and local aborts pass unchanged. Otherwise a peer's earlier record, if any, turns
 * the failure into DLPG_ERR_REMOTE naming that peer; else this rank's failure is recorded
 * (with, for a timeout, which ranks had not reached the operation). Either way the group is
 * aborted. Returns the status to report and rewrites msg (capacity cap). Blocking (store
 * round trips, bounded); call without locks that other operations need. */
dlpg_status_t dlpg__failure_op_failed(struct dlpg_group *g, uint64_t flight_id,
                                      dlpg_status_t st, char *msg, size_t cap);
/* dlpg_work_wait's deadline passed on an operation: records the failure and writes into
 * note "coll_seq 7; rank 2 had not reached coll_seq 7 (...); rank 1 published no progress,
 * so whether it reached coll_seq 7 is unknown" for the caller's message. */
void dlpg__failure_timed_out(struct dlpg_group *g, uint64_t flight_id, const char *op_name,
                             double timeout_s, char *note, size_t cap);
/* Abort the group. The first time, why is recorded for the peers unless a failure was
 * already recorded or came from a peer (the watcher writes it, so an abort never waits on
 * the store), the abort is logged and the flight recorder is dumped; then the group's
 * operations are cut short (abort.h). how: what happened, in the words the peers will read
 * after "group "x" failed on rank N: " ("dlpg_group_abort was called"); NULL for core's own
 * abort after a failed or timed-out operation (whose failure is normally recorded already). */
void dlpg__group_abort_because(struct dlpg_group *g, const char *how);
void dlpg__group_abort(struct dlpg_group *g);

#ifdef __cplusplus
}
#endif
#endif
