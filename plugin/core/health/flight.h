/* The flight recorder (model: torch's NCCL flight recorder): a bounded ring of a group's last
 * operations, filled by core when it issues an operation, when the operation starts (the
 * worker picks it up, or the caller-thread backend enqueues it) and when its work completes.
 * Dumped to the log on timeout, abort or remote failure (and, with DLPG_FLIGHT_RECORDER_DUMP,
 * to a JSON file per rank: flight_file.c), readable through
 * dlpg_group_flight_record, and the source of each rank's progress (the last collective
 * sequence number started and completed) that the failure watcher publishes (failure.h).
 * Sequence numbers count collectives (barrier included) and point-to-point operations
 * separately, from 1, in issue order: collectives agree across ranks, p2p counts do not. */
#ifndef DLPG_CORE_FLIGHT_H_
#define DLPG_CORE_FLIGHT_H_

#include <stddef.h>
#include <stdint.h>

#include "core/group/op.h"

#ifdef __cplusplus
extern "C" {
#endif

struct dlpg_group;

typedef enum dlpg__flight_state {
  DLPG__FL_QUEUED,   /* issued, not yet running */
  DLPG__FL_STARTED,  /* running (CPU) or enqueued on its stream (CUDA, with a work handle) */
  DLPG__FL_ENQUEUED, /* CUDA without a work handle: enqueued, completion not observed */
  DLPG__FL_DONE,
  DLPG__FL_FAILED
} dlpg__flight_state_t;

typedef struct dlpg__flight_entry {
  uint64_t id;           /* 1-based issue index in the group; 0: empty slot */
  uint64_t seq;          /* collective or p2p sequence number (p2p says which) */
  int p2p;
  dlpg__op_kind_t kind;
  int backend;           /* registry slot */
  int dtype;             /* dlpg__dtype_t; -1 for a barrier */
  int64_t count;         /* elements of inputs[0] */
  int ntensors;
  int device_type;
  uint64_t device_ids;   /* bit per device id below 64 */
  int peer;              /* SEND/RECV: the peer; BROADCAST/REDUCE: the root; else -1 */
  int tag;               /* SEND/RECV: the tag; else 0 */
  dlpg__flight_state_t state;
  dlpg_status_t status;
  double t_issue, t_start, t_end; /* dlpg__now(); 0 until reached */
} dlpg__flight_entry_t;

/* What the watcher and the timeout message need, read in one lock. */
typedef struct dlpg__flight_progress {
  uint64_t coll_started, coll_done; /* highest collective seq issued / completed */
  double coll_issued_at;             /* dlpg__now() when coll_started was issued (0: none) */
  uint64_t p2p_started, p2p_done;
  uint64_t finished;                /* completions so far (progress detector) */
  int inflight;                     /* tracked operations not yet completed */
  dlpg__flight_entry_t oldest;      /* oldest in-flight entry still in the ring (id 0: none) */
} dlpg__flight_progress_t;

/* The group's recorder (capacity from DLPG_FLIGHT_RECORDER_ENTRIES). NULL on no memory:
 * every function below accepts a group without one. */
struct dlpg__flight *dlpg__flight_new(void);
void dlpg__flight_free(struct dlpg__flight *f);

/* Record op as issued and return its id. tracked: a work record will report its
 * completion (else the entry is ENQUEUED at once and never in flight). */
uint64_t dlpg__flight_issue(struct dlpg_group *g, const dlpg__op_t *op, int tracked);
/* The entry's operation started (once), and runs on backend when >= 0, whatever its state:
 * the group's choice, made at its first operation, or the next line a send or receive was
 * handed to, may differ from the line validation gave it. */
void dlpg__flight_start_on(struct dlpg_group *g, uint64_t id, int backend);
/* Completion (the work's status); logs the entry with its duration under DLPG_DEBUG=TRACE. */
void dlpg__flight_finish(struct dlpg_group *g, uint64_t id, dlpg_status_t st);
/* A work freed before it completed: no longer in flight (state ENQUEUED). */
void dlpg__flight_untrack(struct dlpg_group *g, uint64_t id);

void dlpg__flight_progress(struct dlpg_group *g, dlpg__flight_progress_t *p);
/* The entry of id if still in the ring (1), else 0. */
int dlpg__flight_get(struct dlpg_group *g, uint64_t id, dlpg__flight_entry_t *out);
/* "coll_seq=3 op=dlpg_allreduce dtype=float32 count=1000 devices=cpu peer=- ..." */
void dlpg__flight_format_entry(const dlpg__flight_entry_t *e, char *buf, size_t cap);
/* Every entry, oldest first, one line each, into buf (NUL-terminated when cap > 0); returns
 * the length the whole text needs, without the NUL. */
size_t dlpg__flight_format(struct dlpg_group *g, char *buf, size_t cap);
/* WARN lines: why (naming the group), then every entry. */
void dlpg__flight_dump(struct dlpg_group *g, const char *why);
/* "queued", "started", "enqueued", "done", "failed". */
const char *dlpg__flight_state_name(dlpg__flight_state_t s);
/* A copy of the live entries, oldest first, into *out (malloc'd, the caller frees; NULL when
 * none), the ring's capacity and the progress counters; returns the number of entries. */
int dlpg__flight_entries(struct dlpg_group *g, dlpg__flight_entry_t **out, int *capacity,
                         dlpg__flight_progress_t *p);
/* The dump at an abort (flight_file.c): dlpg__flight_dump's lines, and the record as JSON in
 * DLPG_FLIGHT_RECORDER_DUMP's file for this group and rank when that is set (one log line
 * says where, or why not). */
void dlpg__flight_dump_all(struct dlpg_group *g, const char *why);
/* Only the JSON file of that dump (a rank that adopts a peer's failure: the trace tool reads
 * every rank's record, while the log's dump belongs to the rank that failed first). */
void dlpg__flight_dump_file_only(struct dlpg_group *g, const char *why);
/* This thread's own failure (what it records for its peers), which the next dump on this
 * thread adds to its reason: the abort that follows a local failure only knows that the
 * group was aborted. The dump clears it. */
void dlpg__flight_dump_cause(const char *what);

#ifdef __cplusplus
}
#endif
#endif
