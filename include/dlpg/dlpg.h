/*
 * dlpg.h -- the dlpg ABI: a process group over DLPack tensors.
 *
 * This is the only header a host needs. It includes only <stddef.h>, <stdint.h>,
 * <dlpack/dlpack.h> and its version, dlpg/dlpg_version.h (generated from the build's
 * project() version, installed beside it), and compiles as C99 and as C++. This header is the contract;
 * where its C spelling refines the design notes, the comment beside the declaration says
 * so.
 *
 * Conventions that hold for every function unless its comment says otherwise:
 *  - It returns a dlpg_status_t; results travel through out-parameters, which are written
 *    only on DLPG_OK.
 *  - On failure, dlpg_last_error() on the same thread returns a message naming the
 *    function, the argument and the offending values.
 *  - It never calls abort() or exit() and never lets a C++ exception escape.
 *  - It is thread-safe: handles may be used from several threads at once. Operations
 *    issued concurrently on one group from different threads are executed in the order
 *    they were submitted, which every rank must agree on (as with NCCL and c10d).
 *  - Timeouts are in seconds (double). A timeout argument <= 0 means "the default of the
 *    object it applies to" (the store's or the group's timeout).
 */
#ifndef DLPG_DLPG_H_
#define DLPG_DLPG_H_

#include <stddef.h>
#include <stdint.h>
#include <dlpack/dlpack.h>
#include "dlpg/dlpg_version.h" /* DLPG_VERSION_MAJOR, _MINOR, _PATCH */

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ versions */

/* DLPG_VERSION_MAJOR, DLPG_VERSION_MINOR, DLPG_VERSION_PATCH: dlpg/dlpg_version.h. */
/* MAJOR * 10000 + MINOR * 100 + PATCH, like NCCL_VERSION_CODE. */
#define DLPG_VERSION_CODE (DLPG_VERSION_MAJOR * 10000 + DLPG_VERSION_MINOR * 100 + DLPG_VERSION_PATCH)
/* The ABI major carried in the SONAME (libdlpg.so.0) and asked for by dlpg_get_api(). */
#define DLPG_ABI_MAJOR DLPG_VERSION_MAJOR

/* DLPack codes newer than the packaged dlpack.h (Debian ships 0.6). Values from DLPack 1.1;
 * defined here only when the included dlpack.h lacks them. */
#define DLPG_DL_BOOL 6
#define DLPG_DL_FLOAT8_E4M3FN 10
#define DLPG_DL_FLOAT8_E5M2 12

/* ------------------------------------------------------------------ status */

/* X(name, value, meaning): every status, the one table behind the enum below and
 * dlpg_status_name (model: libuv's UV_ERRNO_MAP). A host may expand it too. Values are
 * explicit and never renumbered. */
#define DLPG_STATUS_MAP(X)                                                                 \
  X(DLPG_OK, 0, "success")                                                                 \
  X(DLPG_ERR_INVALID_ARGUMENT, 1, "bad input: NULL, out of range, mismatched tensors")     \
  X(DLPG_ERR_UNSUPPORTED, 2, "valid request this build or device cannot serve")            \
  X(DLPG_ERR_TIMEOUT, 3, "a deadline passed (store key, rendezvous, wait)")                \
  X(DLPG_ERR_REMOTE, 4, "a peer failed, left, or reported an error")                       \
  X(DLPG_ERR_ABORTED, 5, "the group was aborted")                                          \
  X(DLPG_ERR_SYSTEM, 6, "an OS, CUDA or NCCL call failed")                                 \
  X(DLPG_ERR_INTERNAL, 7, "a bug in dlpg")

typedef enum dlpg_status {
#define DLPG_STATUS_ENUMERATOR_(name, value, meaning) name = value,
  DLPG_STATUS_MAP(DLPG_STATUS_ENUMERATOR_)
#undef DLPG_STATUS_ENUMERATOR_
} dlpg_status_t;

/* "DLPG_OK", "DLPG_ERR_TIMEOUT", ...; "DLPG_ERR_UNKNOWN" for a value outside the enum.
 * Returns a static string (not a status). */
const char *dlpg_status_name(dlpg_status_t status);

/* The message of the calling thread's last failed dlpg call ("" if none). The pointer is
 * valid until the next dlpg call on this thread. Returns a string (not a status). */
const char *dlpg_last_error(void);

/* DLPG_VERSION_CODE of the loaded library (compare with the header's). */
dlpg_status_t dlpg_get_version(int *version_code);

/* A static string naming the dlpg version and the NCCL, CUDA and Gloo versions this
 * library was built with ("dlpg 0.1.0; nccl 2.28.9; cuda 13.0; gloo 0.5.0", or "nccl none"). */
dlpg_status_t dlpg_get_build_info(const char **info);

/* ------------------------------------------------------------------ handles */

typedef struct dlpg_store dlpg_store_t; /* key-value store for rendezvous */
typedef struct dlpg_group dlpg_group_t; /* a process group */
typedef struct dlpg_work dlpg_work_t;   /* one asynchronous operation */

/* ------------------------------------------------------------------ store */

/* Limits of the dlpg TCP store (and every store, as far as dlpg checks them). */
#define DLPG_STORE_MAX_KEY_LEN 4096u            /* bytes, excluding the terminating NUL */
#define DLPG_STORE_MAX_VALUE_LEN (64u << 20)    /* 64 MiB */

