/* The shared segment's layout and the engine's private handle, shared by the engine's
 * files (create, sync, collectives, pair channels). Nothing outside plugin/shm includes
 * it: the segment's layout is a contract between the ranks of one build only (rank 0
 * writes the version; a mismatch makes the creation fail rather than misread memory).
 *
 * Layout, each part aligned to DLPG__SHM_LINE so a counter one rank writes never shares a
 * cache line with another rank's:
 *   header | size rank blocks | size*size pair channel blocks |
 *   2 collective slots per rank | 2 pair slots per ordered pair
 * The slots are large but only the pages ranks touch are ever backed by memory. */
#ifndef DLPG_SHM_SEG_H_
#define DLPG_SHM_SEG_H_

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dlpg/dlpg.h"
#include "shm/shm.h"

#define DLPG__SHM_LINE 128 /* two lines: adjacent-line prefetch pulls pairs */
#define DLPG__SHM_MAGIC 0x316d687367706c64ull /* "dlpgshm1" */
#define DLPG__SHM_VERSION 1u
/* Reducing inputs up to DLPG__SHM_SMALL_BYTES take one step while what each rank then reads,
 * size inputs, stays within DLPG__SHM_SMALL_READ: below that a second synchronisation costs
 * more than reading every rank's input; above it the two-step path wins (16 cores: 4 ranks
 * took 44 us for 64 KiB in one step, 40 us for 128 KiB in two; 8 ranks 95 us for 64 KiB in
 * one, 59 us for 128 KiB in two). */
#define DLPG__SHM_SMALL_BYTES ((size_t)64 << 10)
#define DLPG__SHM_SMALL_READ ((size_t)128 << 10)

/* A rank's state in the segment, read by peers in their slow path. */
enum { DLPG__SHM_JOINING = 0, DLPG__SHM_ALIVE = 1, DLPG__SHM_LEFT = 2, DLPG__SHM_ABORTED = 3,
       DLPG__SHM_FAILED = 4 };

/* What a rank called as its collective #opno, so peers can tell a mismatch from a step. */
typedef struct dlpg__shm_desc {
  uint32_t opno;
  uint16_t kind; /* dlpg__shm_kind_t */
  uint8_t dtype, rop;
  int32_t root;
  /* What the caller named this operation (dlpg__shm_describe_next), for messages and the
   * comparison: its dlpg__op_kind_t and dtype (0xff: not named), its element counts. */
  uint8_t call_kind, call_dtype;
  uint16_t pad;
  uint64_t count; /* elements (reducing ops) or bytes */
  int64_t in_numel, out_numel;
} dlpg__shm_desc_t;

typedef struct dlpg__shm_rankctl {
  _Alignas(DLPG__SHM_LINE) _Atomic uint32_t seq; /* last collective step posted (futex) */
  _Atomic uint32_t seq_waiters;                  /* peers sleeping on seq */
  _Atomic int32_t state;
  int32_t pid;                                   /* as this rank sees itself */
  uint64_t starttime;                            /* /proc/<pid>/stat field 22: pid reuse */
  /* Written before the first step of an op, indexed by opno % 2: a peer is at most one
   * step ahead (every step waits for all ranks' previous one), so it cannot overwrite the
   * descriptor a slower rank is still comparing. */
  dlpg__shm_desc_t desc[2];
  char reason[256]; /* the message of this rank's failure, written before state */
  /* The CPU this rank last spun on (-1: not yet): a waiter that finds the peer it waits for
   * on its own CPU moves off it or yields it (sync.c). A line of its own, so writing it does
   * not disturb peers polling seq. */
  _Alignas(DLPG__SHM_LINE) _Atomic int32_t cpu;
} dlpg__shm_rankctl_t;

/* Ordered pair src -> dst: sent is written by src only, done by dst only (own lines). */
typedef struct dlpg__shm_chan {
  _Alignas(DLPG__SHM_LINE) _Atomic uint32_t sent; /* chunks written by src (futex) */
  _Atomic uint32_t sent_waiters;
  _Alignas(DLPG__SHM_LINE) _Atomic uint32_t done; /* chunks consumed by dst (futex) */
  _Atomic uint32_t done_waiters;
} dlpg__shm_chan_t;

