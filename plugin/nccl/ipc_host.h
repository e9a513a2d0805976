/* The host side of the CUDA IPC path (ipc.h says the protocol): which path a group's CUDA
 * operations take (route.c), the group's staging allocation and its peers' mappings
 * (ipc_state.c), and the operations as kernel launches with their work pollers
 * (ipc_issue.c; the rooted and uneven kinds as parts of the others, ipc_expand.c). Calls go
 * one way: issue.c -> route.c -> ipc_issue.c -> ipc_state.c. */
#ifndef DLPG_NCCL_IPC_HOST_H_
#define DLPG_NCCL_IPC_HOST_H_

#include <pthread.h>
#include <cuda_runtime_api.h>

#include "nccl/ipc.h"
#include "nccl/ipc_board.h"
#include "nccl/nccl_internal.h"
#include "nccl/route_rule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Ops in flight the stream-wait mode's watchdog follows per group; more go unwatched (the
 * watched ones before them end first or fail). */
#define DLPG__IPC_PENDING 64

/* Bytes before a channel's buffers: its flags block, rounded up. */
#define DLPG__IPC_FLAGS_BYTES 4096

/* The channels (ipc.h): operations issued outside graph capture, and captured ones. */
enum { DLPG__IPC_EAGER = 0, DLPG__IPC_GRAPH = 1, DLPG__IPC_NCHAN = 2 };

/* A peer's allocation mapped for in-place collectives, kept for the next ones; the event
 * follows its last use (closed only once that completed). */
typedef struct dlpg__ipc_import {
  int q;
  uint64_t id, base, size;
  char *ptr;
  cudaEvent_t used;
  unsigned long long tick;
} dlpg__ipc_import_t;
#define DLPG__IPC_IMPORTS 32
/* This rank's allocations exported so far, by buffer id (unique in a process's lifetime). */
typedef struct dlpg__ipc_export {
  uint64_t id;
  cudaIpcMemHandle_t handle;
} dlpg__ipc_export_t;
#define DLPG__IPC_EXPORTS 32

/* One group's IPC path on this rank (st->ipc), made at its first IPC operation. */
typedef struct dlpg__ipc {
  struct dlpg__nccl *st;
  int rank, size, dev;
  /* Per channel: where it starts in the allocation (its flags block, then two collective
   * buffers of chunk bytes, then two mailboxes of mbox bytes per peer). */
  size_t off[DLPG__IPC_NCHAN], chunk[DLPG__IPC_NCHAN], mbox[DLPG__IPC_NCHAN];
  size_t bytes;               /* the whole allocation */
  char *base;                 /* this rank's allocation (cudaMalloc) */
  char *peer[DLPG__IPC_MAX_RANKS];  /* every rank's allocation as this device sees it;
                                       NULL until mapped; peer[rank] == base */
  int opened[DLPG__IPC_MAX_RANKS];  /* mapped with cudaIpcOpenMemHandle (closed at destroy) */
  dlpg__ipc_status_t *status_h, *status_d; /* cudaHostAllocMapped, host and device views */
  /* Issue order, under mu: the last collective step, and per peer the chunks sent to it and
   * received from it. Each channel's last event orders the next use of its buffers after
   * the previous one whatever stream it was issued on. */
  pthread_mutex_t mu;
  /* Captured operations: the event recorded after the last one, and its capture's id (a
   * later op of the same capture waits for it: ops on two streams never share a step). */
  cudaEvent_t graph_last;
  unsigned long long graph_capture;
  unsigned long long coll_seq;
  unsigned long long sent[DLPG__IPC_MAX_RANKS], recvd[DLPG__IPC_MAX_RANKS];
  cudaEvent_t coll_last, send_last[DLPG__IPC_MAX_RANKS], recv_last[DLPG__IPC_MAX_RANKS];
  /* The internal streams of sends [0] and receives [1] with a work handle, per peer, and
   * the event that orders one after the caller's stream (made at first use). */
  cudaStream_t own[2][DLPG__IPC_MAX_RANKS];
  cudaEvent_t fork_ev;
  int destroyed;
  /* In-place collectives (ipc_direct.c): every rank's board (ipc_board.c), the smallest
   * such collective in bytes (0: none), the last one's number, which peers live in this
   * process, and the allocations mapped and exported. */
  dlpg__ipc_boards_t boards;
  size_t direct_bytes;
  unsigned long long direct_n;
  int same_proc[DLPG__IPC_MAX_RANKS];
  dlpg__ipc_import_t imports[DLPG__IPC_IMPORTS];
  int nimports;
  unsigned long long tick;
  dlpg__ipc_export_t exports[DLPG__IPC_EXPORTS];
  int nexports;
  int direct_said, staged_said;  /* the INFO lines said once per group: bit per DLPG__MEET_* */
  /* Stream-wait mode (ipc_watch.c): the ops in flight, oldest first, each with the event
   * recorded after it, its deadline and what it waits for; a thread that ends the waits of
   * an op past its deadline (or of an aborted group) by writing this rank's own counters
   * on a stream of its own. */
  int stream_wait;
  struct dlpg__ipc_pending {
    cudaEvent_t ev;
    double deadline;
    int kind;                  /* DLPG__IPC_PEND_* */
    int peer;                  /* send/recv */
    unsigned long long want;   /* the op's last step or chunk */
  } pend[DLPG__IPC_PENDING];
  int pend_head, pend_n;
  /* A stream of this path's own (both modes): the counters' zeroing, the stop word and the
   * waits' release (dlpg__ipc_release), the watchdog's reads. */
  cudaStream_t rescue;
  pthread_t watch;
  int watch_started;
  pthread_mutex_t watch_mu;
  pthread_cond_t watch_cv;
  int watch_stop;
} dlpg__ipc_t;