/*
 * Open a store. Blocking (connects, retrying with backoff until timeout_s has passed).
 *   "tcp://HOST:PORT"          client of a dlpg TCP store server (dlpg-store, or a rank that serves)
 *   "tcp://HOST:PORT?serve=1"  also host the server in this process; PORT 0 picks a free
 *                              port (dlpg_store_port tells which)
 *   "redis://HOST:PORT[/DB]"   a Redis server (the token, if any, is its password)
 *   "file:///PATH"             Gloo's FileStore on a shared filesystem
 *   "env://"                   the launcher's store (dlpg_group_create_from_env says where:
 *                              DLPG_STORE_URL, MASTER_ADDR with DLPG_STORE_PORT or
 *                              MASTER_PORT + 1, mpirun's or Slurm's); the process of rank 0
 *                              (or with no rank) serves
 * timeout_s also becomes the default deadline of get and wait on this store.
 * An unknown scheme, a malformed URL or a port outside [0, 65535] is
 * DLPG_ERR_INVALID_ARGUMENT (the message names the URL); a serving store whose port is taken
 * is DLPG_ERR_SYSTEM naming the address; a server (tcp:// or redis://) not reached within
 * timeout_s is DLPG_ERR_TIMEOUT naming its address and the last connection error.
 * The caller owns *store and releases it with dlpg_store_close.
 */
dlpg_status_t dlpg_store_open(const char *url, double timeout_s, dlpg_store_t **store);

/* The TCP port of a tcp:// or env:// store (the port chosen when 0 was asked for). */
dlpg_status_t dlpg_store_port(dlpg_store_t *store, int *port);

/*
 * A store implemented by the host (PyTorch's c10d store, JAX's key-value client).
 * Callbacks may be called from any dlpg thread, one at a time per store. Each returns a
 * dlpg_status_t; a non-OK status fails the dlpg operation that needed it.
 */
typedef struct dlpg_store_ops {
  size_t struct_size; /* sizeof(dlpg_store_ops_t) as the host compiled it */
  /* Store value (len bytes, may contain NULs) under key. */
  dlpg_status_t (*set)(void *ctx, const char *key, const void *value, size_t len);
  /* Block until key exists (at most timeout_s seconds, then DLPG_ERR_TIMEOUT). Copy up to
   * capacity bytes of its value into buf and set *len to the value's full length. dlpg
   * calls again with a larger buffer when *len > capacity. */
  dlpg_status_t (*get)(void *ctx, const char *key, double timeout_s, void *buf,
                       size_t capacity, size_t *len);
  /* Atomically add delta to the integer stored under key (absent counts as 0) and return
   * the new value. */
  dlpg_status_t (*add)(void *ctx, const char *key, int64_t delta, int64_t *result);
  /* Optional (NULL: dlpg waits by calling get on each key). Block until all keys exist. */
  dlpg_status_t (*wait)(void *ctx, const char *const *keys, size_t nkeys, double timeout_s);
  /* Optional. Called once when the last reference to the store is dropped. */
  void (*release)(void *ctx);
  /* Optional (NULL: check and delete_key return DLPG_ERR_UNSUPPORTED). */
  dlpg_status_t (*check)(void *ctx, const char *const *keys, size_t nkeys, int *all_exist);
  dlpg_status_t (*delete_key)(void *ctx, const char *key, int *deleted);
  /* Optional (NULL: unknown; a late field, read only when struct_size covers it): the host
   * the store's server runs on (torch's TCPStore's host). Copied. Backends that listen for
   * peers bind to the local address that routes there, as for a tcp:// store; unknown, they
   * route to MASTER_ADDR when it is set. */
  const char *host;
} dlpg_store_ops_t;

/* Wrap host callbacks as a store. ops is copied (only ops->struct_size bytes are read);
 * ctx is borrowed until release is called. timeout_s is the default deadline of get/wait. */
dlpg_status_t dlpg_store_from_ops(const dlpg_store_ops_t *ops, void *ctx, double timeout_s,
                                  dlpg_store_t **store);

/* Set key to value (len bytes). Keys are NUL-terminated, 1..DLPG_STORE_MAX_KEY_LEN bytes;
 * values 0..DLPG_STORE_MAX_VALUE_LEN bytes. */
dlpg_status_t dlpg_store_set(dlpg_store_t *store, const char *key, const void *value, size_t len);

/* Block until key exists (timeout_s <= 0: the store's timeout), then copy up to capacity
 * bytes into buf (buf may be NULL when capacity is 0) and set *len to the full length.
 * Call with capacity 0 to learn the length. */
dlpg_status_t dlpg_store_get(dlpg_store_t *store, const char *key, double timeout_s,
                             void *buf, size_t capacity, size_t *len);

/* Atomically add delta to the decimal integer stored under key (absent = 0); *result
 * (may be NULL) receives the new value. */
dlpg_status_t dlpg_store_add(dlpg_store_t *store, const char *key, int64_t delta, int64_t *result);

/* Block until every key exists; DLPG_ERR_TIMEOUT names the keys still missing. */
dlpg_status_t dlpg_store_wait(dlpg_store_t *store, const char *const *keys, size_t nkeys,
                              double timeout_s);

/* Non-blocking: *all_exist = 1 if every key exists, else 0. */
dlpg_status_t dlpg_store_check(dlpg_store_t *store, const char *const *keys, size_t nkeys,
                               int *all_exist);

/* Remove key; *deleted (may be NULL) = 1 if it existed. */
dlpg_status_t dlpg_store_delete_key(dlpg_store_t *store, const char *key, int *deleted);

/* Drop the caller's reference. Groups created on the store hold their own reference, so a
 * store may be closed right after dlpg_group_create. A serving store stops its server
 * when the last reference goes. NULL is accepted and ignored. */
dlpg_status_t dlpg_store_close(dlpg_store_t *store);

/* ------------------------------------------------------------------ group */

