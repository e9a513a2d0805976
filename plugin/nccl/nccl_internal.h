/* Private state of the NCCL path, shared by its files: the communicator cache (comm.c), the
 * rendezvous and creation (comm_create.c), the dtype/op tables (types.c), the enqueueing of
 * operations (issue.c; the rooted and uneven collectives in issue_v.c; reduce ops and the
 * premul_sum cache in premul.c), the CUDA-event pollers behind work (events.c) and their
 * event pool (event_pool.c), error translation (errors.c). Core is reached only through the
 * host table (host.h) and seen only through the views of core/group/backend_abi.h; the
 * module's settings are settings.h's. Calls go one way: backend.c -> issue.c -> issue_v.c
 * -> premul.c, and issue.c -> comm_create.c, events.c -> comm.c -> event_pool.c -> errors.c
 * -> host.c. */
#ifndef DLPG_NCCL_NCCL_INTERNAL_H_
#define DLPG_NCCL_NCCL_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "base/clock.h"
#include "base/status.h"
#include "core/group/backend_abi.h"
#include "nccl/host.h"
#include "nccl/nccl.h"
#include "nccl/settings.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest cache key: "p<peer>:" and 16 device ids of up to 4 digits and commas. */
#define DLPG__NCCL_KEY_MAX 112
/* dlpg__nccl_comm_t.peer of the group's communicators and of the one for sends to self. */
#define DLPG__NCCL_GROUP (-1)
#define DLPG__NCCL_SELF (-2)
/* premul_sum ops kept per communicator and device (dlpg__nccl_comm_t.premul). */
#define DLPG__NCCL_PREMUL_CACHE 8
/* Highest CUDA device ordinal the event pool and capability cache track. */
#define DLPG__NCCL_MAX_DEVICE 64

typedef enum dlpg__nccl_comm_state {
  DLPG__COMM_CREATING = 0, /* one thread is rendezvousing/initialising it */
  DLPG__COMM_READY = 1,
  DLPG__COMM_FAILED = 2,   /* creation failed; err/msg say why; later ops fail alike */
  DLPG__COMM_ABORTED = 3,  /* ncclCommAbort was called; handles are NULL */
  DLPG__COMM_DESTROYED = 4 /* finalized and destroyed by dlpg__nccl_destroy */
} dlpg__nccl_comm_state_t;

/* dlpg__nccl_mode_t: settings.h (DLPG_NCCL_COMM_MODE). */

/* One cached communicator: one ncclComm per local device of the key. Owned by the cache
 * (st->comms); live pollers hold references so the entry outlives dlpg__nccl_destroy. */
