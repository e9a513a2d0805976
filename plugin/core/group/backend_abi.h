/* The backend ABI: everything a backend module (libdlpg_nccl.so) sees of core, and nothing
 * more. Model: NCCL's net plugins (ncclNet_vN): a versioned entry point, tables whose first
 * field is their size, and views instead of the host's own structs. A module includes this
 * header (plus the ground floor's base/status.h and base/clock.h, whose functions it gets
 * through the host table or compiles in) and never core's internals: it sees a group as a
 * dlpg__be_group_t and an operation as a dlpg__be_op_t, never struct dlpg_group or the rest
 * of core's dlpg__op_t. Core embeds each view in its own struct (core/group/group.h, core/group/op.h), so
 * handing one to a backend is a pointer, not a copy.
 *
 * Versioning: a module exports exactly one symbol, dlpg_backend_init_v<N>, for the version N
 * of this file it was built with. Core looks up its own version's name; a module exporting
 * another version, or whose tables report a version or size core does not know, fails to
 * load with a message naming both versions. Change DLPG__BACKEND_ABI_VERSION whenever a
 * struct here changes in a way a module built from other sources would misread; adding a
 * function at the end of dlpg__host_t keeps the version (struct_size tells the module), and
 * so does a field appended to dlpg__be_group_t or dlpg__backend_vtbl_t: core reads a table's
 * appended fields only when its struct_size covers them (dlpg__vtbl_has), and a module
 * reads the group's only when g->struct_size does. */
#ifndef DLPG_CORE_BACKEND_ABI_H_
#define DLPG_CORE_BACKEND_ABI_H_

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include "dlpg/dlpg.h"
#include "core/group/op_kinds.h" /* dlpg__op_kind_t and the kinds masks, from the kinds table */

