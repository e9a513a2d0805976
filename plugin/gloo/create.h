/* Creating a Gloo context: the rendezvous polls an abort flag, so an abort (and the destroy
 * after it) does not wait for the deadline. */
#ifndef DLPG_GLOO_CREATE_H_
#define DLPG_GLOO_CREATE_H_

#ifndef __cplusplus
#include <stdatomic.h> /* C++: include gloo/c_headers.h first */
#endif
#include "gloo/gloo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rendezvous a full-mesh Gloo context over store under key prefix, with Gloo's timeout set
 * to timeout_s, so a missing peer ends in DLPG_ERR_TIMEOUT. Blocking; ends early with
 * DLPG_ERR_ABORTED once *aborted (the group's abort flag, or a watch's) is set. */
dlpg_status_t dlpg__gloo_ctx_create_abortable(dlpg_store_t *store, const char *prefix, int rank,
                                              int size, double timeout_s,
                                              const atomic_int *aborted,
                                              dlpg__gloo_ctx_t **out);

#ifdef __cplusplus
}
#endif
#endif
