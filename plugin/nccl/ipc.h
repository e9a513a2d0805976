/* The CUDA IPC path of the CUDA module: collectives and point-to-point transfers for ranks
 * that share a GPU, which NCCL refuses ("Duplicate GPU detected"). It lives in the NCCL
 * module's library because the choice between the two is made per group from what every
 * rank publishes at its first CUDA operation (route.c), inside the module's own issue path:
 * core hands CUDA tensors to one line, and a second CUDA line would need core to choose
 * between caller-thread backends, which it does only for worker backends today.
 *
 * Each rank exports one staging allocation per group (cudaIpcGetMemHandle): a flags block,
 * two collective buffers (a step's parity picks one) and two mailboxes per peer for sends.
 * Peers map it once (cudaIpcOpenMemHandle). Every operation is a few kernels on the caller's
 * stream, ordered through monotone counters in the flags blocks, never through the host:
 *
 *   collective step s:  put   (wait until every peer's done >= s-2, then copy this rank's
 *                               part into its buffer s%2)
 *                        get   (publish ready = s; wait until the peers it reads have
 *                               ready >= s; reduce or gather from their buffers)
 *                        done  (publish done = s: this rank has read step s)
 *   send chunk k to q:   wait q's taken[me] >= k-2, copy into mailbox (q, k%2), sent[q] = k
 *   recv chunk k from p: wait p's sent[me] >= k, copy out, taken[p] = k
 *
 * Every wait reads the GPU's global timer and gives up at the group's timeout, writing the
 * failure (the peer that did not arrive) into a host-mapped status block; later kernels of
 * the group see it and return at once, so a dead peer never holds the stream for good and
 * the CUDA context stays usable. The host reads the status when an op's event completed.
 *
 * Two channels, each with its own flags block, buffers and mailboxes: operations issued
 * outside graph capture number their steps and chunks on the host; captured ones (each
 * replay must take the next numbers, which the host never sees) take them on the device,
 * each kernel reading its rank's own counter (done + 1, sent[q] + 1, taken[p] + 1), and
 * always wait in the kernels. Either channel's buffer parity is the step's (chunk's)
 * number modulo 2. */
#ifndef DLPG_NCCL_IPC_H_
#define DLPG_NCCL_IPC_H_

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Most ranks one group's IPC path serves (the kernels' parameter arrays). */
#define DLPG__IPC_MAX_RANKS 16

/* Failure codes in the status block. */
#define DLPG__IPC_FAIL_TIMEOUT 1
#define DLPG__IPC_FAIL_ABORTED 2

/* One rank's counters, at the start of its staging allocation; written by that rank's
 * kernels only, read by its peers'. Each on its own 128-byte line. */
typedef struct dlpg__ipc_flags {
  unsigned long long ready;  /* last collective step whose part is in this rank's buffer */
  unsigned long long pad0[15];
  unsigned long long done;   /* last collective step this rank finished reading */
  unsigned long long pad1[15];
  unsigned long long sent[DLPG__IPC_MAX_RANKS];  /* chunks written to mailbox q */
  unsigned long long taken[DLPG__IPC_MAX_RANKS]; /* chunks read from peer p's mailbox */
  /* Stream-wait mode (DLPG_NCCL_IPC_WAIT=stream): the same counters written by peer q into
   * THIS rank's block at index q, so every wait reads local memory (cuStreamWaitValue64,
   * which the host can release by writing its own memory when a peer never comes). */
  unsigned long long in_ready[DLPG__IPC_MAX_RANKS];
  unsigned long long in_done[DLPG__IPC_MAX_RANKS];
  unsigned long long in_sent[DLPG__IPC_MAX_RANKS];  /* chunks q put in its mailbox for this rank */
  unsigned long long in_taken[DLPG__IPC_MAX_RANKS]; /* chunks q read from this rank's mailbox */
  /* Non-zero once this rank's group failed or was aborted: set by a kernel whose wait
   * failed and by the host (one small copy, dlpg__ipc_release), read by every kernel of this
   * rank, of both channels, before it works (the word of channel 0's block). Device memory:
   * a read of the host-mapped status block crosses PCIe, and 132 blocks each reading it took
   * about 270 us per kernel on an H100. */
  unsigned long long stop;
} dlpg__ipc_flags_t;

/* Host-mapped (cudaHostAllocMapped): the host sets abort; a kernel whose wait failed sets
 * failed (first failure wins, best effort), peer and step. Kernels read it only while they
 * wait (the flags block's stop word tells the others). */
typedef struct dlpg__ipc_status {
  volatile int abort;
  volatile int failed;    /* DLPG__IPC_FAIL_* */
  volatile int peer;      /* the rank waited for; -1 for an abort */
  volatile int pad;
  volatile unsigned long long step;
} dlpg__ipc_status_t;

/* What a collective step does (the kernels' switch). */
typedef enum dlpg__ipc_step_kind {
  DLPG__IPC_ALLREDUCE, DLPG__IPC_REDUCE, DLPG__IPC_BROADCAST, DLPG__IPC_ALLGATHER,
  DLPG__IPC_REDUCE_SCATTER, DLPG__IPC_ALLTOALL
} dlpg__ipc_step_kind_t;