enum { DLPG__IPC_PEND_COLL, DLPG__IPC_PEND_SEND, DLPG__IPC_PEND_RECV, DLPG__IPC_PEND_DIRECT };

/* route.c: which ops of the batch run on the IPC path (is_ipc[k] = 1; *nipc of them) and
 * which on NCCL; decides, once per group for collectives and once per pair for sends and
 * receives, from every concerned rank's published host and GPU (waiting for them up to the
 * group's timeout). A group NCCL cannot serve (ranks sharing a GPU) and the IPC path cannot
 * either (ranks on several hosts) fails with a message naming the ranks and the GPU. */
dlpg_status_t dlpg__nccl_route(const char *fn, dlpg__be_op_t *const *ops, int n,
                               unsigned char *is_ipc, int *nipc);
/* route.c: free what the decisions kept (the state's last release). */
void dlpg__nccl_route_free(struct dlpg__nccl *st);

/* ipc_state.c: st's IPC path on device dev, made (allocated, exported, published) at the
 * first call; an error when a later call names another device. */
dlpg_status_t dlpg__ipc_get(const char *fn, struct dlpg__nccl *st, int dev, dlpg__ipc_t **out);
/* ipc_state.c: map rank q's allocation (once), waiting for its record up to deadline. */
dlpg_status_t dlpg__ipc_map(const char *fn, dlpg__ipc_t *ipc, int q, double deadline);
/* ipc_state.c: every waiting kernel of the group gives up (status abort), every wait ends
 * and later kernels skip their work (dlpg__ipc_release). */
void dlpg__ipc_abort(dlpg__ipc_t *ipc);
/* ipc_state.c: wait (bounded by the group's timeout) for this rank's queued kernels and for
 * the peers to have read this rank's buffers, then close every mapping and free the
 * allocation. The struct itself stays for pollers until dlpg__ipc_free. */
void dlpg__ipc_destroy(dlpg__ipc_t *ipc);
void dlpg__ipc_free(dlpg__ipc_t *ipc);
/* ipc_state.c: in channel ch, buffer b (0, 1) of rank q, mailbox parity b of rank q for
 * peer p, and q's flags, as this device sees them. */