/* The head of each pair slot; the chunk's bytes follow at DLPG__SHM_P2P_HEAD. */
typedef struct dlpg__shm_msg {
  uint64_t total; /* bytes of the whole message */
  int32_t tag;
  uint32_t len;   /* bytes in this chunk */
} dlpg__shm_msg_t;
#define DLPG__SHM_P2P_HEAD 64

typedef struct dlpg__shm_header {
  uint64_t magic;
  uint64_t nonce;
  uint32_t version, size;
  uint64_t slot_bytes, p2p_slot_bytes, total_bytes;
  uint64_t off_ctl, off_chan, off_slots, off_p2p;
} dlpg__shm_header_t;

/* One of several copies a collective does together (copy_out.h). */
typedef struct dlpg__shm_copy {
  uint8_t *dst;
  const uint8_t *src;
  size_t len;
} dlpg__shm_copy_t;

/* Bytes of the smallest part a helper thread takes of a copy or reduction (team.h). */
#define DLPG__SHM_PART_BYTES ((size_t)64 << 10)

typedef enum dlpg__shm_kind {
  DLPG__SHM_ALLREDUCE = 1, DLPG__SHM_REDUCE, DLPG__SHM_BROADCAST, DLPG__SHM_ALLGATHER,
  DLPG__SHM_REDUCE_SCATTER, DLPG__SHM_ALLTOALL, DLPG__SHM_BARRIER
} dlpg__shm_kind_t;

struct dlpg__shm {
  int rank, size;
  uint8_t *base;
  size_t map_bytes;
  dlpg__shm_header_t *hdr;
  dlpg__shm_rankctl_t *ctl;  /* [size] */
  dlpg__shm_chan_t *chan;    /* [src * size + dst] */
  uint8_t *slots;            /* rank r, slot b: slots + (2r + b) * slot_bytes */
  uint8_t *p2p;              /* pair (s,d), slot b: p2p + ((s*size + d)*2 + b) * p2p_slot_bytes */
  size_t slot_bytes, p2p_slot_bytes;
  size_t stream_bytes; /* output bytes from which copies into the output stream (copy_out.c) */
  double timeout_s;
  int spin;
  double yield_s; /* after the spin, seconds of sched_yield before a futex sleep */
  double moved_at; /* when this rank last left a CPU it shared with a peer (sync.c) */
  _Atomic int aborted;       /* set by dlpg__shm_abort from any thread */
  const int *create_abort;   /* the creation's abort flag (config), or NULL */
  /* The caller's thread only: */
  uint32_t step;             /* last collective step this rank posted */
  uint32_t cur;              /* the step in progress (step + 1 once begun) */
  uint32_t opno;             /* collectives issued */
  uint32_t *sent, *recvd;    /* [size] chunks this rank sent to / received from a peer */
  dlpg_status_t broken;      /* first failure; later operations repeat it */
  char broken_msg[512];
  /* The operation in progress, for messages and deadlines. */
  /* What messages call it: a pair operation's name, or NULL for the collective in progress
   * (label_kind #label_opno), formatted into op_label only when a message needs it
   * (dlpg__shm_what): a snprintf per call would be a good part of a small one's time. */
  const char *op_name;
  char op_label[48];          /* "allreduce #7" */
  int label_kind;             /* dlpg__shm_kind_t */
  uint32_t label_opno;
  dlpg__shm_desc_t desc;      /* of the collective in progress */
  dlpg__shm_desc_t next;      /* call_* fields for the next collective (describe_next) */
  int next_set;
  uint32_t op_first_step;
  double deadline;
  /* The one-step collective started and not finished yet (eager.c), and its deadline (a
   * pair operation in between sets its own). */
  int pending;
  dlpg__shm_call_t pend;
  double pend_deadline;
  long eager_bytes;          /* most bytes dlpg__shm_start posts; < 0: it never does */
  /* Threads that copy and reduce large collectives, the caller's included (team.h); the
   * team is started at the first collective that can use it. */
  int threads;
  struct dlpg__shm_team *team;
  int team_tried;
  dlpg__shm_copy_t *copies;  /* [size + 2]: scratch for dlpg__shm_copy_many */
};