typedef struct dlpg_group_options {
  size_t struct_size; /* sizeof(dlpg_group_options_t) as the host compiled it */
  /* Deadline of every blocking step (rendezvous, communicator creation, wait).
   * <= 0: DLPG_TIMEOUT from the environment, else 300 s. */
  double timeout_s;
  /* Key prefix in the store, so several groups share one store. NULL or "": DLPG_GROUP_NAME
   * from the environment, else "dlpg". Copied. Every rank must pass the same name. */
  const char *name;
  /* Appended in 0.1 (read only when struct_size reaches them; a caller built against an
   * older header gets the defaults): the NCCL communicator configuration (ncclConfig_t) of
   * every NCCL communicator the group makes (ncclCommInitRankConfig, and ncclCommSplit for
   * the communicators of dlpg_group_split children, which inherit their parent's settings
   * but for those their own options set). DLPG_NCCL_DEFAULT (an int) or NULL (a string):
   * NCCL's own default (so are CTA counts of 0; a struct zeroed instead of initialised with
   * DLPG_GROUP_OPTIONS_INIT asks for cgaClusterSize 0 and trafficClass 0). Host backends
   * ignore them. A value out of range is DLPG_ERR_INVALID_ARGUMENT naming the field and the
   * value. */
  int nccl_cga_cluster_size; /* cgaClusterSize: 0..8 */
  int nccl_min_ctas;         /* minCTAs: 1..64 */
  int nccl_max_ctas;         /* maxCTAs: 1..64, >= nccl_min_ctas when both are set */
  int nccl_traffic_class;    /* trafficClass: >= 0 */
  const char *nccl_net_name;  /* netName (e.g. "IB", "Socket"); copied */
  const char *nccl_comm_name; /* commName (NCCL's logs and profiler); copied */
} dlpg_group_options_t;

/* An nccl_* int of dlpg_group_options_t left to NCCL. */
#define DLPG_NCCL_DEFAULT (-1)

#define DLPG_GROUP_OPTIONS_INIT                                                              \
  {sizeof(dlpg_group_options_t), 0.0, NULL, DLPG_NCCL_DEFAULT, DLPG_NCCL_DEFAULT,           \
   DLPG_NCCL_DEFAULT, DLPG_NCCL_DEFAULT, NULL, NULL}

/* Create a group of world_size ranks on store. Cheap and non-blocking: no communicator
 * or connection is made until the first operation that needs one. options may be NULL
 * (defaults). The group keeps a reference to store.
 * One job: the ranks' groups of one name agree, at their first operations, on a job
 * number that scopes every store key the group writes, so a group never reads what an
 * earlier job under the same name left on a long-lived store (a failed job, a retry in the
 * same process, ranks that made different numbers of groups of the name). Rank 0 takes the
 * number here; another rank's first operation waits (up to the timeout) until rank 0 has
 * issued its own first operation on the group, not for the other ranks. */
dlpg_status_t dlpg_group_create(dlpg_store_t *store, int rank, int world_size,
                                const dlpg_group_options_t *options, dlpg_group_t **group);

/* Create a group of the job of the launcher that started this process, on its env://
 * store. Rank and size: RANK/WORLD_SIZE (torchrun), OMPI_COMM_WORLD_RANK/SIZE (Open MPI),
 * PMI_RANK/PMI_SIZE (MPICH/Hydra) or SLURM_PROCID/SLURM_NTASKS (Slurm), first set first.
 * The store: DLPG_STORE_URL (a running server), else MASTER_ADDR (port DLPG_STORE_PORT, else
 * MASTER_PORT + 1, else derived from the launcher's job id), else 127.0.0.1 when the
 * launcher says every rank is on this host (port DLPG_STORE_PORT or derived), else the first
 * node of the Slurm step; rank 0 serves. An mpirun/mpiexec job across hosts without
 * MASTER_ADDR or DLPG_STORE_URL is DLPG_ERR_INVALID_ARGUMENT naming them. options may be
 * NULL. */
dlpg_status_t dlpg_group_create_from_env(const dlpg_group_options_t *options,
                                         dlpg_group_t **group);

dlpg_status_t dlpg_group_rank(const dlpg_group_t *group, int *rank);
dlpg_status_t dlpg_group_size(const dlpg_group_t *group, int *world_size);

/* Abort from any thread: pending and later operations end with DLPG_ERR_ABORTED, NCCL
 * communicators are aborted (ncclCommAbort), blocked waits return. Idempotent.
 * Failure propagation: a rank whose operation fails (timeout, abort, a backend error, a
 * call only it rejects) records that in the group's store; peers blocked in the group's
 * operations end within about a second with DLPG_ERR_REMOTE naming that rank and its
 * message, and the group is then aborted on every rank (later operations fail at once with
 * DLPG_ERR_REMOTE). A new group of the same name on the same store starts clean.
 * DLPG_PROPAGATE_FAILURES=0 turns this off. */
dlpg_status_t dlpg_group_abort(dlpg_group_t *group);

/* Release the group: waits (up to the group's timeout) for queued operations, then
 * destroys communicators and threads. Work handles stay valid until freed. NULL ignored. */
dlpg_status_t dlpg_group_destroy(dlpg_group_t *group);

/* The group's flight recorder: its last operations (DLPG_FLIGHT_RECORDER_ENTRIES, default
 * 64), oldest first, one line each:
 *   coll_seq=3 op=dlpg_allreduce dtype=float32 count=1000 devices=cpu peer=- backend=shm
 *   state=done status=DLPG_OK issued=12.000100 started=12.000120 ended=12.000410
 *   duration_ms=0.310
 * (on one line). coll_seq numbers collectives (barrier included) and p2p_seq sends and
 * receives, each from 1 in issue order; peer is the p2p peer ("any" for a
 * DLPG_ANY_SOURCE receive) or the root; devices "cpu",
 * "cuda:0,1" or "-"; backend the one that ran it (CPU: "shm" or "gloo", the group's choice,
 * sends and receives their pair's; CUDA "nccl"); state queued, started, enqueued (CUDA without a work handle), done or
 * failed; times in seconds on CLOCK_MONOTONIC, "-" until reached. Whole lines are copied into
 * buf (NUL-terminated when capacity > 0); *len receives the length of the whole text
 * without the NUL, so a call with buf NULL and capacity 0 sizes the buffer. The same lines
 * are logged (WARN) when the group times out, is aborted or fails because of a peer. */
dlpg_status_t dlpg_group_flight_record(dlpg_group_t *group, char *buf, size_t capacity,
                                       size_t *len);

/* ---- subgroups (added in 0.1 at the end of dlpg_api_t: check struct_size) */

