/* Core's side of the backends (models: UCC's component tables, NCCL's net plugin, dlpg's
 * own dlpg__store_vtbl_t). Core validates an operation at the door, asks the backend that
 * serves the tensors' device whether it supports it, and hands it the validated ops through
 * its table (dlpg__backend_vtbl_t, core/group/backend_abi.h); core never names a backend symbol.
 * Backends are registered in one place only: plugin/registry/backends.c hands core one line
 * per backend (dlpg__backend_register). A backend is either linked into libdlpg.so (Gloo) or
 * a module loaded with dlopen the first time an operation needs it (NCCL: libdlpg_nccl.so),
 * which gets core's services through dlpg__host_t instead of linking core. */
#ifndef DLPG_CORE_BACKEND_H_
#define DLPG_CORE_BACKEND_H_

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include "dlpg/dlpg.h"
#include "base/log.h"
#include "core/group/backend_abi.h"
#include "core/group/op.h"
#include "base/params.h"
#include "core/group/work.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most backends one build registers (the group keeps one state slot per backend). */
#define DLPG__BACKEND_MAX 4

struct dlpg_group;

/* One line of the registry: a built-in table, or a module loaded on first use. */
typedef struct dlpg__backend_entry {
  const char *name;
  unsigned devices;                    /* what it serves, known before any load */
  const dlpg__backend_vtbl_t *builtin; /* linked in; NULL for a module */
  const char *module_file;             /* "libdlpg_nccl.so", looked for beside libdlpg.so */
  dlpg__param_id_t module_param;       /* variable naming the module's path instead */
} dlpg__backend_entry_t;

/* Hand core a backend: called by the registry (plugin/registry/backends.c) from a
 * constructor, before any operation, once per line in its order (for a device two lines
 * claim, the first registered serves it: dlpg__backend_for_device). e must live for the
 * process. Returns its slot, or -1 (with a warning) when DLPG__BACKEND_MAX are registered or
 * a built-in table is of another ABI version. */
int dlpg__backend_register(const dlpg__backend_entry_t *e);
/* How many are registered, and slot's line (NULL out of range). */
int dlpg__backend_count(void);
const dlpg__backend_entry_t *dlpg__backend_entry(int slot);

/* The backend slot serving device_type, or -1. Reads the registry only (loads nothing). The
 * one place that picks a backend for a device: a choice among several per group goes here. */
int dlpg__backend_for_device(int device_type);
/* "cpu, cuda_host (gloo); cuda, cuda_managed (nccl)": what the registry serves. */
void dlpg__backend_devices(char *buf, size_t cap);
/* "cpu, cuda_host": the devices of slot's line. */
void dlpg__backend_line_devices(int slot, char *buf, size_t cap);
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

/* A child of dlpg_group_split takes parent's choices that its own ranks would make alike
 * (forced, or a line with a locality that all the parent's ranks shared), so its first
 * collective reads no locality from the store. Call only where every rank's parent has its
 * choices made (a collective of the parent completed on every rank). 1 if it took one. */
int dlpg__backend_choice_inherit(struct dlpg_group *child, const struct dlpg_group *parent);

/* A child just made by split or subset, on each member: every line whose parent state can
 * seed the child's (backend_abi.h's child_seed) gives it a seed for its first operation.
 * Waits for nobody; a line without seeds leaves the child as a created group. */
void dlpg__line_states_seed(struct dlpg_group *parent, struct dlpg_group *child);
/* dlpg_group_split on every rank of parent (line_split.c): each caller-thread line whose
 * parent state exists and whose table has state_split splits it into child's state (child
 * NULL on a rank whose color is negative). A failure names the backend, prefixed with fn. */
dlpg_status_t dlpg__line_states_split(const char *fn, struct dlpg_group *parent,
                                      struct dlpg_group *child, int color, int key);

/* ------------------------------------------------------------------ the per-group choice
 * (backend_choice.c). Two lines may serve one device (host memory: a shared-memory backend
 * for groups on one host, then a network one for any group). Validation gives an operation
 * its device's first line (dlpg__backend_for_device); the group's worker resolves that line
 * to the group's choice at its first operation, the same on every rank because it is
 * derived from what every rank published in the store under its job's scope (job.h). */

/* Once this rank knows its job (rank 0 at creation, the others at their first choice, after
 * the worker joined the job): publish,
 * for each line with a locality (backend_abi.h), this rank's locality under the job's
 * scope; later calls do nothing. Store writes only: waits for no other rank. */
void dlpg__backend_where_publish(struct dlpg_group *g);

/* A child (split or subset: its parent_ranks set) of a parent this rank is in the job of:
 * the child's ranks' localities are the parent's records, read through parent_ranks (the
 * parent publishes this rank's now if it has not), so the child writes none. 1 when taken;
 * 0 when the child must publish its own (no records to take, no memory). */
