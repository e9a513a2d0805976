/* The shared segment's layout and the engine's private handle, shared by the engine's
 * files (create, sync, steps). Nothing outside plugin/shm includes
 * it: the segment's layout is a contract between the ranks of one build only (rank 0
 * writes the version; a mismatch makes the creation fail rather than misread memory).
 *
 * Layout, each part aligned to DLPG__SHM_LINE so a counter one rank writes never shares a
 * cache line with another rank's:
 *   header | size rank blocks | 2 collective slots per rank | pool of sub-team areas
 * The pool (pool.h) holds the segments of child groups: each area is laid out as a segment
 * of its own (header | rank blocks | slots) for the child's ranks. The slots and areas are
 * large but only the pages ranks touch are ever backed by memory. */
#ifndef DLPG_SHM_SEG_H_
#define DLPG_SHM_SEG_H_

#include <stdatomic.h>
#include <stddef.h>
#include <sys/types.h>
#include <stdint.h>

#include "dlpg/dlpg.h"
#include "shm/eager.h"
#include "shm/shm.h"
#include "shm/step.h"

#define DLPG__SHM_LINE 128 /* two lines: adjacent-line prefetch pulls pairs */
#define DLPG__SHM_MAGIC 0x316d687367706c64ull /* "dlpgshm1" */
#define DLPG__SHM_VERSION 4u /* 4: the pool of sub-team areas; 3: rankctl.left; 2: no pair
                                 channels (pair.h has its own) */

/* A rank's state in the segment, read by peers in their slow path. */
enum { DLPG__SHM_JOINING = 0, DLPG__SHM_ALIVE = 1, DLPG__SHM_LEFT = 2, DLPG__SHM_ABORTED = 3,
       DLPG__SHM_FAILED = 4 };

/* What a rank called as its collective #opno, so peers can tell a mismatch from a step. */
typedef struct dlpg__shm_desc {
  uint32_t opno;
  uint16_t kind; /* dlpg__op_kind_t */
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
  /* 1 once this rank destroyed its handle, whatever its state then (a rank that failed or
   * was aborted keeps that state): its process may exit without having died. */
  _Atomic int32_t left;
} dlpg__shm_rankctl_t;

typedef struct dlpg__shm_header {
  uint64_t magic;
  uint64_t nonce;
  uint32_t version, size;
  uint64_t slot_bytes, total_bytes;
  uint64_t off_ctl, off_slots;
  /* The pool of sub-team areas (pool.h), from off_pool: its claim table of pool_claims
   * entries, then pool_areas areas of area_bytes each from off_areas. 0 areas: no pool (an
   * area's own header says 0: a child's child claims from the segment's pool). */
  uint32_t pool_areas, pool_claims;
  uint64_t off_pool, off_areas, area_bytes;
  /* Of an area: the most ranks its rank blocks hold, and the bytes of its slots. */
  uint64_t area_ranks, area_slots_bytes;
} dlpg__shm_header_t;

/* One mapping of a segment in this process, shared by the handles that use it: the
 * segment's own and those of children in its areas, any of which may go first. */
typedef struct dlpg__shm_map {
  _Atomic int refs;
  uint8_t *base;
  size_t bytes;
} dlpg__shm_map_t;

/* Bytes of the smallest part a helper thread takes of a copy or reduction (team.h). */
#define DLPG__SHM_PART_BYTES ((size_t)64 << 10)

struct dlpg__shm {
  /* First: dlpg__shm_steps (step.h) casts the handle to it. */
  dlpg__shm_steps_t st;
  uint8_t *base;       /* this handle's segment: the mapping's start, or a pool area in it */
  size_t map_bytes;
  dlpg__shm_map_t *map; /* the mapping holding base (one reference is this handle's) */
  /* A child's area: its claim in the pool (pool.h), -1 for a segment of its own. */
  int claim;
  int pool_areas;       /* of a segment this handle creates (config) */
  dlpg__shm_header_t *hdr;
  dlpg__shm_rankctl_t *ctl;  /* [size] */
  size_t stream_bytes; /* output bytes from which copies into the output stream (copy_out.c) */
  double timeout_s;
  int spin;
  double yield_s; /* after the spin, seconds of sched_yield before a futex sleep */
  double moved_at; /* when this rank last left a CPU it shared with a peer (sync.c) */
  _Atomic int aborted;       /* set by dlpg__shm_abort from any thread */
  const int *create_abort;   /* the creation's abort flag (config), or NULL */
  /* The caller's thread only: */
  uint32_t opno;             /* collectives issued */
  dlpg_status_t broken;      /* first failure; later operations repeat it */
  char broken_msg[512];
  /* The operation in progress, for messages and deadlines. */
  /* What messages call it (label_kind #label_opno), formatted into op_label only when a
   * message needs it (dlpg__shm_what; NULL until then): a snprintf per call would be a good
   * part of a small one's time. */
  const char *op_name;
  char op_label[48];          /* "allreduce #7" */
  dlpg__op_kind_t label_kind;
  uint32_t label_opno;
  dlpg__shm_desc_t desc;      /* of the collective in progress */
  dlpg__shm_desc_t next;      /* call_* fields for the next collective (describe_next) */
  int next_set;
  double deadline;
  dlpg__shm_eager_t eager;   /* the collective started and not finished yet (eager.c) */
  /* Threads that copy and reduce large collectives, the caller's included (team.h); the
   * team is started at the first collective that can use it. */
  int threads;
  struct dlpg__shm_team *team;
  int team_tried;
  /* The rooted and uneven collectives' per-call layout (coll_v.c), made at the first such
   * call and kept, so a small call allocates nothing. */
  void *vscratch;
};