/* color of dlpg_group_split for a rank that takes part in no child (as MPI_UNDEFINED):
 * any negative color does the same. */
#define DLPG_SPLIT_NONE (-1)

/* Split parent into disjoint children, as MPI_Comm_split: the ranks that pass the same
 * color >= 0 form one child, ordered by key, then by parent rank; a rank that passes a
 * negative color takes part in the call but gets *child = NULL. Collective over the parent:
 * every rank of the parent calls it, in the same order relative to the parent's other
 * splits (not inside a dlpg_group_start/end batch). No new rendezvous: the child uses the
 * parent's store and the job the parent's ranks agreed on (its keys are scoped under the
 * parent's), and the ranks' colors and keys are exchanged once: through that store, or, once
 * the parent has run a collective on host memory, as one allgather of the parent (in its
 * flight recorder, and, like any collective, a timeout there aborts the parent); the
 * child's connections are made lazily at its first operation, as for a created group, and
 * where the parent already has an NCCL communicator for the child's device list the
 * child's is split from it (ncclCommSplit). options may be NULL: the child takes the
 * parent's timeout; options->name (copied) names the child in messages and the flight
 * recorder (default: "<parent name>/<color>"), it does not scope keys.
 * The child is an ordinary group (destroy it with dlpg_group_destroy, before or after its
 * parent: it holds what it needs of the parent); dlpg_group_abort of the parent aborts its
 * live children (not the other way round); a failure in a child is reported to the child's
 * ranks only. Messages name a child's ranks by their child rank and add the parent rank
 * where it differs ("rank 1 (parent rank 5)").
 * DLPG_ERR_INVALID_ARGUMENT for a NULL parent or child, or inside a batch; ranks that passed
 * different numbers of splits meet a timeout naming the parent ranks that had not split. */
dlpg_status_t dlpg_group_split(dlpg_group_t *parent, int color, int key,
                               const dlpg_group_options_t *options, dlpg_group_t **child);

/* A child of parent made of the parent ranks ranks[0..n), in that order (child rank i is
 * parent rank ranks[i]), as MPI_Comm_create_group: collective over those members only --
 * every member calls it with the same list, in the same order relative to its other
 * dlpg_group_create_subset calls on parent; the parent's other ranks do not call it. No
 * exchange at all: the child is in the parent's job (keys scoped under the parent's, named
 * by the list and by how many children of that same list this rank made before), takes the
 * parent's host-memory backend choice where the parent made one by the locality rule or was
 * forced, and connects lazily at its first operation, as a created group. The call joins the
 * parent's job first if this rank has not yet (the parent's rank 0 admits the others from
 * its first operation, dlpg_group_split or dlpg_group_create_subset on the parent: a member
 * waits up to the parent's timeout for that, and the timeout names the parent's rank 0).
 * options as dlpg_group_split's (default name "<parent name>/<ranks>"). The child is an
 * ordinary group, destroyed and aborted as a dlpg_group_split child. A member that never
 * calls it (or passes another list) leaves the others' first operation on the child to
 * time out naming it. DLPG_ERR_INVALID_ARGUMENT for a NULL parent, ranks or child, n < 1 or
 * above the parent's size, a rank out of the parent's range or listed twice, a list without
 * the calling rank, or a call inside a batch. */
dlpg_status_t dlpg_group_create_subset(dlpg_group_t *parent, int n, const int *ranks,
                                       const dlpg_group_options_t *options,
                                       dlpg_group_t **child);

/* ------------------------------------------------------------------ operations */

typedef enum dlpg_reduce_op {
  DLPG_SUM = 0,
  DLPG_PROD = 1,
  DLPG_MIN = 2,
  DLPG_MAX = 3,
  DLPG_AVG = 4,  /* sum divided by the number of contributions (world_size * ntensors) */
  DLPG_BAND = 5, /* bitwise ops: integer and bool tensors, CPU (shm and Gloo) only */
  DLPG_BOR = 6,
  DLPG_BXOR = 7,
  /* Each rank's input multiplied by a scalar, then summed (torch's and NCCL's premul-sum;
   * FSDP's gradient pre-division): floating and complex dtypes. It needs its scalar, so it
   * is taken only through a dlpg_reduce_desc_t (dlpg_allreduce_ex, dlpg_reduce_ex,
   * dlpg_reduce_scatter_ex); the plain functions refuse it with DLPG_ERR_INVALID_ARGUMENT
   * naming the _ex call to use. Added in 0.1 after the first table. */
  DLPG_PREMUL_SUM = 8
} dlpg_reduce_op_t;

/* A reduce op with its arguments, for the _ex forms of the reducing collectives. Set
 * struct_size to sizeof(dlpg_reduce_desc_t); fields are only ever appended, and a library
 * reads only those the caller's struct_size covers. */
typedef struct dlpg_reduce_desc {
  size_t struct_size;
  dlpg_reduce_op_t op;
  /* DLPG_PREMUL_SUM: the factor each rank's input is multiplied by before the sum (every
   * rank passes its own; torch passes the same on all). Applied in the tensor's dtype
   * (float16/bfloat16 through float32; complex: both parts, as pairs of reals), so a float
   * result may differ from a sum-then-multiply in the last bits. Ignored for other ops. */
  double scalar;
} dlpg_reduce_desc_t;