static inline char *dlpg__ipc_buf(const dlpg__ipc_t *ipc, int ch, int q, int b) {
  return ipc->peer[q] + ipc->off[ch] + DLPG__IPC_FLAGS_BYTES + (size_t)b * ipc->chunk[ch];
}
static inline char *dlpg__ipc_mbox(const dlpg__ipc_t *ipc, int ch, int q, int p, int b) {
  return ipc->peer[q] + ipc->off[ch] + DLPG__IPC_FLAGS_BYTES + 2 * ipc->chunk[ch] +
         ((size_t)p * 2 + (size_t)b) * ipc->mbox[ch];
}
static inline dlpg__ipc_flags_t *dlpg__ipc_flags(const dlpg__ipc_t *ipc, int ch, int q) {
  return (dlpg__ipc_flags_t *)(void *)(ipc->peer[q] + ipc->off[ch]);
}
/* ipc_state.c: the failure the status block holds, as a status and message prefixed with
 * fn; DLPG_OK when none. */
dlpg_status_t dlpg__ipc_failure(const char *fn, const dlpg__ipc_t *ipc);

/* ipc_memops.c: the driver's stream memory operations (1 when found), a wait until *word
 * >= v (cyclic) and a fenced write of v, queued on s. */
int dlpg__ipc_memops_loaded(void);
cudaError_t dlpg__ipc_wait_ge(cudaStream_t s, const unsigned long long *word, unsigned long long v);
cudaError_t dlpg__ipc_write(cudaStream_t s, unsigned long long *word, unsigned long long v);
/* Queued on s: write t to this rank's in_ready (done: in_done) word in every peer's flags
 * block; wait until this rank's own in_ready (done: in_done) word of every peer it reads
 * (all: of every peer) is >= t. */
dlpg_status_t dlpg__ipc_tell(const char *fn, const dlpg__ipc_t *ipc, const dlpg__ipc_step_t *p,
                             cudaStream_t s, int done, unsigned long long t);
dlpg_status_t dlpg__ipc_await(const char *fn, const dlpg__ipc_t *ipc, const dlpg__ipc_step_t *p,
                              cudaStream_t s, int done, unsigned long long t, int all);

/* ipc_watch.c (stream-wait mode): start the watchdog; follow an op just queued on s (caller
 * holds ipc->mu); stop the watchdog. And, in both wait modes, end every wait of this rank at
 * once and make later kernels skip their work (dlpg__ipc_release: abort, the watchdog's
 * timeout, destroy past the deadline); it lives beside the watchdog, its first caller, so
 * that ipc_state.c -> ipc_watch.c stays the only direction between the two files. */
dlpg_status_t dlpg__ipc_watch_start(const char *fn, dlpg__ipc_t *ipc);
void dlpg__ipc_watch_add(dlpg__ipc_t *ipc, cudaStream_t s, int kind, int peer,
                         unsigned long long want, double timeout_s);
void dlpg__ipc_release(dlpg__ipc_t *ipc);
void dlpg__ipc_watch_stop(dlpg__ipc_t *ipc);
/* Whether every op the watchdog follows completed (or none is followed). */
int dlpg__ipc_watch_idle(dlpg__ipc_t *ipc);

/* ipc_direct.c: run collective op in place (reading the peers' tensors) when it is large
 * enough and every rank agrees (*ran = 1), else leave it to the staged path (*ran = 0);
 * tmpl is the staged path's step for it (kind, types, ranks, counters), total its elements
 * per rank part (ipc_issue.c). Caller holds ipc->mu. And, at destroy, close every peer allocation it mapped. */
dlpg_status_t dlpg__ipc_direct(const char *fn, dlpg__ipc_t *ipc, const dlpg__be_op_t *op,
                               const dlpg__ipc_step_t *tmpl, long long total, cudaStream_t s,
                               int *ran);
void dlpg__ipc_direct_close(dlpg__ipc_t *ipc);

/* ipc_expand.c: whether op is one of the rooted or uneven kinds the path runs as its own
 * operations, and those parts (at most 2 x size per op, appended at parts[*n], with no
 * work); this rank's own block is copied on op's stream here. */
int dlpg__ipc_expands(const dlpg__be_op_t *op);
dlpg_status_t dlpg__ipc_expand(const char *fn, const dlpg__be_op_t *op, int me, int size,
                               dlpg__be_op_t *parts, int *n);

/* ipc_issue.c: run a batch on the IPC path (every op of one group, one tensor each). */
dlpg_status_t dlpg__ipc_issue(const char *fn, dlpg__be_op_t *const *ops, int n);

#ifdef __cplusplus
}
#endif
#endif
