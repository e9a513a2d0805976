/* dlpg__gloo_ctx_create (gloo.h) that also polls the group's abort flag during the
 * rendezvous, so an abort (and the destroy after it) does not wait for the deadline. */
#ifndef DLPG_GLOO_CREATE_H_
#define DLPG_GLOO_CREATE_H_

#ifndef __cplusplus
#include <stdatomic.h> /* C++: include gloo/c_headers.h first */
#endif
#include "gloo/gloo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* aborted may be NULL (then exactly dlpg__gloo_ctx_create). */
dlpg_status_t dlpg__gloo_ctx_create_abortable(dlpg_store_t *store, const char *prefix, int rank,
                                              int size, double timeout_s,
                                              const atomic_int *aborted,
                                              dlpg__gloo_ctx_t **out);

#ifdef __cplusplus
}
#endif
#endif