/*
 * Common rules of every operation (with the tensor conventions at the top of this header):
 *  - inputs/outputs: ntensors DLTensor pointers, one per local device: all CPU (ntensors
 *    must be 1), or all CUDA on distinct devices. outputs == NULL means in place where the
 *    operation allows it (allreduce, broadcast, reduce). The DLTensor structs are read
 *    during the call only; the memory they point to is borrowed until the work completes.
 *    A tensor's bytes, data + byte_offset up to its size, must lie in user address space:
 *    an extent that wraps or ends past 2^56 (above the user space of every 64-bit Linux) is
 *    DLPG_ERR_INVALID_ARGUMENT before any memory is touched. An address inside user space
 *    that is not mapped (data + 2^40, say) is not checked against the mappings: as for any
 *    C API it is the caller's bug, and the process may crash. Likewise the memory an
 *    operation writes -- outputs, inputs in place, a receive buffer -- must be writable: a
 *    DLTensor says nothing of it (DLPack 1.0's read-only flag lives in the managed tensor,
 *    which dlpg is not given), so a read-only mapping (PROT_READ, a read-only NumPy array's
 *    buffer) crashes the process at the first write. The Python binding refuses read-only
 *    memory it can recognise with DLPG_ERR_INVALID_ARGUMENT before the call.
 *  - streams: ntensors cudaStream_t as void*, or NULL for each device's default stream.
 *    Ignored for CPU tensors.
 *  - work: if non-NULL receives a handle to free with dlpg_work_free. If NULL, the call
 *    returns once a CPU operation has completed (its status is returned) or once a CUDA
 *    operation has been enqueued on its stream.
 *  - Between dlpg_group_start and dlpg_group_end, calls only enqueue; the batch is issued
 *    at dlpg_group_end. An operation of the batch with work == NULL is then treated as
 *    above: dlpg_group_end returns once such CPU operations completed (their status is
 *    returned) and such CUDA operations are enqueued.
 *  - Which status a rejected call gets (every plugin of this ABI returns exactly these;
 *    dlpg_reduce_supported answers the same for a device, dtype and reduce op):
 *      DLPG_ERR_UNSUPPORTED       valid DLPack this library does not serve: a device type no
 *                                 backend serves (kDLOpenCL, kDLVulkan, ...); dtype lanes != 1;
 *                                 a dtype code or code/bits pair outside int8-64, uint8-64,
 *                                 float16, bfloat16, float32, float64, bool, float8 e4m3fn/e5m2,
 *                                 complex64/128 (code 99, float with 24 bits); a (dtype, reduce
 *                                 op) pair the device's backend cannot reduce (bitwise on
 *                                 float32, avg or premul_sum on an integer, max/min/prod or
 *                                 bitwise on a complex dtype, float8 on the CPU; the message
 *                                 names the dtype by name); a CUDA tensor when the NCCL
 *                                 module is absent or cannot load (the message says why).
 *      DLPG_ERR_INVALID_ARGUMENT  a call that breaks the rules whatever the build: NULL
 *                                 pointers, ntensors out of range, a negative device id,
 *                                 shape, strides or ndim, a byte_offset whose extent leaves
 *                                 user address space (above), a reduce op outside
 *                                 dlpg_reduce_op_t (or DLPG_PREMUL_SUM given to a plain
 *                                 function, or a dlpg_reduce_desc_t that is NULL or whose
 *                                 struct_size does not cover its scalar), root or peer
 *                                 outside [0, world_size) (but DLPG_ANY_SOURCE for
 *                                 dlpg_recv), tensors
 *                                 of one call that differ in dtype, size or device kind (a CPU
 *                                 input with a CUDA output), a mismatch with the peers' tensors.
 *      DLPG_ERR_SYSTEM            the NCCL module loaded but a CUDA or NCCL call failed, e.g.
 *                                 a CUDA tensor on a machine with no usable GPU or driver (the
 *                                 message names the call and CUDA's reason).
 *    The message names the function, the argument ("inputs[0]", "outputs[0]", "tensor") and
 *    the offending values (the lane count, the dtype code, the device, the sizes, the ranks).
 */
dlpg_status_t dlpg_allreduce(dlpg_group_t *g, DLTensor *const *inputs, DLTensor *const *outputs,
                             int ntensors, dlpg_reduce_op_t op, void *const *streams,
                             dlpg_work_t **work);

/* The reducing collectives with a reduce descriptor (any op, DLPG_PREMUL_SUM included):
 * otherwise exactly dlpg_allreduce, dlpg_reduce and dlpg_reduce_scatter. Complex tensors
 * (complex64, complex128) reduce with sum, avg and premul_sum, as pairs of reals; every
 * operation that only moves data takes them as bytes. Added in 0.1 at the end of dlpg_api_t
 * (check struct_size). */
dlpg_status_t dlpg_allreduce_ex(dlpg_group_t *g, DLTensor *const *inputs,
                                DLTensor *const *outputs, int ntensors,
                                const dlpg_reduce_desc_t *op, void *const *streams,
                                dlpg_work_t **work);
dlpg_status_t dlpg_reduce_ex(dlpg_group_t *g, DLTensor *const *inputs, DLTensor *const *outputs,
                             int ntensors, const dlpg_reduce_desc_t *op, int root,
                             void *const *streams, dlpg_work_t **work);
dlpg_status_t dlpg_reduce_scatter_ex(dlpg_group_t *g, DLTensor *const *inputs,
                                     DLTensor *const *outputs, int ntensors,
                                     const dlpg_reduce_desc_t *op, void *const *streams,
                                     dlpg_work_t **work);

/* Root rank's inputs[0] is copied to every output (to every input when outputs == NULL). */
dlpg_status_t dlpg_broadcast(dlpg_group_t *g, DLTensor *const *inputs, DLTensor *const *outputs,
                             int ntensors, int root, void *const *streams, dlpg_work_t **work);

/* The reduction lands in root's outputs[0] (inputs[0] when outputs == NULL); other ranks'
 * outputs are not written. */
dlpg_status_t dlpg_reduce(dlpg_group_t *g, DLTensor *const *inputs, DLTensor *const *outputs,
                          int ntensors, dlpg_reduce_op_t op, int root, void *const *streams,
                          dlpg_work_t **work);

/* Each output (world_size * ntensors * numel(input) elements) receives every
 * contribution, rank-major then device. outputs must not be NULL. */
dlpg_status_t dlpg_allgather(dlpg_group_t *g, DLTensor *const *inputs, DLTensor *const *outputs,
                             int ntensors, void *const *streams, dlpg_work_t **work);

/* Each input holds world_size * ntensors blocks of numel(output) elements; contribution
 * index c = rank * ntensors + i receives the reduction of block c. */
