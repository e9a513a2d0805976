/* The C face of the Gloo island (C++17 inside, extern "C" here). No C++ exception crosses
 * this boundary: every function catches and turns it into a status and a message. */
#ifndef DLPG_GLOO_GLOO_H_
#define DLPG_GLOO_GLOO_H_

#include "dlpg/dlpg.h"
#include "core/group/op.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlpg__gloo_ctx dlpg__gloo_ctx_t;

/* The backend table (backend.c), listed in plugin/registry/backends.c. */
struct dlpg__backend_vtbl;
extern const struct dlpg__backend_vtbl dlpg__gloo_backend;

/* Gloo's reduce rule for a dtype and op core has validated: OK, or UNSUPPORTED naming fn,
 * dtype and op. */
dlpg_status_t dlpg__gloo_check_reduce(const char *fn, dlpg__dtype_t dt, dlpg_reduce_op_t op);

/* Contexts are made by dlpg__gloo_ctx_create_abortable (create.h). */

/* Run the collectives ops[0..n) (all backend GLOO; no SEND or RECV, which run on pairwise
 * contexts, p2p.h) to completion, in order. Blocking; returns the first failure with its
 * message. */
dlpg_status_t dlpg__gloo_run(dlpg__gloo_ctx_t *ctx, dlpg__op_t *const *ops, int n);

/* From another thread: make a blocked dlpg__gloo_run return soon (closes connections
 * where Gloo allows it). Best effort; the run also ends at Gloo's timeout. */
void dlpg__gloo_ctx_abort(dlpg__gloo_ctx_t *ctx);
void dlpg__gloo_ctx_destroy(dlpg__gloo_ctx_t *ctx);

/* "0.5.0" */
const char *dlpg__gloo_version(void);

#ifdef __cplusplus
}
#endif
#endif
