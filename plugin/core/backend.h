/* The backend table (models: UCC's component tables, NCCL's net plugin, dlpg's own
 * dlpg__store_vtbl_t). Core validates an operation at the door, asks the backend that serves
 * the tensors' device whether it supports it, and hands it the validated ops through this
 * table; core never names a backend function. Backends are listed in one place only:
 * plugin/registry/backends.c. A backend is either linked into libdlpg.so (Gloo) or a module
 * loaded with dlopen the first time an operation needs it (NCCL: libdlpg_nccl.so), which gets
 * core's services through dlpg__host_t instead of linking core. */
#ifndef DLPG_CORE_BACKEND_H_
#define DLPG_CORE_BACKEND_H_

#include <stdarg.h>
#include <stddef.h>
#include "dlpg/dlpg.h"
#include "base/log.h"
#include "core/op.h"
#include "base/params.h"
#include "core/work.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most backends one build registers (the group keeps one state slot per backend). */
#define DLPG__BACKEND_MAX 4

/* Bit of a DLDeviceType in a device mask (device types below 32). */
#define DLPG__DEV_BIT(device_type) (1u << (unsigned)(device_type))

struct dlpg_group;

typedef struct dlpg__backend_vtbl {
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
  dlpg_status_t (*check)(const char *fn, const dlpg__op_t *op);
  /* Per-group state, created at the group's first operation on this backend (on the worker
   * thread for on_worker backends; under the group's lock otherwise). May block (rendezvous). */
  dlpg_status_t (*state_create)(struct dlpg_group *g, void **state);
  /* Run (on_worker: to completion) or enqueue ops[0..n), all of this backend, each with
   * op->state set to its group's state; n > 1 is one dlpg_group_start/end batch. on_worker
   * backends get the ops of one group; the others a batch that may span groups. Caller
   * thread backends attach a poller to each op->work (dlpg__work_set_backend) or complete it. */
  dlpg_status_t (*issue)(dlpg__op_t *const *ops, int n);
  /* Any thread: cut running and future operations of state short. */
  void (*abort)(void *state);
  void (*destroy)(void *state);
  /* "gloo 0.5.0", "nccl 2.28.9; cuda 13.0": versions it was built with and runs on. */
  const char *(*build_info)(void);
} dlpg__backend_vtbl_t;

/* One line of the registry: a built-in table, or a module loaded on first use. */
typedef struct dlpg__backend_entry {
  const char *name;
  unsigned devices;                    /* what it serves, known before any load */
  const dlpg__backend_vtbl_t *builtin; /* linked in; NULL for a module */
  const char *module_file;             /* "libdlpg_nccl.so", looked for beside libdlpg.so */
  dlpg__param_id_t module_param;       /* variable naming the module's path instead */
  const char *module_entry;            /* symbol of type dlpg__module_init_fn */
} dlpg__backend_entry_t;

/* The registry (plugin/registry/backends.c). */
extern const dlpg__backend_entry_t dlpg__backend_registry[];
extern const int dlpg__backend_count;

/* Core's services for a module, which links neither core nor its state: one copy of the
 * last error, the log configuration and the parameter cache exists, in libdlpg.so. (The
 * stateless clock of base/time.c is compiled into a module as well.) */
typedef struct dlpg__host {
  size_t struct_size;
  int abi;                                   /* DLPG__HOST_ABI */
  dlpg_status_t (*verror)(dlpg_status_t st, const char *fmt, va_list ap);
  dlpg_status_t (*error_prefix)(dlpg_status_t st, const char *prefix);
  const char *(*last_error)(void);
  void (*clear_error)(void);
  int (*log_enabled)(dlpg__log_level_t level, dlpg__log_subsys_t sub);
  void (*vlog)(dlpg__log_level_t level, dlpg__log_subsys_t sub, int rank, const char *fmt,
               va_list ap);
  /* The module's own variables and log subsystem (base/params.h, base/log.h). */
  int (*params_register)(const char *owner, const dlpg__param_decl_t *decls, int n);
  const char *(*param_get)(const dlpg__param_decl_t *p);
  int (*param_get_long)(const dlpg__param_decl_t *p, long *out);
  int (*param_set_default_env)(const dlpg__param_decl_t *p, const char *value);
  dlpg__log_subsys_t (*log_subsys_register)(const char *name);
  const char *(*op_name)(dlpg__op_kind_t kind);
  const char *(*dtype_name)(dlpg__dtype_t dt);
  const char *(*reduce_op_name)(dlpg_reduce_op_t op);
  void (*work_complete)(struct dlpg_work *w, dlpg_status_t st, const char *msg);
  void (*work_set_backend)(struct dlpg_work *w, const dlpg__work_backend_t *be, void *data);
  dlpg_status_t (*store_set)(dlpg_store_t *s, const char *key, const void *value, size_t len);
  dlpg_status_t (*store_get)(dlpg_store_t *s, const char *key, double timeout_s, void *buf,
                             size_t cap, size_t *len);
} dlpg__host_t;

/* Bumped whenever dlpg__host_t, dlpg__backend_vtbl_t, dlpg__op_t or struct dlpg_group change
 * in a way a module built from other sources would misread. */
#define DLPG__HOST_ABI 3

/* A module's entry point: check host->abi, keep host, and return the module's table, or
 * return non-OK with a message (through host->verror). */
typedef dlpg_status_t (*dlpg__module_init_fn)(const dlpg__host_t *host,
                                              const dlpg__backend_vtbl_t **out);

/* The backend slot serving device_type, or -1. Reads the registry only (loads nothing). */
int dlpg__backend_for_device(int device_type);
/* "cpu, cuda_host (gloo); cuda, cuda_managed (nccl)": what the registry serves. */
void dlpg__backend_devices(char *buf, size_t cap);
/* Name of slot's backend ("gloo", "nccl"). */
const char *dlpg__backend_name(int slot);

/* slot's table, loading its module at the first call. On failure UNSUPPORTED with a message
 * saying what failed to load and why (the dlerror text), prefixed with fn. */
dlpg_status_t dlpg__backend_get(const char *fn, int slot, const dlpg__backend_vtbl_t **out);
/* slot's table if it is linked in or already loaded, else NULL (never loads). */
const dlpg__backend_vtbl_t *dlpg__backend_loaded(int slot);

/* g's state of a caller-thread backend, created at the first call under g's lock; later
 * calls read it without a lock. */
dlpg_status_t dlpg__backend_state(struct dlpg_group *g, int slot, void **state);

/* "gloo 0.5.0; nccl 2.28.9; cuda 13.0" plus, per module, where it was looked for and whether
 * it loaded. load: try to load every module first (dlpg-info). */
void dlpg__backend_info(char *buf, size_t cap, int load);

#ifdef __cplusplus
}
#endif
#endif