int dlpg__backend_where_inherit(struct dlpg_group *child, struct dlpg_group *parent);
/* The line serving kind for an operation on slot's device: slot, or the next line serving
 * that device when slot's table leaves kind out (its kinds mask). Never blocks. */
int dlpg__backend_for_kind(int slot, dlpg__op_kind_t kind);
/* g's choice for slot if already made, else slot (validation: lock-free). */
int dlpg__backend_chosen(struct dlpg_group *g, int slot);
/* g's choice for slot, made at the first call (the group's worker only, after it joined
 * the group's job, job.h: it may block, reading every rank's published locality, bounded by
 * the group's timeout). Logs at INFO
 * which line was chosen and why. */
dlpg_status_t dlpg__backend_choose(struct dlpg_group *g, int slot, int *chosen);
/* failed (g's choice for slot) could not create its state with DLPG_ERR_UNSUPPORTED (why):
 * when the choice was the rule's, move it to the next line after failed that can serve the
 * group and return that line; -1 when there is none or the choice was forced. */
int dlpg__backend_give_way(struct dlpg_group *g, int slot, int failed, const char *why);

/* ------------------------------------------------------------------ a group's states
 * (line_state.c) */

/* The state that runs g's operations queued for first (their device's first line): joins
 * the group's job, makes the group's choice, creates the chosen backend's state, moving to
 * the next line when that backend cannot serve the group after all. Blocking the first time
 * (bounded by the group's timeout); only the thread running the group's queued operations
 * calls it. A failure is final: later calls return it again. */
dlpg_status_t dlpg__line_resolve(struct dlpg_group *g, int first, int *slot, void **state);
/* The state a caller-thread issue of kind on slot needs: the group's job joined, this rank's
 * localities published, then slot's state, or its own state of sends and receives when it
 * has one (p2p_state_create). */
dlpg_status_t dlpg__line_state_direct(struct dlpg_group *g, int slot, dlpg__op_kind_t kind,
                                      void **state);
/* At the group's last release: destroy every backend state and what the resolution kept. */
void dlpg__line_states_free(struct dlpg_group *g);

/* ------------------------------------------------------------------ sends and receives per
 * pair (a line whose table has p2p_state_create, backend_abi.h). */

/* The line for a send or receive validated for slot: the line DLPG_CPU_BACKEND names when
 * it names one serving them, else slot (whose backend then decides each pair). */
int dlpg__backend_p2p_line(int slot);
/* 1 when DLPG_CPU_BACKEND names slot's own line: its pairs must not be handed on. */
int dlpg__backend_p2p_forced(int slot);
/* g's p2p state of slot, created at the first call under g's lock (never blocks). */
dlpg_status_t dlpg__backend_p2p_state(struct dlpg_group *g, int slot, void **state);
/* Rank q's locality string for line (published when it made the group), waiting for it
 * in slices up to the group's timeout (abort ends the wait). DLPG_ERR_UNSUPPORTED when
 * this rank could not publish its own. */
dlpg_status_t dlpg__backend_where_get(const dlpg__be_group_t *g, const char *line, int q,
                                      char *buf, size_t cap);
/* A built-in backend hands a send or receive it was issued (its own copy of core's op, as
 * dlpg__op_t, whose work it has not completed) to the next line serving it: issued there at
 * once (without blocking), the flight recorder naming that line. why, when not NULL, is
 * logged at INFO once for the pair ("sends and receives between rank 0 and rank 1 run on
 * <line> (why)"). When DLPG_CPU_BACKEND forces the backend's own line, or no line follows,
 * the op's work is completed with DLPG_ERR_UNSUPPORTED and why. The caller keeps (and
 * frees) its copy. Returns the status (the work is completed either way). */
dlpg_status_t dlpg__backend_p2p_pass(dlpg__be_op_t *op, const char *why);

/* "gloo 0.5.0; nccl 2.28.9; cuda 13.0" plus, per module, where it was looked for and whether
 * it loaded. load: try to load every module first (dlpg-info). */
void dlpg__backend_info(char *buf, size_t cap, int load);


/* slot's module table, loaded by core/lines/module.c: its settings are registered and it is
 * published for dlpg__backend_loaded. Once per slot. */
void dlpg__backend_publish(int slot, const dlpg__backend_vtbl_t *vt);

/* A backend's variable declaration as base/params.h's (the layouts are one, asserted in
 * backend.c). */
static inline const dlpg__param_decl_t *dlpg__be_param_decl(const dlpg__be_param_t *p) {
  return (const dlpg__param_decl_t *)(const void *)p;
}

#ifdef __cplusplus
}
#endif
#endif