/* Addresses of the parts. */
static inline uint8_t *dlpg__shm_slot(const dlpg__shm_t *sh, int r, uint32_t step) {
  return sh->slots + ((size_t)2 * (size_t)r + (step & 1u)) * sh->slot_bytes;
}
static inline uint8_t *dlpg__shm_p2p_slot(const dlpg__shm_t *sh, int s, int d, uint32_t n) {
  return sh->p2p + (((size_t)s * (size_t)sh->size + (size_t)d) * 2 + (n & 1u)) *
                       sh->p2p_slot_bytes;
}
static inline dlpg__shm_chan_t *dlpg__shm_chan(const dlpg__shm_t *sh, int s, int d) {
  return &sh->chan[(size_t)s * (size_t)sh->size + (size_t)d];
}
/* One spin of a waiting loop: tells the core (and its hyperthread sibling) that this
 * thread only waits. */
static inline void dlpg__shm_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* a >= b for counters that wrap around. */
static inline int dlpg__shm_ge(uint32_t a, uint32_t b) { return (int32_t)(a - b) >= 0; }

/* handle.c: the team of helper threads, started on first use; NULL when this rank works
 * alone (one thread configured, or the helpers could not be started). */
struct dlpg__shm_team *dlpg__shm_helpers(dlpg__shm_t *sh);

/* sync.c: waiting and waking. */
/* "allreduce", ... for a dlpg__shm_kind_t. */
const char *dlpg__shm_kind_name(int kind);
/* The name of the operation in progress for a message ("allreduce #7"). */
const char *dlpg__shm_what(dlpg__shm_t *sh);
/* Start an operation named name (for messages; NULL: the collective label_kind and
 * label_opno say): fails at once when broken or aborted, sets the deadline. */
dlpg_status_t dlpg__shm_op_start(dlpg__shm_t *sh, const char *name);
/* Wait until *word >= target, where word is written by rank peer: spin, then sleep on the
 * shared futex in slices, checking abort, the peer's state and life, and the deadline.
 * what names the wait for a timeout ("reach allreduce #7"). Failure breaks the handle. */
dlpg_status_t dlpg__shm_wait(dlpg__shm_t *sh, _Atomic uint32_t *word, _Atomic uint32_t *waiters,
                             uint32_t target, int peer, const char *what);
/* The same, bounded by the caller too: at `until` (dlpg__now() seconds, before the
 * deadline) it returns DLPG_OK with *ready = 0, having failed nothing. until <= 0: one look
 * at the word (and the abort flag and the deadline), no spinning, no sleeping. */
dlpg_status_t dlpg__shm_wait_until(dlpg__shm_t *sh, _Atomic uint32_t *word,
                                   _Atomic uint32_t *waiters, uint32_t target, int peer,
                                   const char *what, double until, int *ready);
/* A peer that failed or was aborted (its state in the segment), as this rank's failure
 * naming it; DLPG_OK otherwise. Its posted steps may still be there, so a wait alone would
 * not notice it: operations ask at their first step. */
dlpg_status_t dlpg__shm_peer_failed(dlpg__shm_t *sh, int q);
/* Store value into word and wake sleepers if any announced themselves. */
void dlpg__shm_post(_Atomic uint32_t *word, _Atomic uint32_t *waiters, uint32_t value);
/* Record status and the current message as the handle's failure; tell the peers. */
dlpg_status_t dlpg__shm_break(dlpg__shm_t *sh, dlpg_status_t st);
/* Wake every futex word of the segment (abort, destroy). */
void dlpg__shm_wake_all(dlpg__shm_t *sh);
/* 1 while the process pid with that start time lives (a zombie counts as dead). */
int dlpg__shm_pid_alive(int pid, uint64_t starttime);
/* The start time of pid (field 22 of /proc/<pid>/stat), 0 when unknown. */
uint64_t dlpg__shm_pid_starttime(int pid);

/* step.c: the collective steps. Step k: a rank writes its slot (k % 2) only after every
 * rank posted k - 1 (so nobody still reads what it held at step k - 2), posts k, then
 * reads the slots of the ranks it needs once they posted k. */
/* Start collective #opno of kind (fails when broken or aborted); count, dtype, rop and
 * root go into the descriptor peers compare. */
dlpg_status_t dlpg__shm_coll_start(dlpg__shm_t *sh, dlpg__shm_kind_t kind, uint64_t count,
                                   int dtype, int rop, int root);