typedef struct dlpg__nccl_comm {
  struct dlpg__nccl *st;
  char key[DLPG__NCCL_KEY_MAX]; /* "0" or "0,1"; "p3:0" (with peer 3), "s:0" (self) */
  /* Whom it connects: DLPG__NCCL_GROUP, every rank of the group (collectives, alltoall);
   * a group rank >= 0, this rank and that peer alone (send/recv: created by the two ranks
   * only, so a transfer never waits for a third rank); DLPG__NCCL_SELF, this rank alone
   * (send/recv to self in a batch). member is this rank's index among the nmembers
   * (group: its rank; pair: 0 for the lower rank; self: 0), NCCL rank member * ndev + i. */
  int peer, member, nmembers;
  char rdv[640];                /* store key prefix of its rendezvous (none for self) */
  int ndev;
  int devs[DLPG__MAX_LOCAL_DEVICES];
  /* The handles operations use, one per local device; NULL once aborted or destroyed. In
   * split mode these are the blocking children and parents[] the non-blocking communicators
   * they were split from (kept: the children share their resources, and the parents carry
   * the deadline-polled paths: the first use of a connection, finalize). Otherwise
   * parents[] is all NULL and comms[] are the communicators of ncclCommInitRankConfig. */
  ncclComm_t comms[DLPG__MAX_LOCAL_DEVICES];
  ncclComm_t parents[DLPG__MAX_LOCAL_DEVICES];
  int mode;                     /* dlpg__nccl_mode_t the entry was created with */
  /* Split mode, under issue_mu: which connections an earlier operation has set up, so the
   * blocking children can be used without waiting on a peer. NCCL connects point-to-point
   * peers (and, with NCCL_RUNTIME_CONNECT=1, collectives) at the first operation that needs
   * them; that connection is made through the non-blocking parents, polled against the
   * deadline. Bit b of coll_warm[k]: op kind k ran once with
   * a per-device size in bucket b (b = bit length of the byte count), because NCCL picks
   * algorithms, protocols and channel counts by size, and a larger size can need
   * connections a smaller one did not. p2p_warm[peer]: bit 0 a send to peer ran, bit 1 a
   * receive from peer ran (nranks bytes, NCCL ranks). */
  uint64_t coll_warm[DLPG__OP_COUNT];
  unsigned char *p2p_warm;
  /* Whether NCCL connects collectives lazily (NCCL_RUNTIME_CONNECT not 0 when the entry was
   * created). When 0 (dlpg's default) every collective connection exists once creation is
   * done, and coll_warm is not consulted. */
  int lazy_colls;
  /* Split mode: 2 bytes of device memory per local device for the 1-byte send/recv that
   * connects a point-to-point peer through the parent (cudaFree'd by destroy). */
  void *scratch[DLPG__MAX_LOCAL_DEVICES];
  /* Pairwise entries, under issue_mu: the internal stream per local device on which sends
   * and receives with a work handle run (created at the first such op, destroyed by
   * destroy), and the event that orders it after the caller's stream. */
  cudaStream_t own_streams[DLPG__MAX_LOCAL_DEVICES];
  cudaEvent_t fork_ev[DLPG__MAX_LOCAL_DEVICES];
  int nranks;                   /* ndev * nmembers */
  int seq;                      /* creation index among the group's (or the pair's) */
  int state;                    /* dlpg__nccl_comm_state_t, under st->mu */
  dlpg_status_t err;            /* FAILED: the status and message to repeat */
  char msg[512];
  atomic_int refs;              /* the cache's + one per live poller */
  /* Serialises issuing on this communicator: NCCL communicators must not be used by two
   * threads at once, and a non-blocking one must be ready before its next call. Taken in
   * address order when a batch spans several communicators. */
  pthread_mutex_t issue_mu;
  /* premul_sum ops made by ncclRedOpCreatePreMulSum on comms[i], under issue_mu: one per
   * (NCCL type, factor), kept for the next operation with the same factor (a training
   * loop repeats one); the oldest is replaced when full (NCCL allows destroying an op once
   * the calls given it returned), and every one is destroyed before the communicator is
   * finalized (comm.c). */
  struct dlpg__nccl_premul {
    ncclComm_t comm;  /* the handle it was made on (comms[i], or parents[i]) */
    ncclDataType_t type;
    double scalar;
    ncclRedOp_t op;
  } premul[DLPG__MAX_LOCAL_DEVICES][DLPG__NCCL_PREMUL_CACHE];
  int npremul[DLPG__MAX_LOCAL_DEVICES], premul_next[DLPG__MAX_LOCAL_DEVICES];
  struct dlpg__nccl_comm *next;
} dlpg__nccl_comm_t;

/* A pooled CUDA event of one device. */
typedef struct dlpg__nccl_event {
  cudaEvent_t ev;
  int dev;
  struct dlpg__nccl_event *next;
} dlpg__nccl_event_t;

struct dlpg__nccl {
  const dlpg__be_group_t *g;  /* borrowed view: the group owns st and outlives it */
  int rank, size;             /* copies of g's, for messages after g is gone */
  char name[520];             /* copy of g->name (group names are at most 512 bytes) */
  char keys[576];             /* the group's key prefix: its job's scope (backend_abi.h) */
  pthread_mutex_t mu;         /* comms list, states, seq, event pool */
  pthread_cond_t cv;          /* a communicator left CREATING */
  dlpg__nccl_comm_t *comms;
  int ncreated;               /* group communicators this group has started creating */
  int *pair_created;          /* per peer rank: pairwise communicators started with it */
  atomic_int aborted;
  atomic_int destroyed;
  atomic_int refs;            /* the group's + one per live poller */
  dlpg__nccl_event_t *free_events[DLPG__NCCL_MAX_DEVICE];
  /* READY single-device entries by device ordinal (under mu): the per-call lookup of the
   * common case without formatting a key or walking the list. Cleared by abort/destroy. */
  dlpg__nccl_comm_t *by_dev[DLPG__NCCL_MAX_DEVICE];
  /* The CUDA IPC path for ranks that share a GPU (ipc_host.h). route: the collectives'
   * DLPG__ROUTE_* (atomic), pair_route[peer] the sends' and receives'; a failed decision is
   * repeated from route_err/route_msg. where[q]: rank q's published host and GPU, once read.
   * ipc: the staging allocation and its mappings, made at the first IPC operation. */
  atomic_int route;
  unsigned char *pair_route;
  dlpg_status_t route_err;
  char route_msg[768];
  char **where;
  int where_published;
  struct dlpg__ipc *ipc;
};

