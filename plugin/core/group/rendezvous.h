/* One creation of a communicator (Gloo context, NCCL communicator) agreed through the store
 * under a key scope of its own, so that keys left by an earlier job on the same store and
 * group name are never read (rendezvous.c). */
#ifndef DLPG_CORE_RENDEZVOUS_H_
#define DLPG_CORE_RENDEZVOUS_H_

#include <stddef.h>
#include <stdint.h>
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

/* The handshake's building blocks, shared with the job agreement (job.c). Values are
 * "posted": <key>/v holds the value, then the counter <key> is incremented, and readers
 * probe the counter (add 0, never blocking) before they get the value. */
void dlpg__rdv_post(dlpg_store_t *s, const char *key, const char *value);
void dlpg__rdv_unpost(dlpg_store_t *s, const char *key);
/* The value posted under key into buf (NUL-terminated). 1: read; 0: not posted; -1: error. */
int dlpg__rdv_try_get(dlpg_store_t *s, const char *key, char *buf, size_t cap);
/* The counter under key (0 when absent; the probe creates it at 0). -1 on error. */
int64_t dlpg__rdv_count(dlpg_store_t *s, const char *key);
/* A random nonce, never 0. */
uint64_t dlpg__rdv_nonce(void);

#ifdef __cplusplus
}
#endif
#endif
