/* One validated operation, as core keeps it. A backend sees only its view (op->be, a
 * dlpg__be_op_t of core/group/backend_abi.h): the view's fields are named here directly too, in
 * one union, and core's own fields follow it, so core writes op->kind and hands &op->be to
 * a backend without a copy. */
#ifndef DLPG_CORE_OP_H_
#define DLPG_CORE_OP_H_

#include "core/group/backend_abi.h"
#include "core/group/names.h"
#include "core/group/op_kind.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlpg__op {
  union {
    dlpg__be_op_t be;             /* what a backend is handed */
    struct { DLPG__BE_OP_FIELDS }; /* the same fields (a common initial sequence) */
  };
  /* Core only, after the view: a module never reads them. */
  int backend;               /* registry slot (core/lines/backend.h); BARRIER: the host backend's */
  struct dlpg_group *group;  /* the group it was issued on; be.gview is its view */
  int caller_waits;          /* SEND/RECV: a blocking call outside a batch (work == NULL):
                                its caller waits for it right after the issue, so a
                                built-in backend may run it to completion inside issue */
} dlpg__op_t;

/* The view is the op's first member, so a pointer to one is a pointer to the other. */
#ifdef __cplusplus
static_assert(offsetof(dlpg__op_t, be) == 0, "the view comes first");
#else
_Static_assert(offsetof(dlpg__op_t, be) == 0, "the view comes first");
#endif

/* ops[0..n) as the views a backend's issue takes (same addresses). */
static inline dlpg__be_op_t *const *dlpg__op_views(dlpg__op_t *const *ops) {
  return (dlpg__be_op_t *const *)(const void *)ops;
}
/* Back from the views a built-in backend was handed to core's ops. */
static inline dlpg__op_t *const *dlpg__ops_of_views(dlpg__be_op_t *const *views) {
  return (dlpg__op_t *const *)(const void *)views;
}

#ifdef __cplusplus
}
#endif
#endif