/* Process-wide lock that orders NCCL calls on cached communicators (read side: issue, poll,
 * init polling) against ncclCommAbort/ncclCommDestroy (write side), so no thread uses a
 * handle another thread is freeing. Read sections are short: NCCL calls that can wait for
 * a peer (init, split, the first use of a connection, finalize) go to non-blocking
 * communicators and are polled outside the lock (except in DLPG_NCCL_COMM_MODE=blocking). */
/* config.c: the group's NCCL settings (options' nccl_*) into cfg, and as text for the log
 * (" minCTAs=4 netName=IB", "" when all are NCCL's defaults). */
void dlpg__nccl_apply_config(const struct dlpg__nccl *st, ncclConfig_t *cfg);
void dlpg__nccl_describe_config(const struct dlpg__nccl *st, char *buf, size_t cap);

void dlpg__nccl_rdlock(void);
void dlpg__nccl_wrlock(void);
void dlpg__nccl_unlock(void);

/* dlpg_store_get in slices up to deadline, so an abort is seen; TIMEOUT naming what was
 * awaited (store_wait.c). */
dlpg_status_t dlpg__store_get_slices(const char *fn, struct dlpg__nccl *st, const char *key,
                                     void *buf, size_t cap, size_t *len, double deadline,
                                     const char *what);

/* Turn an NCCL result into a status + message naming fn and what ("ncclAllReduce")
 * (errors.c). */
dlpg_status_t dlpg__nccl_result(ncclResult_t r, ncclComm_t comm, const char *fn, const char *what);
dlpg_status_t dlpg__cuda_result(cudaError_t e, const char *fn, const char *what);

/* Reference counting of the per-group state and of cache entries. */
void dlpg__nccl_state_retain(struct dlpg__nccl *st);
void dlpg__nccl_state_release(struct dlpg__nccl *st);
void dlpg__nccl_comm_retain(dlpg__nccl_comm_t *c);
void dlpg__nccl_comm_release(dlpg__nccl_comm_t *c);

/* Ensure the communicator of every op exists (comm_create.c). comms[i] receives op i's entry
 * with a reference the caller releases. All missing ones are created together, so one
 * thread can create the communicators of several ranks' groups. */
dlpg_status_t dlpg__nccl_get_comms(const char *fn, dlpg__be_op_t *const *ops, int n,
                                   dlpg__nccl_comm_t **comms);

/* The NCCL rank, in c, of device i of op's peer (send/recv; alltoall uses none). */
static inline int dlpg__nccl_peer_rank(const dlpg__nccl_comm_t *c, const dlpg__be_op_t *op, int i) {
  if (c->peer == DLPG__NCCL_GROUP) return op->peer * c->ndev + i;
  if (c->peer == DLPG__NCCL_SELF) return i;
  return (1 - c->member) * c->ndev + i;
}

/* Split mode, after creation (comm_create.c): the ready non-blocking communicators of
 * nw[0..nn) become the parents of the blocking children operations use (a split of each,
 * polled against deadline). Entries of another mode are left alone. */
dlpg_status_t dlpg__nccl_split_all(const char *fn, dlpg__nccl_comm_t **nw, int nn,
                                   double deadline);
/* Mark entries READY (s OK) or FAILED with the thread's message, their handles aborted, and
 * wake waiters (comm_create.c). */
void dlpg__nccl_finish_all(dlpg__nccl_comm_t **nw, int nn, dlpg_status_t s);
/* backend_abi.h's state_split (comm_split.c): the parent's group communicators split into
 * the child's state (child NULL: this rank takes part without a child). */
dlpg_status_t dlpg__nccl_state_split(void *parent, const dlpg__be_group_t *child, int color,
                                     int key, void **child_state);

/* Poll the communicators until none reports ncclInProgress (after a non-blocking init,
 * split or group end), against deadline and the abort flags. parents: poll c->parents[]
 * instead of c->comms[]. The caller holds no lock. */
dlpg_status_t dlpg__nccl_wait_ready(const char *fn, dlpg__nccl_comm_t *const *cs, int nc,
                                    int parents, double deadline);