dlpg_status_t dlpg_reduce_scatter(dlpg_group_t *g, DLTensor *const *inputs,
                                  DLTensor *const *outputs, int ntensors, dlpg_reduce_op_t op,
                                  void *const *streams, dlpg_work_t **work);

/* input and output hold world_size equal blocks; block j of rank i lands as block i of
 * rank j. One tensor per rank. stream may be NULL. */
dlpg_status_t dlpg_alltoall(dlpg_group_t *g, DLTensor *input, DLTensor *output, void *stream,
                            dlpg_work_t **work);

/* ---- rooted and uneven collectives (added in 0.1 at the end of dlpg_api_t: check
 * struct_size). One tensor per rank (CPU or one CUDA device); stream may be NULL. Counts and
 * displacements are in elements of the tensors' dtype, world_size entries each, and must
 * agree across ranks as each function says: a disagreement is DLPG_ERR_INVALID_ARGUMENT on
 * the ranks that see it, naming both ranks and both counts ("rank 0 sends 4 elements to
 * rank 2 but rank 2 expects 3 from rank 0") -- on host memory; on CUDA tensors (NCCL), which
 * compares no sizes across ranks, arrays that disagree are the caller's bug: the transfers
 * may never complete (dlpg_work_wait then ends in DLPG_ERR_TIMEOUT) or the blocks may be
 * short. Blocks of zero elements are allowed. A
 * negative count or displacement, or a block that overruns its tensor, is
 * DLPG_ERR_INVALID_ARGUMENT naming the array and index ("recv_displs[3]"). Every dtype the
 * library moves; tensors must be contiguous (as every tensor here). */

/* root's output (world_size * numel(input) elements) receives every rank's input,
 * rank-major. Ranks other than root do not touch output (it may be NULL). Every rank's
 * input has the same number of elements. */
dlpg_status_t dlpg_gather(dlpg_group_t *g, DLTensor *input, DLTensor *output, int root,
                          void *stream, dlpg_work_t **work);

/* root's input holds world_size blocks of numel(output) elements; block r lands in rank r's
 * output. Ranks other than root do not touch input (it may be NULL). */
dlpg_status_t dlpg_scatter(dlpg_group_t *g, DLTensor *input, DLTensor *output, int root,
                           void *stream, dlpg_work_t **work);

/* Rank r contributes its input (numel(input) == counts[r]); every rank's output receives
 * rank r's block at element displs[r] (displs NULL: packed, rank-major, so the output holds
 * at least the sum of counts). counts (and displs) must be the same on every rank. */
dlpg_status_t dlpg_allgatherv(dlpg_group_t *g, DLTensor *input, DLTensor *output,
                              const int64_t *counts, const int64_t *displs, void *stream,
                              dlpg_work_t **work);

/* Rank i sends send_counts[j] elements from input at send_displs[j] to rank j, which
 * receives them at recv_displs[i] of its output: rank j's recv_counts[i] must equal rank i's
 * send_counts[j]. Displacement arrays may be NULL (packed in rank order). input and output
 * must not overlap. */
dlpg_status_t dlpg_alltoallv(dlpg_group_t *g, DLTensor *input, const int64_t *send_counts,
                             const int64_t *send_displs, DLTensor *output,
                             const int64_t *recv_counts, const int64_t *recv_displs,
                             void *stream, dlpg_work_t **work);

/* input holds one block per rank: block r has counts[r] elements at displs[r] (displs NULL:
 * packed); rank r's output (counts[r] elements) receives the reduction of every rank's
 * block r. counts (and displs) must be the same on every rank. op is a reduce descriptor as
 * for dlpg_reduce_scatter_ex (any op, DLPG_PREMUL_SUM included), e.g.
 * dlpg_reduce_desc_t op = {sizeof op, DLPG_SUM, 0.0}. */
dlpg_status_t dlpg_reduce_scatter_v(dlpg_group_t *g, DLTensor *input, DLTensor *output,
                                    const int64_t *counts, const int64_t *displs,
                                    const dlpg_reduce_desc_t *op, void *stream,
                                    dlpg_work_t **work);

/* Point-to-point to/from group rank peer. On host memory (shared memory or Gloo), tag (>= 0)
 * matches sends to receives: the n-th send to a peer with a tag meets that peer's n-th
 * receive from this rank with that tag; on NCCL it only orders (messages between a pair
 * arrive in issue order). A receive whose size or dtype differs from its send fails with
 * DLPG_ERR_INVALID_ARGUMENT (so does a send above 4 KiB, which waits for the receiver).
 * Pairwise: a transfer involves its two ranks only (a connection of the pair, created lazily
 * by those two at their first transfer), never the rest of the group. Host memory: shared
 * memory of the pair when both ranks run on one host, else Gloo, decided per pair by the
 * two ranks alike (DLPG_CPU_BACKEND forces one). CUDA: that first
 * transfer creates the pair's communicator on the calling thread, so first transfers that
 * wait on each other in a cycle (a ring's first step) must be issued in one batch.
 * Progress: with a work handle the call returns at once and the transfer progresses on its
 * own, so a receive issued before its send never keeps that send (or any later operation)
 * from starting; CPU: on a thread of dlpg's, not behind the group's queued collectives
 * (a blocking one on shared memory runs on the calling thread);
 * CUDA (outside graph capture): on an internal stream of the pair, ordered after the work
 * already enqueued on stream but not before stream's later work, so wait for the work
 * (dlpg_work_wait/test) before using a received tensor or reusing a sent one. With
 * work == NULL the call is blocking as for every operation (CPU: returns when done; CUDA:
 * enqueued on stream). peer == this rank (to self) only inside a dlpg_group_start/end
 * batch that also holds the matching receive (else DLPG_ERR_INVALID_ARGUMENT). */
dlpg_status_t dlpg_send(dlpg_group_t *g, DLTensor *tensor, int peer, int tag, void *stream,
                        dlpg_work_t **work);