/* handle_new.c: n rounded up to whole lines. */
size_t dlpg__shm_align(size_t n);
/* Offsets of a segment's parts for size ranks and slots of slot bytes, pool left out (seg.h);
 * returns its bytes so far (the pool, if any, starts there). */
size_t dlpg__shm_layout(dlpg__shm_header_t *h, int size, size_t slot);
/* Point sh at the segment (or area) at base, whose header is written. */
void dlpg__shm_bind(dlpg__shm_t *sh, uint8_t *base, size_t bytes);
/* A handle of rank of size ranks with cfg's settings (defaults resolved), no segment yet;
 * NULL when out of memory. */
dlpg__shm_t *dlpg__shm_alloc(int rank, int size, const dlpg__shm_config_t *cfg);

/* handle.c: the mapping's references; the last unmaps. */
dlpg__shm_map_t *dlpg__shm_map_new(uint8_t *base, size_t bytes);
void dlpg__shm_map_ref(dlpg__shm_map_t *m);
void dlpg__shm_map_unref(dlpg__shm_map_t *m);

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
/* "allreduce", ...: core's name of kind without its "dlpg_", as the engine's messages name
 * its collectives ("rank 1 died during allreduce #7"). */
const char *dlpg__shm_kind_word(dlpg__op_kind_t kind);
/* The name of the operation in progress for a message ("allreduce #7"). */
const char *dlpg__shm_what(dlpg__shm_t *sh);
/* Start the collective label_kind and label_opno name: fails at once when broken or
 * aborted, sets the deadline. */
dlpg_status_t dlpg__shm_op_start(dlpg__shm_t *sh);
/* Wait until *word >= target, where word is written by rank peer: spin, then sleep on the
 * shared futex in slices, checking abort, the peer's state and life, and the deadline.
 * Failure breaks the handle. */
dlpg_status_t dlpg__shm_wait(dlpg__shm_t *sh, _Atomic uint32_t *word, _Atomic uint32_t *waiters,
                             uint32_t target, int peer);
/* The same, bounded by the caller too: at `until` (dlpg__now() seconds, before the
 * deadline) it returns DLPG_OK with *ready = 0, having failed nothing. until <= 0: one look
 * at the word (and the abort flag and the deadline), no spinning, no sleeping. */
dlpg_status_t dlpg__shm_wait_until(dlpg__shm_t *sh, _Atomic uint32_t *word,
                                   _Atomic uint32_t *waiters, uint32_t target, int peer,
                                   double until, int *ready);
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

/* create_sock.c: the rendezvous socket (abstract namespace) and fd passing. */
int dlpg__shm_sock_listen(const char *name);
/* -1 with errno set when nobody listens under name in this network namespace. */
int dlpg__shm_sock_connect(const char *name);
int dlpg__shm_sock_send(int fd, const void *buf, size_t len, int pass_fd);
/* Receives up to len bytes (all of them, or fails) and the first fd that came (*got_fd, -1
 * if none; any further one is closed). Waits until deadline (dlpg__now() seconds). */
int dlpg__shm_sock_recv(int fd, void *buf, size_t len, int *got_fd, double deadline);
/* One recvmsg without waiting: up to len bytes (its result; -1 with errno, EAGAIN when
 * nothing is there). Any fds that came are closed, but the first is kept in *keep_fd when
 * keep_fd is given and still -1. */
ssize_t dlpg__shm_sock_recv_some(int fd, void *buf, size_t len, int *keep_fd);
/* A joiner's exchange: connect to name, send hello, receive a one-byte answer with the
 * segment's fd by deadline. 0: *fd is the segment; DLPG__SHM_FETCH_UNREACHABLE: no such
 * socket here; DLPG__SHM_FETCH_FAILED: the exchange failed (for both, the errno in *err);
 * DLPG__SHM_FETCH_REFUSED: the owner answered no (it sees another pid than this one). */
enum { DLPG__SHM_FETCH_UNREACHABLE = 1, DLPG__SHM_FETCH_FAILED = 2, DLPG__SHM_FETCH_REFUSED = 3 };
int dlpg__shm_sock_fetch(const char *name, const void *hello, size_t len, double deadline, int *fd,
                         int *err);

/* What a joining rank sends the segment's owner: the token proves it read the store, the
 * pid is compared with what the socket says of the sender. */
typedef struct dlpg__shm_hello {
  int32_t rank, pid;
  uint8_t token[16];
} dlpg__shm_hello_t;

/* join.c: a joining rank's side. */
typedef struct dlpg__shm_join {
  const char *sock;     /* the owner's socket */
  int rank, owner;      /* this rank, the segment's owner */
  const uint8_t *token; /* 16 bytes */
  double deadline;
  const char *noun;     /* what messages call the segment: "segment", "pair segment" */
  void *head;           /* head_len bytes for the segment's header */
  size_t head_len;
  /* The segment's bytes when head is the header expected (magic, version, nonce, ...),
   * else 0. */
  uint64_t (*total)(const void *head, const void *arg);
  const void *arg;
} dlpg__shm_join_t;
/* Fetch the segment's memfd from the owner, read its header into head, map it whole:
 * *map and *bytes. DLPG_ERR_UNSUPPORTED when it is unreachable from here, refused (another
 * pid namespace) or not the segment expected (another host as far as the engine is
 * concerned); DLPG_ERR_TIMEOUT when the owner did not answer by the deadline. */
dlpg_status_t dlpg__shm_join_segment(const dlpg__shm_join_t *j, void **map, size_t *bytes);

#endif