#ifdef __cplusplus
extern "C" {
#endif

#define DLPG__BACKEND_ABI_VERSION 1
/* The entry point's name for this version: "dlpg_backend_init_v1". */
#define DLPG__BE_CAT2_(a, b) a##b
#define DLPG__BE_CAT_(a, b) DLPG__BE_CAT2_(a, b)
#define DLPG__BE_STR2_(x) #x
#define DLPG__BE_STR_(x) DLPG__BE_STR2_(x)
#define DLPG__BACKEND_INIT DLPG__BE_CAT_(dlpg_backend_init_v, DLPG__BACKEND_ABI_VERSION)
#define DLPG__BACKEND_INIT_NAME DLPG__BE_STR_(DLPG__BACKEND_INIT)
#define DLPG__BACKEND_INIT_PREFIX "dlpg_backend_init_v"

/* ------------------------------------------------------------------ tensors and ops */

/* Every dtype of dlpg.h. A value is a module's ABI: dtypes are only ever appended (before
 * DLPG__DT_COUNT), never reordered. A module built before a dtype was appended sees it as a
 * value at or past its own DLPG__DT_COUNT, so a module's check must refuse a dtype it does
 * not know (dt >= its DLPG__DT_COUNT) with DLPG_ERR_UNSUPPORTED before indexing a table by
 * it, and likewise a reduce op past the last it knows (DLPG_PREMUL_SUM was appended after
 * the first modules). Movement kinds carry nbytes, so a module may still move such a tensor
 * as bytes. Modules built before complex64/128 were appended index their reduce tables
 * without that check: pair a module with the library it was built with. */
typedef enum dlpg__dtype {
  DLPG__DT_INT8, DLPG__DT_INT16, DLPG__DT_INT32, DLPG__DT_INT64,
  DLPG__DT_UINT8, DLPG__DT_UINT16, DLPG__DT_UINT32, DLPG__DT_UINT64,
  DLPG__DT_FLOAT16, DLPG__DT_BFLOAT16, DLPG__DT_FLOAT32, DLPG__DT_FLOAT64,
  DLPG__DT_BOOL, DLPG__DT_FLOAT8_E4M3FN, DLPG__DT_FLOAT8_E5M2,
  /* Appended: pairs of float32 / float64 (real, imaginary). */
  DLPG__DT_COMPLEX64, DLPG__DT_COMPLEX128,
  DLPG__DT_COUNT
} dlpg__dtype_t;

/* 1 for complex64 and complex128: reduced (sum, avg, premul_sum) as pairs of reals. */
static inline int dlpg__dtype_is_complex(dlpg__dtype_t dt) {
  return dt == DLPG__DT_COMPLEX64 || dt == DLPG__DT_COMPLEX128;
}
/* The real dtype of a complex one's parts (dt itself otherwise). */
static inline dlpg__dtype_t dlpg__dtype_real_part(dlpg__dtype_t dt) {
  return dt == DLPG__DT_COMPLEX64 ? DLPG__DT_FLOAT32
         : dt == DLPG__DT_COMPLEX128 ? DLPG__DT_FLOAT64 : dt;
}

/* 1 for the floating dtypes (float8/16/32/64, bfloat16): those reduce op avg accepts. */
static inline int dlpg__dtype_is_float(dlpg__dtype_t dt) {
  return dt == DLPG__DT_FLOAT16 || dt == DLPG__DT_BFLOAT16 || dt == DLPG__DT_FLOAT32 ||
         dt == DLPG__DT_FLOAT64 || dt == DLPG__DT_FLOAT8_E4M3FN || dt == DLPG__DT_FLOAT8_E5M2;
}

/* A validated tensor (core/lines/tensor.c made it from a DLTensor; backends never see one). */
typedef struct dlpg__tensor {
  void *ptr;             /* data + byte_offset */
  int64_t numel;
  size_t nbytes;
  dlpg__dtype_t dtype;
  int backend;           /* registry slot of the backend serving the device */
  int device_type;       /* the DLDeviceType as given */
  int device_id;
} dlpg__tensor_t;

/* Most devices one rank may drive in one call. */
#define DLPG__MAX_LOCAL_DEVICES 16


/* A group as a backend sees it. Filled once when the group is made; lives as long as the
 * group, which outlives every state a backend made for it. */
typedef struct dlpg__be_group {
  size_t struct_size;    /* sizeof(dlpg__be_group_t) */
  int rank, size;
  double timeout_s;      /* the group's deadline for any blocking step, resolved (> 0) */
  const char *name;      /* key prefix in the store */
  dlpg_store_t *store;   /* opaque: use the host's store_set/store_get */
  const int *aborted;    /* nonzero once aborted: read with dlpg__be_group_aborted */
  /* The prefix of every store key a backend writes for this group, "<name>/dlpg/j<id>":
   * one job's, agreed by all its ranks (core/group/job.h), so that keys an earlier job left under
   * the same name (a long-lived store) are never read. Set by core before the group's first
   * backend state is made; NULL until then. Appended: read it with dlpg__be_group_keys. */
  const char *scope;
  /* The group's device communicator settings (dlpg_group_options_t's nccl_* fields, for
   * the backend that makes such communicators; -1 or NULL: that library's default).
   * Appended: read it with dlpg__be_group_comm. */
  const struct dlpg__be_comm_config *comm;
} dlpg__be_group_t;

typedef struct dlpg__be_comm_config {
  int cga_cluster_size, min_ctas, max_ctas, traffic_class;
  const char *net_name, *comm_name;
} dlpg__be_comm_config_t;

/* g's communicator settings; NULL from a host that predates the field (all defaults). */
static inline const dlpg__be_comm_config_t *dlpg__be_group_comm(const dlpg__be_group_t *g) {
  return g->struct_size > offsetof(dlpg__be_group_t, comm) ? g->comm : NULL;
}

static inline int dlpg__be_group_aborted(const dlpg__be_group_t *g) {
  return __atomic_load_n(g->aborted, __ATOMIC_ACQUIRE);
}

/* The key prefix of g's store keys: its job's scope (a host that predates the field: the
 * name). */
static inline const char *dlpg__be_group_keys(const dlpg__be_group_t *g) {
  return g->struct_size > offsetof(dlpg__be_group_t, scope) && g->scope ? g->scope : g->name;
}

/* The fields of an operation's view, in order. core/group/op.h names them twice over (the view
 * itself and the same fields directly, in one union), so core and a built-in backend write
 * op->kind while a module reads the same bytes as a dlpg__be_op_t. */
#define DLPG__BE_OP_FIELDS                                                                   \
  size_t struct_size;        /* sizeof(dlpg__be_op_t) */                                    \
  dlpg__op_kind_t kind;                                                                      \
  int ntensors;              /* 0 for BARRIER */                                             \
  int in_place;              /* out[i] is a copy of in[i] */                                 \
  dlpg_reduce_op_t rop;      /* ALLREDUCE, REDUCE, REDUCE_SCATTER */                         \
  int root;                  /* BROADCAST, REDUCE: group rank */                             \
  int peer, tag;             /* SEND, RECV */                                                \
  dlpg__tensor_t in[DLPG__MAX_LOCAL_DEVICES];                                                \
  dlpg__tensor_t out[DLPG__MAX_LOCAL_DEVICES];                                               \
  void *streams[DLPG__MAX_LOCAL_DEVICES]; /* NULL: the device's default stream */           \
  const dlpg__be_group_t *gview; /* the group it was issued on (a batch may span groups) */ \
  struct dlpg_work *work;    /* opaque completion target (host work_complete /             \
                                work_set_backend); NULL for an op of a caller-thread        \
                                backend whose caller passed no work */                     \
  void *state;               /* the backend's state of the group, set by core before issue */ \
  /* Appended: DLPG_PREMUL_SUM's factor (dlpg_reduce_desc_t's scalar), 0 otherwise. A module \
     reads it only when op->struct_size covers it (dlpg__be_op_scalar); a core that         \
     predates it never hands a module DLPG_PREMUL_SUM. */                                   \
  double scalar;                                                                             \
  /* Appended: the per-rank arrays of ALLGATHERV, ALLTOALLV and REDUCE_SCATTER_V, in        \
     elements, size entries each, validated (no negative entry, no block past its tensor)  \
     and with displacements resolved (packed ones computed where the caller gave NULL).     \
     Copies owned by the op (they live as long as the op record), so the caller's arrays    \
     may go when the call returns; NULL for the other kinds. A module reads them only when  \
     op->struct_size covers them (dlpg__be_op_counts); a core that predates them never      \
     hands a module these kinds (its kinds mask cannot name them). */                       \
  const int64_t *counts;      /* ALLGATHERV, REDUCE_SCATTER_V: counts; ALLTOALLV: send */   \
  const int64_t *displs;      /* likewise: displs, send_displs */                           \
  const int64_t *recv_counts; /* ALLTOALLV only */                                          \
  const int64_t *recv_displs;

/* One validated operation as a backend sees it (copied out of the caller's arguments, so
 * the DLTensor structs need not outlive the call). */
typedef struct dlpg__be_op {
  DLPG__BE_OP_FIELDS
} dlpg__be_op_t;

/* op's premul-sum factor (1 from a core whose ops predate the field). */
static inline double dlpg__be_op_scalar(const dlpg__be_op_t *op) {
  return op->struct_size >= offsetof(dlpg__be_op_t, scalar) + sizeof(double) ? op->scalar : 1.0;
}

/* Whether op carries the per-rank arrays (a core that predates them: never). */
static inline int dlpg__be_op_counts(const dlpg__be_op_t *op) {
  return op->struct_size >= offsetof(dlpg__be_op_t, recv_displs) + sizeof(op->recv_displs) &&
         op->counts != NULL;
}

/* A poller a caller-thread backend attaches to an op's work (host work_set_backend). */
typedef struct dlpg__work_backend {
  /* Non-blocking: *done = 1 once finished; the returned status is the operation's
   * (DLPG_OK while pending). May record a message with the host's verror. */
  dlpg_status_t (*poll)(void *data, int *done);
  /* Called when the work is released. */
  void (*release)(void *data);
} dlpg__work_backend_t;

/* ------------------------------------------------------------------ settings and words */

/* One environment variable a backend reads, declared in its table (params) and read through
 * the host (param_str, param_long); core registers the table when the module loads, so
 * dlpg-info lists it under the backend's name. The layout is base/params.h's declaration. */
#define DLPG__BE_PARAM_CACHED 1u /* read from the environment once, then kept */
#define DLPG__BE_PARAM_SECRET 2u /* its value is never printed */
typedef struct dlpg__be_param {
  const char *env;       /* "DLPG_<BACKEND>_<NAME>" */
  const char *def;       /* default as a string, or NULL */
  unsigned flags;        /* DLPG__BE_PARAM_*: 0 for a variable another library reads too,
                            read at each use */
  const char *desc;      /* one line for dlpg-info */
} dlpg__be_param_t;

/* Log levels of the host's log_enabled / vlog. */
#define DLPG__BE_LOG_WARN 1
#define DLPG__BE_LOG_INFO 2
#define DLPG__BE_LOG_TRACE 3

/* ------------------------------------------------------------------ the tables */

/* Bit of a DLDeviceType in a device mask (device types below 32). */
#define DLPG__DEV_BIT(device_type) (1u << (unsigned)(device_type))

/* What a backend gives core: a built-in one links it in (plugin/registry/backends.c), a
 * module returns it from its entry point. */
typedef struct dlpg__backend_vtbl {
  size_t struct_size;    /* sizeof(dlpg__backend_vtbl_t) the backend was built with */
  int version;           /* DLPG__BACKEND_ABI_VERSION it was built with */
  size_t host_size;      /* sizeof(dlpg__host_t) it was built with: the host it reads */
  const char *name;      /* "gloo", "nccl": in messages and build info */
  unsigned devices;      /* DLPG__DEV_BIT mask of the DLPack devices it serves */
  int max_tensors;       /* most tensors (local devices) per call */
  int on_worker;         /* 1: ops run on the group's worker thread, in submission order;
                            0: issued on the caller's thread (completion by work pollers) */
  int p2p_direct;        /* on_worker backends: 1 when SEND/RECV bypass the worker: issue is
                            called on the caller's thread with only SEND/RECV ops (state made
                            by state_create under the group's lock, which must not block), must
                            return promptly, and completes each op's work itself later (from
                            its own threads), so a receive posted before its send cannot block
                            the send nor later operations */
  /* Whether the backend can run op (validated by core: kind, tensors, devices, dtype, and a
   * reduce op inside the enum). OK or DLPG_ERR_UNSUPPORTED with a message naming fn, the
   * dtype, the op and the backend. Called at every operation. */
  dlpg_status_t (*check)(const char *fn, const dlpg__be_op_t *op);
  /* Per-group state, created at the group's first operation on this backend (on the worker
   * thread for on_worker backends; under the group's lock otherwise). May block (rendezvous).
   * g outlives the state. */
  dlpg_status_t (*state_create)(const dlpg__be_group_t *g, void **state);
  /* Run (on_worker: to completion) or enqueue ops[0..n), all of this backend, each with
   * op->state set to its group's state; n > 1 is one dlpg_group_start/end batch. on_worker
   * backends get the ops of one group; the others a batch that may span groups. Caller
   * thread backends attach a poller to each op->work (work_set_backend) or complete it. */
  dlpg_status_t (*issue)(dlpg__be_op_t *const *ops, int n);
  /* Any thread: cut running and future operations of state short. */
  void (*abort)(void *state);
  void (*destroy)(void *state);
  /* "gloo 0.5.0", "nccl 2.28.9; cuda 13.0": versions it was built with and runs on. */
  const char *(*build_info)(void);
  /* Its own settings (dlpg-info lists them) and the log subsystem it writes under (its
   * own name, which DLPG_DEBUG_SUBSYS selects); NULL/0 when it has none. */
  const dlpg__be_param_t *params;
  int nparams;
  const char *log_subsys;
  /* Where it can serve a group (for a device another line serves too). NULL: any group.
   * Otherwise it writes this process's locality into out without waiting for anyone (the
   * shared-memory backend: the host, its boot and its namespaces); core publishes it when
   * the group is made, and picks this backend for the group's collectives only when every
   * rank published the same string. Its state_create still confirms it: DLPG_ERR_UNSUPPORTED
   * there (on every rank alike) makes core fall back to the next line. */
  dlpg_status_t (*locality)(char *out, size_t cap);
  /* DLPG__KIND_BIT mask of the operations it serves (core/group/op_kinds.h), listed one by one
   * (or DLPG__KINDS_ALL for a backend implementing every kind of the table it was built
   * with). An operation of a kind it leaves out goes to the next line serving its device;
   * with none, validation refuses it (DLPG_ERR_UNSUPPORTED naming the backend and the
   * kind). 0, from a module built when 0 meant "every kind", means the nine kinds of ABI
   * v1's first table (DLPG__KINDS_V1), never a kind added after it: read it with
   * dlpg__vtbl_kinds. A built-in table must not say 0. */
  unsigned kinds;
  /* ---- appended in the same version: NULL (or beyond struct_size) when it has none. ----
   * Sends and receives decided per pair, for a line with a locality: they get a state of
   * their own, never the collectives' (whose creation meets every rank), so a transfer
   * needs only its two ranks. p2p_state_create runs on the caller's thread under the
   * group's lock and must not block; issue then gets SEND/RECV ops whose op->state is that
   * state (on the caller's thread, as p2p_direct says), decides each pair itself (both
   * ranks alike: from what both published, confirmed by both) and hands a pair it cannot
   * serve to the next line with dlpg__backend_p2p_pass (core/lines/backend.h; built-in backends
   * only, since it takes core's op). p2p_abort: any thread, as abort; p2p_destroy at the
   * group's release, possibly on a thread of the backend's own (it completed the last
   * work holding the group). */
  dlpg_status_t (*p2p_state_create)(const dlpg__be_group_t *g, void **state);
  void (*p2p_abort)(void *state);
  void (*p2p_destroy)(void *state);
  /* on_worker backends, both or neither: the eager path of a small operation, so that an
   * asynchronous one costs no hand-off to the worker thread. Core calls start on the
   * caller's thread for an operation issued alone (no batch) with a work handle, once the
   * group's state exists, when nothing of the group is queued, running or started on the
   * worker, with op->state set. start must not wait for peers: it either posts what its
   * peers need of this rank and returns 1 (the op is started; the backend keeps what it
   * needs to finish it, the op stays core's), or does nothing and returns 0 (core queues the
   * op on the worker as usual and issue runs it whole). At most one op per state is started
   * at a time. */
  int (*start)(dlpg__be_op_t *op);
  /* Finish the started op: wait for the peers at most wait_s seconds (0: look once, without
   * sleeping), then complete it (read what they posted into the outputs). *done = 0 and
   * DLPG_OK while it cannot finish yet; *done = 1 and the op's status (message recorded with
   * the host's verror) once it ended. The backend's own deadline still ends it within the
   * group's timeout from its start. Core calls it on whichever thread gets there first
   * (dlpg_work_wait/test of the op's work, the group's next operation, or the worker, so a
   * started op finishes even when nobody waits for it), one call at a time per state, never
   * while issue runs, and never issues another op of the state before the started one
   * finished. abort wakes a progress call that waits. */
  dlpg_status_t (*progress)(dlpg__be_op_t *op, double wait_s, int *done);
  /* Caller-thread backends, optional (appended; NULL or beyond struct_size: a child of
   * dlpg_group_split makes its state lazily, as a created group). The eager half of
   * dlpg_group_split: called on the caller's thread of every rank of the parent, once per
   * split and in the parent's order, when the parent has a state of this backend (parent:
   * that state). child: the child's view, NULL on a rank whose color is negative, which
   * still takes part (the backend's own split is collective over the parent). color >= 0
   * and key order the child's ranks as dlpg.h says; the child's view already has its rank,
   * size, timeout and scope. *child_state: the child's state, holding what was split from
   * the parent's (NCCL: ncclCommSplit of each of its communicators), or NULL (nothing to
   * split: the child makes its state at its first operation). The parent's state outlives
   * the call only: the child's must not need it later. */
  dlpg_status_t (*state_split)(void *parent, const dlpg__be_group_t *child, int color, int key,
                               void **child_state);
  /* Optional (appended; all three or none): a child that can run inside what its parent's
   * state made (shm: an area of the parent's segment). child_seed is called on the caller's
   * thread of each member of a child of dlpg_group_split or dlpg_group_create_subset right
   * after it was made, when the parent has a state of this backend (parent: that state),
   * with the child's view (rank, size, timeout and scope set) and its members as parent
   * ranks, in child rank order. It must not block nor wait for anyone, and reads of the
   * parent's state only what stays fixed (the parent's worker may be running operations).
   * It returns a seed (NULL: none) that must outlive the parent: the child's first operation
   * then makes its state with state_create_seeded, which owns the seed from then on, instead
   * of state_create; a seed never used goes to seed_free at the child's release. */
  void *(*child_seed)(void *parent, const dlpg__be_group_t *child, const int *parent_ranks);
  dlpg_status_t (*state_create_seeded)(const dlpg__be_group_t *g, void *seed, void **state);
  void (*seed_free)(void *seed);
} dlpg__backend_vtbl_t;

/* Size of a table that ends at kinds (the fields every table of this version has). */
#define DLPG__BACKEND_VTBL_MIN_SIZE \
  (offsetof(dlpg__backend_vtbl_t, kinds) + sizeof(unsigned))
/* Whether vt's struct_size covers its appended field f (and f is set). */
#define dlpg__vtbl_has(vt, f)                                                              \
  ((vt)->struct_size >= offsetof(dlpg__backend_vtbl_t, f) + sizeof((vt)->f) && (vt)->f)

/* The kinds vt serves, as core reads them: its list, less any kind this table does not know
 * (a module built from a later table), and 0 read as ABI v1's nine (see kinds above). */
static inline unsigned dlpg__vtbl_kinds(const dlpg__backend_vtbl_t *vt) {
  return vt->kinds ? vt->kinds & DLPG__KINDS_ALL : DLPG__KINDS_V1;
}
/* Whether vt serves kind. */
static inline int dlpg__vtbl_serves(const dlpg__backend_vtbl_t *vt, dlpg__op_kind_t kind) {
  return (unsigned)kind < DLPG__OP_COUNT && (dlpg__vtbl_kinds(vt) & DLPG__KIND_BIT(kind)) != 0;
}

/* Core's services for a module, which links neither core nor its state: one copy of the
 * last error, the log configuration and the parameter cache exists, in libdlpg.so. */
typedef struct dlpg__host {
  size_t struct_size;    /* sizeof(dlpg__host_t) of core; may grow at the end */
  int version;           /* DLPG__BACKEND_ABI_VERSION of core */
  /* First, so a module can always say what it misses. */
  dlpg_status_t (*verror)(dlpg_status_t st, const char *fmt, va_list ap);
  dlpg_status_t (*error_prefix)(dlpg_status_t st, const char *prefix);
  const char *(*last_error)(void);
  void (*clear_error)(void);
  /* Logging under a subsystem named by the backend (its table's log_subsys): log_subsys
   * turns the name into the handle the other two take (the same handle for the same name). */
  int (*log_subsys)(const char *name);
  int (*log_enabled)(int level, int subsys);
  void (*vlog)(int level, int subsys, int rank, const char *fmt, va_list ap);
  /* A variable the backend declared (p points into its table's params): the environment's
   * value, else the default; read once per declaration. */
  const char *(*param_str)(const dlpg__be_param_t *p);
  /* 1 and the value when set (or defaulted) and an integer; 0 otherwise (warned). */
  int (*param_long)(const dlpg__be_param_t *p, long *out);
  /* Set the variable in the process environment unless set (for a library the backend
   * drives, as NCCL's own); 1 if it set it. Later reads return value. */
  int (*param_default_env)(const dlpg__be_param_t *p, const char *value);
  const char *(*op_name)(dlpg__op_kind_t kind);
  const char *(*dtype_name)(dlpg__dtype_t dt);
  const char *(*reduce_op_name)(dlpg_reduce_op_t op);
  void (*work_complete)(struct dlpg_work *w, dlpg_status_t st, const char *msg);
  void (*work_set_backend)(struct dlpg_work *w, const dlpg__work_backend_t *be, void *data);
  dlpg_status_t (*store_set)(dlpg_store_t *s, const char *key, const void *value, size_t len);
  dlpg_status_t (*store_get)(dlpg_store_t *s, const char *key, double timeout_s, void *buf,
                             size_t cap, size_t *len);
} dlpg__host_t;

/* The entry point of a module built with this version (exported as DLPG__BACKEND_INIT_NAME):
 * check host (version, and struct_size >= the sizeof(dlpg__host_t) it was built with: say
 * what it misses through host->verror when verror lies inside struct_size), keep host, and
 * set *out to its table; or return non-OK with a message. When it cannot even report
 * (verror outside struct_size) it returns DLPG_ERR_UNSUPPORTED and still sets *out, whose
 * header (struct_size, version, host_size) lets core name both sides. */
typedef dlpg_status_t (*dlpg__backend_init_fn)(const dlpg__host_t *host,
                                               const dlpg__backend_vtbl_t **out);

#ifdef __cplusplus
}
#endif
#endif