dlpg_status_t dlpg_recv(dlpg_group_t *g, DLTensor *tensor, int peer, int tag, void *stream,
                        dlpg_work_t **work);

/* ---- receive from any source (added in 0.1 at the end of dlpg_api_t: check struct_size) */

/* peer of dlpg_recv meaning "any rank" (as MPI_ANY_SOURCE): the receive matches the next
 * send with its tag from whichever rank of the group; messages from one sender still arrive
 * in their issue order, and with several senders ready any one of them may match. Only
 * dlpg_recv takes it (dlpg_send refuses it with DLPG_ERR_INVALID_ARGUMENT naming peer).
 * Host memory only: shared memory (every pair of the group on one host) and Gloo; a CUDA
 * tensor is DLPG_ERR_UNSUPPORTED at the call (NCCL has no any-source receive). The sender
 * is learned with dlpg_work_source (async) or dlpg_recv_any (blocking); a blocking
 * dlpg_recv with DLPG_ANY_SOURCE is allowed too. A timeout names the peer as "any rank";
 * the flight recorder shows peer=any. A receive to self inside a batch is not among the
 * candidates (name this rank explicitly). */
#define DLPG_ANY_SOURCE (-1)

/* Blocking dlpg_recv(g, tensor, DLPG_ANY_SOURCE, tag, stream, NULL) that also tells the
 * sender's group rank in *source (written on DLPG_OK only). Not inside a
 * dlpg_group_start/end batch (DLPG_ERR_INVALID_ARGUMENT: issue dlpg_recv with a work handle
 * there and ask dlpg_work_source). */
dlpg_status_t dlpg_recv_any(dlpg_group_t *g, DLTensor *tensor, int tag, int *source,
                            void *stream);

/* The group rank a completed receive's message came from: the named peer, or the matched
 * sender of a DLPG_ANY_SOURCE receive. DLPG_ERR_INVALID_ARGUMENT when w is not a receive or
 * has not completed successfully (the message says which). */
dlpg_status_t dlpg_work_source(const dlpg_work_t *w, int *source);

/* Completes once every rank has reached it (and every earlier operation of this group on
 * the calling rank has been issued). */
dlpg_status_t dlpg_barrier(dlpg_group_t *g, dlpg_work_t **work);

/* Batch the operations issued by the calling thread until the matching dlpg_group_end into
 * one NCCL group (batched send/recv, coalesced collectives); on Gloo, sends and receives of
 * a batch are posted together (each progresses on its own) so pairs of them cannot
 * deadlock. Calls may nest. As with
 * ncclGroupStart, the batch belongs to the thread and spans every group the thread issues
 * to until the outermost dlpg_group_end, so one thread can drive several ranks (a send on
 * one group and the matching recv on another). g is the group the call is made for; the
 * ends must match the starts per thread. */
dlpg_status_t dlpg_group_start(dlpg_group_t *g);
dlpg_status_t dlpg_group_end(dlpg_group_t *g);

/*
 * Capability query: whether this library reduces tensors of dtype on device with op
 * (dlpg_allreduce, dlpg_reduce and dlpg_reduce_scatter), answered by the backend that would
 * serve the device, without a group and without running anything on the device (NCCL's
 * float8 rule reads the device's compute capability). Returns what such a
 * call would return at the door for a valid, otherwise correct tensor:
 *   DLPG_OK                    supported;
 *   DLPG_ERR_UNSUPPORTED       the device type is served by no backend, the backend's module
 *                              cannot load, lanes != 1, an unknown dtype code or width, or a
 *                              (dtype, op) pair the backend cannot reduce; the message names
 *                              the device, the dtype and the op (or what failed to load);
 *   DLPG_ERR_INVALID_ARGUMENT  device_id < 0, or op outside dlpg_reduce_op_t.
 * A device type served at all is the query with DLPG_SUM on float32, which every backend
 * reduces. It may load the backend's module (as the first CUDA operation would). Added in
 * 0.1 at the end of dlpg_api_t (check struct_size).
 */
dlpg_status_t dlpg_reduce_supported(DLDevice device, DLDataType dtype, dlpg_reduce_op_t op);

/* ------------------------------------------------------------------ work */

/* Block the host until the operation is done (CUDA: its event has completed) and return
 * the operation's status. timeout_s <= 0: the group's timeout. On expiry the group is
 * aborted and DLPG_ERR_TIMEOUT returned, so no rank is left hanging; the message names the
 * ranks that had not reached the operation's sequence number (see dlpg_group_abort for how
 * the peers learn of it). */
dlpg_status_t dlpg_work_wait(dlpg_work_t *w, double timeout_s);

/* Non-blocking: *done = 1 once the operation has finished (successfully or not). */
dlpg_status_t dlpg_work_test(dlpg_work_t *w, int *done);

/* The failed operation's own message, "" while pending or on success. Valid until
 * dlpg_work_free. Returns a string (not a status). */
const char *dlpg_work_error(const dlpg_work_t *w);

/* Release the handle. Freeing unfinished work does not cancel it. NULL ignored. */
dlpg_status_t dlpg_work_free(dlpg_work_t *w);

/* ------------------------------------------------------------------ function table */

/*
 * The versioned table a host that dlopen()s the plugin uses (compare PJRT's GetPjrtApi).
 * Fields are only ever appended; check struct_size before using a field added later.
 */
