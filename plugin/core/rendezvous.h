/* One creation of a communicator (Gloo context, NCCL communicator) agreed through the store
 * under a key scope of its own, so that keys left by an earlier job on the same store and
 * group name are never read (rendezvous.c). */
#ifndef DLPG_CORE_RENDEZVOUS_H_
#define DLPG_CORE_RENDEZVOUS_H_

#include <stddef.h>
#ifndef __cplusplus
#include <stdatomic.h> /* C++: include gloo/c_headers.h first */
#endif
#include "dlpg/dlpg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest scope written by dlpg__rendezvous_begin, with its NUL. */
#define DLPG__RDV_SCOPE_MAX 640

/* Every rank of one creation calls this with the same base ("<group>/gloo"); it returns in
 * scope "<base>/g<N>", N agreed through the store and new for each creation. Rank 0 admits
 * the others; it fails on every rank with a message in the user's terms when a rank is
 * missing at deadline (dlpg__now() seconds), when two processes claim one rank, or when the
 * ranks' world sizes differ. aborted (may be NULL) is polled: non-zero ends it in
 * DLPG_ERR_ABORTED. what names the creation in messages ("Gloo rendezvous"). */
dlpg_status_t dlpg__rendezvous_begin(dlpg_store_t *store, const char *base, const char *what,
                                     int rank, int size, double deadline, const atomic_int *aborted,
                                     char *scope);

/* After this rank's creation under scope succeeded (it reads no key of the scope any more):
 * count it out; the last rank deletes every key of the scope, the handshake's and
 * "<scope>/<k>" for each keys[i] (a "%d" in it is expanded for every rank). Best effort. */
void dlpg__rendezvous_end(dlpg_store_t *store, const char *scope, int rank, int size,
                          const char *const *keys, size_t nkeys);

#ifdef __cplusplus
}
#endif
#endif