/* Devices (devices.c): OK when every device of op exists in this process; else
 * DLPG_ERR_SYSTEM naming the tensor, its device and what CUDA said (no usable driver or
 * GPU, fewer devices). */
dlpg_status_t dlpg__nccl_devices_rule(const char *fn, const dlpg__be_op_t *op);

/* Types (types.c). */
/* The NCCL type and op of a pair the backend's check accepted (both read rules.h's table),
 * and how many elements of that type one element of dt is (2 for a complex dtype, reduced
 * as its real parts). premul_sum's op is a placeholder: issue.c makes the real one. */
size_t dlpg__nccl_reduce_type(dlpg__dtype_t dt, dlpg_reduce_op_t op, ncclDataType_t *type,
                              ncclRedOp_t *rop);
/* Bytes of one element of dt (every dtype of backend_abi.h; 0 for one past its table). */
size_t dlpg__nccl_elem_size(dlpg__dtype_t dt);
/* Compute capability major of device dev (cached; 0 when unknown). */
int dlpg__nccl_device_cc_major(int dev);

/* Reducing ops (premul.c): the NCCL type, op and count multiplier of op's reduction on
 * device slot i of c, whose handle comm is (comms[i] or parents[i]); a premul_sum op is
 * made once per (comm, type, factor) and kept in c->premul. Caller holds c->issue_mu. */
dlpg_status_t dlpg__nccl_reduce_args(const char *fn, const dlpg__be_op_t *op,
                                     dlpg__nccl_comm_t *c, int i, ncclComm_t comm,
                                     ncclDataType_t *type, ncclRedOp_t *rop, size_t *mult);

/* The rooted and uneven collectives (issue_v.c): GATHER, SCATTER, ALLGATHERV, ALLTOALLV,
 * REDUCE_SCATTER_V. */
static inline int dlpg__nccl_is_v(dlpg__op_kind_t kind) {
  return kind == DLPG__OP_GATHER || kind == DLPG__OP_SCATTER || kind == DLPG__OP_ALLGATHERV ||
         kind == DLPG__OP_ALLTOALLV || kind == DLPG__OP_REDUCE_SCATTER_V;
}
/* The NCCL operation a rooted or uneven op is issued as, in the same words for every rank
 * (from what all ranks agree on): DLPG__OP_ALLGATHER or DLPG__OP_REDUCE_SCATTER for an
 * ALLGATHERV or REDUCE_SCATTER_V whose counts are all equal and packed (one NCCL
 * collective), DLPG__OP_ALLTOALL for the send/recv forms (gather, scatter, alltoallv, the
 * other allgatherv: every peer both ways at most), and the op's own kind otherwise (the
 * grouped ncclReduce of an uneven reduce_scatter_v). size: the group's world size. */
dlpg__op_kind_t dlpg__nccl_v_runs_as(const dlpg__be_op_t *op, int size);
/* Enqueue op (one of dlpg__nccl_is_v's kinds) on device slot i of c through handle comm on
 * stream s, inside the caller's ncclGroupStart/End, the slot's device current. */
dlpg_status_t dlpg__nccl_enqueue_v(const char *fn, const dlpg__be_op_t *op,
                                   dlpg__nccl_comm_t *c, int i, ncclComm_t comm,
                                   cudaStream_t s);

/* event_pool.c: cudaEventQuery in relaxed capture mode, so that no thread's CUDA graph capture
 * is invalidated (for events recorded outside any capture). */
cudaError_t dlpg__nccl_event_query(cudaEvent_t ev);
/* Work pollers (events.c). Attach a poller to w covering the ndev events recorded on
 * streams after the op, or complete w as enqueued when capturing. */
dlpg_status_t dlpg__nccl_attach_work(const char *fn, dlpg__be_op_t *op, dlpg__nccl_comm_t *c,
                                     cudaStream_t *streams);

/* The per-group, per-device pool of CUDA events (event_pool.c): take one of device dev (the
 * current device) or create it; give it back; destroy the pooled ones (last reference). */
dlpg_status_t dlpg__nccl_event_get(const char *fn, struct dlpg__nccl *st, int dev,
                                   dlpg__nccl_event_t **out);
void dlpg__nccl_event_put(struct dlpg__nccl *st, dlpg__nccl_event_t *e);
void dlpg__nccl_free_events(struct dlpg__nccl *st);

#ifdef __cplusplus
}
#endif
#endif