typedef struct dlpg_api {
  size_t struct_size;     /* sizeof(dlpg_api_t) of the library */
  uint32_t abi_major;     /* DLPG_ABI_MAJOR */
  uint32_t version_code;  /* DLPG_VERSION_CODE */
  const char *(*status_name)(dlpg_status_t);
  const char *(*last_error)(void);
  dlpg_status_t (*get_version)(int *);
  dlpg_status_t (*get_build_info)(const char **);
  dlpg_status_t (*store_open)(const char *, double, dlpg_store_t **);
  dlpg_status_t (*store_port)(dlpg_store_t *, int *);
  dlpg_status_t (*store_from_ops)(const dlpg_store_ops_t *, void *, double, dlpg_store_t **);
  dlpg_status_t (*store_set)(dlpg_store_t *, const char *, const void *, size_t);
  dlpg_status_t (*store_get)(dlpg_store_t *, const char *, double, void *, size_t, size_t *);
  dlpg_status_t (*store_add)(dlpg_store_t *, const char *, int64_t, int64_t *);
  dlpg_status_t (*store_wait)(dlpg_store_t *, const char *const *, size_t, double);
  dlpg_status_t (*store_check)(dlpg_store_t *, const char *const *, size_t, int *);
  dlpg_status_t (*store_delete_key)(dlpg_store_t *, const char *, int *);
  dlpg_status_t (*store_close)(dlpg_store_t *);
  dlpg_status_t (*group_create)(dlpg_store_t *, int, int, const dlpg_group_options_t *,
                                dlpg_group_t **);
  dlpg_status_t (*group_create_from_env)(const dlpg_group_options_t *, dlpg_group_t **);
  dlpg_status_t (*group_rank)(const dlpg_group_t *, int *);
  dlpg_status_t (*group_size)(const dlpg_group_t *, int *);
  dlpg_status_t (*group_abort)(dlpg_group_t *);
  dlpg_status_t (*group_destroy)(dlpg_group_t *);
  dlpg_status_t (*allreduce)(dlpg_group_t *, DLTensor *const *, DLTensor *const *, int,
                             dlpg_reduce_op_t, void *const *, dlpg_work_t **);
  dlpg_status_t (*broadcast)(dlpg_group_t *, DLTensor *const *, DLTensor *const *, int, int,
                             void *const *, dlpg_work_t **);
  dlpg_status_t (*reduce)(dlpg_group_t *, DLTensor *const *, DLTensor *const *, int,
                          dlpg_reduce_op_t, int, void *const *, dlpg_work_t **);
  dlpg_status_t (*allgather)(dlpg_group_t *, DLTensor *const *, DLTensor *const *, int,
                             void *const *, dlpg_work_t **);
  dlpg_status_t (*reduce_scatter)(dlpg_group_t *, DLTensor *const *, DLTensor *const *, int,
                                  dlpg_reduce_op_t, void *const *, dlpg_work_t **);
  dlpg_status_t (*alltoall)(dlpg_group_t *, DLTensor *, DLTensor *, void *, dlpg_work_t **);
  dlpg_status_t (*send)(dlpg_group_t *, DLTensor *, int, int, void *, dlpg_work_t **);
  dlpg_status_t (*recv)(dlpg_group_t *, DLTensor *, int, int, void *, dlpg_work_t **);
  dlpg_status_t (*barrier)(dlpg_group_t *, dlpg_work_t **);
  dlpg_status_t (*group_start)(dlpg_group_t *);
  dlpg_status_t (*group_end)(dlpg_group_t *);
  dlpg_status_t (*work_wait)(dlpg_work_t *, double);
  dlpg_status_t (*work_test)(dlpg_work_t *, int *);
  const char *(*work_error)(const dlpg_work_t *);
  dlpg_status_t (*work_free)(dlpg_work_t *);
  dlpg_status_t (*group_flight_record)(dlpg_group_t *, char *, size_t, size_t *);
  dlpg_status_t (*reduce_supported)(DLDevice, DLDataType, dlpg_reduce_op_t);
  /* Receive from any source (added together, after reduce_supported). */
  dlpg_status_t (*recv_any)(dlpg_group_t *, DLTensor *, int, int *, void *);
  dlpg_status_t (*work_source)(const dlpg_work_t *, int *);
  /* Reduce descriptors (DLPG_PREMUL_SUM): appended together. */
  dlpg_status_t (*allreduce_ex)(dlpg_group_t *, DLTensor *const *, DLTensor *const *, int,
                                const dlpg_reduce_desc_t *, void *const *, dlpg_work_t **);
  dlpg_status_t (*reduce_ex)(dlpg_group_t *, DLTensor *const *, DLTensor *const *, int,
                             const dlpg_reduce_desc_t *, int, void *const *, dlpg_work_t **);
  dlpg_status_t (*reduce_scatter_ex)(dlpg_group_t *, DLTensor *const *, DLTensor *const *, int,
                                     const dlpg_reduce_desc_t *, void *const *, dlpg_work_t **);
  /* Subgroups, then the rooted and uneven collectives: appended together. */
  dlpg_status_t (*group_split)(dlpg_group_t *, int, int, const dlpg_group_options_t *,
                               dlpg_group_t **);
  dlpg_status_t (*gather)(dlpg_group_t *, DLTensor *, DLTensor *, int, void *, dlpg_work_t **);
  dlpg_status_t (*scatter)(dlpg_group_t *, DLTensor *, DLTensor *, int, void *, dlpg_work_t **);
  dlpg_status_t (*allgatherv)(dlpg_group_t *, DLTensor *, DLTensor *, const int64_t *,
                              const int64_t *, void *, dlpg_work_t **);
  dlpg_status_t (*alltoallv)(dlpg_group_t *, DLTensor *, const int64_t *, const int64_t *,
                             DLTensor *, const int64_t *, const int64_t *, void *,
                             dlpg_work_t **);
  dlpg_status_t (*reduce_scatter_v)(dlpg_group_t *, DLTensor *, DLTensor *, const int64_t *,
                                    const int64_t *, const dlpg_reduce_desc_t *, void *,
                                    dlpg_work_t **);
  /* A subgroup of the members only (appended after the uneven collectives). */
  dlpg_status_t (*group_create_subset)(dlpg_group_t *, int, const int *,
                                       const dlpg_group_options_t *, dlpg_group_t **);
} dlpg_api_t;

/* The table for ABI major abi_major, or NULL if this library does not implement it.
 * Static storage; never freed. */
const dlpg_api_t *dlpg_get_api(uint32_t abi_major);
typedef const dlpg_api_t *(*dlpg_get_api_fn)(uint32_t abi_major);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DLPG_DLPG_H_ */