/* Element types and reduce ops the kernels know (ipc_issue.c maps dlpg's onto them). */
typedef enum dlpg__ipc_type {
  DLPG__IPC_F32, DLPG__IPC_F16, DLPG__IPC_BF16, DLPG__IPC_F64, DLPG__IPC_I32, DLPG__IPC_I64,
  DLPG__IPC_U8, DLPG__IPC_I8, DLPG__IPC_BOOL, DLPG__IPC_U32, DLPG__IPC_U64,
  DLPG__IPC_F8E4M3, DLPG__IPC_F8E5M2
} dlpg__ipc_type_t;
typedef enum dlpg__ipc_rop {
  DLPG__IPC_SUM, DLPG__IPC_PROD, DLPG__IPC_MAX, DLPG__IPC_MIN, DLPG__IPC_AVG,
  DLPG__IPC_PREMUL   /* a sum, times the step's scalar */
} dlpg__ipc_rop_t;

/* One collective step, by value to the kernels. Pointers are this device's views (peers'
 * through their IPC mappings). */
typedef struct dlpg__ipc_step {
  int kind;                 /* dlpg__ipc_step_kind_t */
  int type, rop;            /* reducing kinds */
  double scalar;            /* DLPG__IPC_PREMUL's factor */
  int rank, size, root;
  unsigned long long seq;   /* the step, from 1 */
  long long len;            /* elements (bytes for movement kinds) per rank part */
  int esize;                /* bytes of an element (1 for movement kinds) */
  const char *src;          /* this step's input, already offset */
  char *dst;                /* this step's output, already offset */
  long long src_stride;     /* elements between rank segments of src (reduce_scatter, alltoall) */
  long long dst_stride;     /* elements between rank segments of dst (allgather, alltoall) */
  char *buf[2][DLPG__IPC_MAX_RANKS];           /* each rank's two buffers: step s uses s%2 */
  dlpg__ipc_flags_t *flags[DLPG__IPC_MAX_RANKS]; /* the channel's counters of each rank */
  unsigned long long *stop;                    /* this rank's stop word */
  dlpg__ipc_status_t *status;                  /* device view of the host-mapped block */
  unsigned long long timeout_ns;
  int nowait;               /* the stream waited already (stream-wait mode): no kernel waits */
  int devseq;               /* captured: the step is this rank's done + 1, seq is unused */
  int tell;                 /* stream-wait mode, one block: the put kernel writes this rank's
                               in_ready word of every peer, the get kernel its in_done word
                               (one launch each instead of a stream write per peer) */
} dlpg__ipc_step_t;

/* One chunk of a send (peer: receiver) or receive (peer: sender). */
typedef struct dlpg__ipc_chunk {
  int rank, peer;
  unsigned long long k;     /* the chunk's number on this (pair, direction), from 1 */
  long long bytes;
  char *user;               /* send: the user's input; recv: the user's output */
  char *box[2];             /* the pair's mailboxes (the sender's): chunk k uses k%2 */
  dlpg__ipc_flags_t *mine, *theirs;  /* the channel's counters */
  unsigned long long *stop; /* this rank's stop word */
  dlpg__ipc_status_t *status;
  unsigned long long timeout_ns;
  int nowait;
  int devseq;               /* captured: k is this rank's sent[peer] (taken[peer]) + 1 */
} dlpg__ipc_chunk_t;

#ifdef __CUDACC__
#define DLPG__IPC_HD __host__ __device__
#else
#define DLPG__IPC_HD
#endif
/* Whether this rank writes its buffer at a step (then it must first wait until every peer
 * read the step that last used the buffer), and whether it reads rank q's buffer. */
static inline DLPG__IPC_HD int dlpg__ipc_writes(const dlpg__ipc_step_t *p) {
  return p->kind != DLPG__IPC_BROADCAST || p->rank == p->root;
}
static inline DLPG__IPC_HD int dlpg__ipc_reads(const dlpg__ipc_step_t *p, int q) {
  switch (p->kind) {
    case DLPG__IPC_BROADCAST: return p->rank != p->root && q == p->root;
    case DLPG__IPC_REDUCE: return p->rank == p->root;
    default: return 1;
  }
}

/* Launches on stream s of the current device (ipc_kernels.cu); the CUDA launch error. */
cudaError_t dlpg__ipc_launch_put(const dlpg__ipc_step_t *p, cudaStream_t s);
cudaError_t dlpg__ipc_launch_get(const dlpg__ipc_step_t *p, cudaStream_t s);
/* A step of at most DLPG__IPC_STEP_ONE_BLOCK bytes per rank part runs in single-block
 * kernels: in kernel-wait mode put, get and done in one; in stream-wait mode the put and
 * get kernels publish the step themselves (tell). */
#define DLPG__IPC_STEP_ONE_BLOCK 65536
cudaError_t dlpg__ipc_launch_step(const dlpg__ipc_step_t *p, cudaStream_t s);
/* Publish *flag = v after everything before it on s, or *flag + 1 for v == 0 (captured
 * operations); skipped once *stop is set. */
cudaError_t dlpg__ipc_launch_flag(unsigned long long *flag, unsigned long long v,
                                  const unsigned long long *stop, cudaStream_t s);
cudaError_t dlpg__ipc_launch_send(const dlpg__ipc_chunk_t *c, cudaStream_t s);
cudaError_t dlpg__ipc_launch_recv(const dlpg__ipc_chunk_t *c, cudaStream_t s);
/* Load every kernel above into the current context now. With lazy loading (CUDA's default)
 * a kernel's first launch may wait for the whole context to go idle, which never happens
 * while a kernel of this path waits for a peer that waits for that launch (a receive posted
 * before the send it needs); loaded up front, launches never wait. */
cudaError_t dlpg__ipc_preload(void);

#ifdef __cplusplus
}
#endif
#endif