/* Begin the next step: wait until every rank posted the previous one. */
dlpg_status_t dlpg__shm_step_begin(dlpg__shm_t *sh);
/* Publish this rank's slot of the current step. On an operation's first step, then wait
 * until every rank posted it and compare what each called with what rank 0 called: a
 * mismatch fails the operation on every rank alike (DLPG_ERR_INVALID_ARGUMENT naming both
 * ranks and both sides) after the same step, so the handle stays usable for the next,
 * matching operation. */
dlpg_status_t dlpg__shm_step_post(dlpg__shm_t *sh);
/* Whether step_begin would not wait: every peer posted the previous step. */
int dlpg__shm_step_free(const dlpg__shm_t *sh);
/* The first step's check of step_post (every rank posted it, none failed, all called the
 * same), bounded by until as dlpg__shm_wait_until: *ready = 0 when a peer has not posted yet.
 * step_post runs it unbounded on an operation's first step. */
dlpg_status_t dlpg__shm_step_check_first(dlpg__shm_t *sh, double until, int *ready);
/* Wait until rank q posted the current step. */
dlpg_status_t dlpg__shm_step_wait(dlpg__shm_t *sh, int q);
dlpg_status_t dlpg__shm_step_wait_all(dlpg__shm_t *sh);
/* Rank q's slot of the current step. */
static inline uint8_t *dlpg__shm_cur_slot(const dlpg__shm_t *sh, int q) {
  return dlpg__shm_slot(sh, q, sh->cur);
}

/* reduce_slots.c: dst[0..n) = the reduction of every rank's slot of the current step at
 * byte offset off, in rank order (then the avg division). */
struct dlpg__shm_reducer;
void dlpg__shm_reduce_slots(dlpg__shm_t *sh, const struct dlpg__shm_reducer *rd, void *dst,
                            size_t off, size_t n);
/* The same with own (not NULL) read in place of this rank's slot. */
void dlpg__shm_reduce_from(dlpg__shm_t *sh, const struct dlpg__shm_reducer *rd, void *dst,
                           size_t off, size_t n, const void *own);
/* dlpg__shm_reduce_from split between the rank's helper threads (team.h). */
void dlpg__shm_reduce_many(dlpg__shm_t *sh, const struct dlpg__shm_reducer *rd, void *dst,
                           size_t off, size_t n, const void *own);

/* eager.c: a collective of one step, as its two halves (shm.h's start and finish). 1 when
 * c fits one step (*bytes: what this rank writes into its slot). */
int dlpg__shm_one_step(const dlpg__shm_t *sh, const dlpg__shm_call_t *c, size_t *bytes);
/* Run c (one step) whole: start it waiting as long as the deadline allows, then finish it. */
dlpg_status_t dlpg__shm_run_one(dlpg__shm_t *sh, const dlpg__shm_call_t *c);

/* create_sock.c: the rendezvous socket (abstract namespace) and fd passing. */
int dlpg__shm_sock_listen(const char *name);
/* -1 with errno set when nobody listens under name in this network namespace. */
int dlpg__shm_sock_connect(const char *name);
int dlpg__shm_sock_send(int fd, const void *buf, size_t len, int pass_fd);
/* Receives up to len bytes (all of them, or fails) and an fd if one came (*got_fd, -1 if
 * none). Waits until deadline (dlpg__now() seconds). */
int dlpg__shm_sock_recv(int fd, void *buf, size_t len, int *got_fd, double deadline);
/* A joiner's exchange: connect to name, send hello, receive a one-byte answer with the
 * segment's fd by deadline. 0: *fd is the segment; DLPG__SHM_FETCH_UNREACHABLE: no such
 * socket here; DLPG__SHM_FETCH_FAILED: the exchange failed (for both, the errno in *err);
 * DLPG__SHM_FETCH_REFUSED: the owner answered no (it sees another pid than this one). */
enum { DLPG__SHM_FETCH_UNREACHABLE = 1, DLPG__SHM_FETCH_FAILED = 2, DLPG__SHM_FETCH_REFUSED = 3 };
int dlpg__shm_sock_fetch(const char *name, const void *hello, size_t len, double deadline, int *fd,
                         int *err);

#endif
