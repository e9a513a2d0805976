/* The Gloo backend's per-group state and its point-to-point path (C face of the island).
 *
 * Collectives run on the group's full mesh, created by the worker thread at the group's
 * first collective. Sends and receives never touch the mesh: each pair of ranks gets its
 * own 2-rank Gloo context, created lazily by those two ranks alone (store keys
 * "<name>/gloo/p2p/<lo>-<hi>/..."), cached for the group's life. A send or receive is issued
 * on the caller's thread and handed at once to a thread of the island's pool, which connects
 * the pair if needed, runs the transfer and completes the work; so a receive posted before
 * its send never blocks the send, nor any later operation. Sends and receives to self
 * (inside a batch) are matched in memory by tag, in issue order. */
#ifndef DLPG_GLOO_P2P_H_
#define DLPG_GLOO_P2P_H_

#include "dlpg/dlpg.h"
#include "core/group/op.h"
#include "gloo/gloo.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlpg__gloo_group dlpg__gloo_group_t;

/* The state of the group rank of size meeting over store under key prefix name, with the
 * group's timeout: nothing is connected yet (never blocks). */
dlpg_status_t dlpg__gloo_group_create(dlpg_store_t *store, const char *name, int rank, int size,
                                      double timeout_s, dlpg__gloo_group_t **out);

/* On the worker thread: the group's full mesh, rendezvoused at the first call (blocking,
 * every rank must come); a failure is repeated by every later call. */
dlpg_status_t dlpg__gloo_group_mesh(dlpg__gloo_group_t *gg, dlpg__gloo_ctx_t **out);

/* Issue ops[0..n) (SEND and RECV only, each op->state its group's dlpg__gloo_group_t; a batch
 * may span groups) without blocking: each op's work is completed later by the island's
 * threads, with the op's status. Always returns DLPG_OK (every failure goes to the work). */
dlpg_status_t dlpg__gloo_p2p_issue(dlpg__op_t *const *ops, int n);

/* Any thread: cut the mesh's running operation and every transfer short; later operations
 * fail with DLPG_ERR_ABORTED. */
void dlpg__gloo_group_abort(dlpg__gloo_group_t *gg);
/* At the group's release (no work left): the mesh goes now, each pair context once the last
 * pool thread that used it has let it go. */
void dlpg__gloo_group_destroy(dlpg__gloo_group_t *gg);

#ifdef __cplusplus
}
#endif
#endif
