/* The pair engine: sends and receives between two ranks of one host through a segment of
 * their own, made by those two ranks alone (no other rank, and not the group's segment,
 * which the first collective makes with every rank). It knows only the ground floor and
 * the store's public API, so it is tested on its own (tests/unit/test_shm_pair.cc); the
 * backend (backend_p2p.c) maps core's operations onto it.
 *
 * Lifetime: the lower rank makes an anonymous memfd and passes it over an abstract Unix
 * socket to the higher rank, which maps it; both then say so in the store, so both agree
 * on the outcome. No name refers to the segment afterwards: it goes with the last mapping,
 * kill -9 included, and nothing is ever created in /dev/shm.
 *
 * Matching (as on Gloo, and MPI): the n-th send with tag t meets the peer's n-th receive
 * with tag t, whatever the other tags in between. A message up to the eager size travels
 * in one ring entry; a larger one announces itself in the ring (tag, size) and streams
 * through the data slots once the receiver has matched it with a receive (pipelined, so
 * its size is not bounded by the segment's). A small message that arrives before its
 * receive is copied out of the ring into a staging buffer, bounded in bytes by the
 * configuration's stage_bytes: past it, the receiver stops draining the ring (the sender
 * waits) until receives take staged messages. A large one only leaves its announcement.
 *
 * A receive whose size or dtype differs from its send fails (the message is dropped); a
 * large send learns it too (the receiver refuses it), a small one has left already.
 *
 * Threading: post from any thread; progress (dlpg__shm_pair_serve, dlpg__shm_pair_run)
 * from any thread, serialised inside; abort from any thread. */
#ifndef DLPG_SHM_PAIR_H_
#define DLPG_SHM_PAIR_H_

#include <stddef.h>
#include <stdint.h>

#include "dlpg/dlpg.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlpg__shm_pair dlpg__shm_pair_t;

typedef struct dlpg__shm_pair_config {
  size_t slot_bytes;   /* data chunk of a large message; 0: DLPG__SHM_DEFAULT_P2P_SLOT_BYTES */
  size_t stage_bytes;  /* most bytes of unexpected small messages held; 0: the default */
  double timeout_s;    /* the creation's deadline */
  int spin;            /* pause iterations before sleeping; < 0: the default */
  const int *abort_flag; /* nonzero (read atomically) ends the creation; may be NULL */
} dlpg__shm_pair_config_t;

#define DLPG__SHM_DEFAULT_P2P_STAGE_BYTES ((size_t)64 << 20)

/* One send or receive, owned by the caller until done is called (once, from whichever
 * thread completes it; the engine never touches it afterwards). */
typedef struct dlpg__shm_xfer {
  int send;              /* 1: send buf, 0: receive into buf */
  void *buf;
  size_t nbytes;
  int tag;
  int dtype;             /* a dlpg__dtype_t: must match the peer's too (0: bytes, int8) */
  double deadline;       /* dlpg__now() seconds; ends it with DLPG_ERR_TIMEOUT */
  const char *fn;        /* "dlpg_send": names it in messages */
  void (*done)(struct dlpg__shm_xfer *x, dlpg_status_t st, const char *msg);
  void *user;
  /* A receive from any source posted to several pairs at once: the word they share (0 until
   * one of them matches a message; that one sets it, and the others leave unmatched, ending
   * with DLPG_ERR_ABORTED). NULL: an ordinary transfer. */
  int *claim;
  int claimed;           /* set by the engine: this one set *claim (it matched) */
  /* The engine's. */
  struct dlpg__shm_xfer *next;
  uint32_t id;
  int inl;               /* progressed by dlpg__shm_pair_run's caller */
  size_t off;
  dlpg_status_t st;
  char msg[400];
  int finished;          /* read and written with __atomic builtins (C and C++ include this) */
} dlpg__shm_xfer_t;

/* Make the pair of this rank and peer (blocking; both ranks call it, with the same
 * prefix: a store key scope of this pair's own). DLPG_ERR_UNSUPPORTED, on both ranks alike,
 * when the segment cannot be passed or mapped (the ranks do not share memory after all);
 * other statuses: the creation failed (timeout naming the peer, abort, store). */
dlpg_status_t dlpg__shm_pair_create(dlpg_store_t *store, const char *prefix, int rank, int peer,
                                    const dlpg__shm_pair_config_t *cfg, dlpg__shm_pair_t **out);
/* Queue x (its fields up to user set); a thread in dlpg__shm_pair_serve progresses it. */
void dlpg__shm_pair_post(dlpg__shm_pair_t *p, dlpg__shm_xfer_t *x);
/* Queue x and progress on the calling thread until x is done (a blocking call): the
 * serving thread stands aside meanwhile. */
void dlpg__shm_pair_run(dlpg__shm_pair_t *p, dlpg__shm_xfer_t *x);
/* Take x (a receive with a claim) off p's queue if it is still waiting there unmatched: it
 * ends with DLPG_ERR_ABORTED. Nothing when it has matched or ended already. Any thread. */
void dlpg__shm_pair_cancel(dlpg__shm_pair_t *p, dlpg__shm_xfer_t *x);
/* Progress until *stop (read atomically) is nonzero (a pair's own thread). */
void dlpg__shm_pair_serve(dlpg__shm_pair_t *p, const int *stop);
/* Wake the serving thread and every waiter (after setting a stop flag). */
void dlpg__shm_pair_kick(dlpg__shm_pair_t *p);
/* Every pending and later transfer ends with DLPG_ERR_ABORTED; the peer's fail with
 * DLPG_ERR_REMOTE naming this rank. Any thread. */
void dlpg__shm_pair_abort(dlpg__shm_pair_t *p);
/* Unmap and free, with no transfer pending and nobody progressing (join the serving
 * thread first). The peer's pending transfers fail naming this rank as having left. */
void dlpg__shm_pair_destroy(dlpg__shm_pair_t *p);
/* Bytes of a message that travels whole in one ring entry. */
size_t dlpg__shm_pair_eager_bytes(const dlpg__shm_pair_t *p);

#ifdef __cplusplus
}
#endif
#endif
