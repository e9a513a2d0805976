/* The shared-memory engine for ranks of one host: a segment every rank of a group maps,
 * and collectives on raw host buffers through it (sends and receives have segments of
 * their own per pair: pair.h). It is the engine of
 * the CPU backend for one-host groups; the backend's table (core/lines/backend.h) is a thin
 * adapter over these functions. It knows only the ground floor (base/) and the store's
 * public API, so it can be tested on its own.
 *
 * Lifetime: the segment is an anonymous memfd (never a file of /dev/shm) created by rank 0
 * and passed to the other ranks over an abstract Unix socket; once every rank has mapped
 * it, no name refers to it, so it goes when the last rank's mapping goes, kill -9 included.
 *
 * Threading: one operation at a time per handle (the backend's worker serialises them; a
 * started collective counts as one until it is finished, whichever thread finishes it);
 * dlpg__shm_abort may be called from any thread at any time, and wakes the waiter.
 *
 * Errors: every function returns a dlpg_status_t and records a message that names the
 * rank, its pid and the operation (base/status.h). After a failure (timeout, dead or
 * failed peer, abort; not a mismatch of the ranks' calls, see below) the handle is broken:
 * later operations fail at once with the first message, and the peers learn of it through
 * the segment. */
#ifndef DLPG_SHM_SHM_H_
#define DLPG_SHM_SHM_H_

#include <stddef.h>
#include <stdint.h>

#include "core/lines/tensor.h"
#include "dlpg/dlpg.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlpg__shm dlpg__shm_t;

typedef struct dlpg__shm_config {
  /* Bytes of each of a rank's two collective slots: operations larger than this are
   * pipelined through them in chunks. 0: DLPG__SHM_DEFAULT_SLOT_BYTES. */
  size_t slot_bytes;
  /* Seconds an operation (and the creation) may take before DLPG_ERR_TIMEOUT. */
  double timeout_s;
  /* Pause-instruction iterations a waiter spins before it sleeps on the futex; < 0: the
   * default (short when there are more ranks than CPUs, so oversubscribed ranks sleep). */
  int spin;
  /* When set and nonzero (read atomically), the creation gives up with DLPG_ERR_ABORTED
   * within a fraction of a second: the group's abort flag. NULL: none. */
  const int *abort_flag;
  /* Most bytes a rank writes into its slot when dlpg__shm_start posts a collective; 0: the
   * default (DLPG__SHM_DEFAULT_EAGER_BYTES); < 0: dlpg__shm_start never posts. */
  long eager_bytes;
  /* Output bytes of an operation from which its copies into the output use streaming
   * stores (copy_out.c); 0: DLPG__SHM_DEFAULT_STREAM_BYTES; SIZE_MAX: never. */
  size_t stream_bytes;
  /* Microseconds a waiter yields its CPU (sched_yield) after the spin, before it sleeps; 0:
   * the default (DLPG__SHM_DEFAULT_YIELD_US when there are more ranks than CPUs, else none);
   * < 0: none. */
  long yield_us;
  /* Threads each rank copies and reduces its large collectives with, its own included
   * (team.h); 0: the default (the CPUs this process may run on per rank, at most
   * DLPG__SHM_DEFAULT_THREADS_MAX); 1: none. */
  int threads;
  /* Areas of the pool for child groups (pool.h) in a segment this creation makes; 0: the
   * default (DLPG__SHM_DEFAULT_POOL_AREAS); < 0: none. */
  int pool_areas;
} dlpg__shm_config_t;

/* Pool areas of a child's segment of its own (no area of its parent's was free): for its
 * own children, which are rarer. */
#define DLPG__SHM_CHILD_POOL_AREAS 16

#define DLPG__SHM_DEFAULT_EAGER_BYTES (64L << 10)
/* 2-core CI machine, 4 and 8 ranks, allreduce and broadcast up to 4 KiB: 11-72 us per call
 * with 200-1000 us of yielding against 57-130 us with none (a futex sleep and wake-up
 * nearly every step); 1000 was the best at 8 ranks (bench/results/shm-yield-2core.md). */
#define DLPG__SHM_DEFAULT_YIELD_US 1000L
/* 2-core CI machine (32 MiB L3), 2 ranks: out-of-place allreduce 1.35-1.5x faster with
 * streaming stores from 16 MiB up, no gain at 4 MiB (bench/results/shm-stream-2core.md). */
#define DLPG__SHM_DEFAULT_STREAM_BYTES ((size_t)8 << 20)

/* Helper threads per rank, the rank's own included, at most. 16-core host, 2 ranks,
 * allreduce 1-256 MiB: 2 threads 1.5-1.8x as fast as one, 4 2.3-2.9x, 8 3.5-4.7x (4 ranks:
 * 4 threads 2.0-2.2x; bench/results/shm-threads-16core.md); what more than 8 gives where
 * more CPUs are free is unmeasured. */
#define DLPG__SHM_DEFAULT_THREADS_MAX 8

#define DLPG__SHM_DEFAULT_SLOT_BYTES ((size_t)1 << 20)
#define DLPG__SHM_DEFAULT_P2P_SLOT_BYTES ((size_t)256 << 10)
#define DLPG__SHM_HOST_ID_MAX 256

/* This host's identity as seen by the calling process: "hostname/boot id/netns inode/
 * pidns inode". Computed without waiting for anyone, so a rank can publish it at group
 * creation. Ranks with equal strings share a kernel, a network namespace (so an abstract
 * socket reaches) and a pid namespace (so pids name the same processes). */
dlpg_status_t dlpg__shm_host_id(char *out, size_t cap);

/* Create the engine of rank `rank` of `size` ranks, meeting through `store` under the
 * key prefix `name` (the group's; each creation with the same name on the same store
 * gets its own keys, so a re-created group never meets a stale one). Collective: every
 * rank calls it. The ranks agree on the outcome: either all get a handle or all fail.
 * DLPG_ERR_UNSUPPORTED: some rank could not reach rank 0's socket, could not map the
 * segment or lives in another pid namespace -- the ranks are not on one host as the
 * engine needs, and the caller may fall back to another backend (the message says which
 * rank and why). Other statuses: the creation itself failed (timeout, store, system). */
dlpg_status_t dlpg__shm_create(dlpg_store_t *store, const char *name, int rank, int size,
                               const dlpg__shm_config_t *cfg, dlpg__shm_t **out);

/* What a child group (dlpg_group_split, dlpg_group_create_subset) takes from its parent's
 * handle when it is made, so that its engine can live in an area of the parent's segment
 * (pool.h) at its first operation: a reference to the parent's mapping (so the parent may
 * be destroyed first) and its members' pids. Waits for nobody. members[i]: the parent rank
 * of the child's rank i, n of them; rank: this rank's place among them. NULL when the
 * parent's segment has no pool, or out of memory (the child then makes its own segment). */
typedef struct dlpg__shm_seed dlpg__shm_seed_t;
dlpg__shm_seed_t *dlpg__shm_seed_new(dlpg__shm_t *parent, int rank, int n, const int *members);
void dlpg__shm_seed_free(dlpg__shm_seed_t *seed);

/* The child's engine in an area of its parent's segment, claimed by the child's rank 0
 * under key (the child's key scope, alike on its members): no store, no socket. Only the
 * members call it, and they need not meet: a member that never comes is named by the
 * peers' first operation. *out NULL and DLPG_OK when the child cannot have an area (the
 * pool is full, or the child has more ranks than an area holds: said at INFO); every
 * member learns that alike, and makes its own segment with dlpg__shm_create. Fails
 * (timeout, abort, rank 0 died) only when rank 0 never published the claim. Frees seed. */
dlpg_status_t dlpg__shm_create_sub(dlpg__shm_seed_t *seed, const char *key,
                                   const dlpg__shm_config_t *cfg, dlpg__shm_t **out);

/* Unmap and free. Peers still waiting on this rank fail with "rank r left". NULL ok. */
void dlpg__shm_destroy(dlpg__shm_t *sh);

/* Make the current and every later operation fail with DLPG_ERR_ABORTED; wakes a waiter
 * at once; the peers see this rank as aborted. Any thread, async-signal-safe enough to
 * call from a watchdog (atomics and futex wakes only). */
void dlpg__shm_abort(dlpg__shm_t *sh);

/* The operation deadline (seconds) used from the next operation on. */
void dlpg__shm_set_timeout(dlpg__shm_t *sh, double timeout_s);

int dlpg__shm_rank(const dlpg__shm_t *sh);
int dlpg__shm_size(const dlpg__shm_t *sh);

/* DLPG_OK when op can reduce dt here (the Gloo path's rules: integers and bool take sum,
 * prod, min, max, band, bor, bxor; float16/bfloat16/float32/float64 take sum, prod, min,
 * max, avg); else DLPG_ERR_UNSUPPORTED with a message naming fn. */
dlpg_status_t dlpg__shm_check_reduce(const char *fn, dlpg__dtype_t dt, dlpg_reduce_op_t op);

/* Collectives: every rank calls the same sequence with the same counts, dtype, op and
 * root. A mismatch is detected at the operation's first step by every rank alike, fails it
 * with DLPG_ERR_INVALID_ARGUMENT naming both ranks and both sides, and leaves the handle
 * usable (every rank abandons the operation after the same step). Buffers are host
 * memory the caller owns for the call; in and out may be the same buffer (in place).
 * count is in elements of dt for the reducing operations, nbytes in bytes otherwise. */
dlpg_status_t dlpg__shm_allreduce(dlpg__shm_t *sh, const void *in, void *out, size_t count,
                                  dlpg__dtype_t dt, dlpg_reduce_op_t op);
/* out is written on root only (may be NULL elsewhere). */
dlpg_status_t dlpg__shm_reduce(dlpg__shm_t *sh, const void *in, void *out, size_t count,
                               dlpg__dtype_t dt, dlpg_reduce_op_t op, int root);
dlpg_status_t dlpg__shm_broadcast(dlpg__shm_t *sh, void *buf, size_t nbytes, int root);
/* in: nbytes; out: size * nbytes, rank q's block at q * nbytes. */
dlpg_status_t dlpg__shm_allgather(dlpg__shm_t *sh, const void *in, void *out, size_t nbytes);
/* in: size * count elements; out: count elements, the reduction of every rank's block
 * `rank`. */
dlpg_status_t dlpg__shm_reduce_scatter(dlpg__shm_t *sh, const void *in, void *out,
                                       size_t count, dlpg__dtype_t dt, dlpg_reduce_op_t op);
/* in and out: size blocks of nbytes; block j of in goes to rank j, block q of out came
 * from rank q. */
dlpg_status_t dlpg__shm_alltoall(dlpg__shm_t *sh, const void *in, void *out, size_t nbytes);
dlpg_status_t dlpg__shm_barrier(dlpg__shm_t *sh);

/* A rooted or uneven collective (dlpg.h's dlpg_gather ... dlpg_reduce_scatter_v) with the
 * arrays core validated (coll_v.c): counts and displacements in elements of elem bytes. */
typedef struct dlpg__shm_vcall {
  dlpg__op_kind_t kind;   /* GATHER, SCATTER, ALLGATHERV, ALLTOALLV or REDUCE_SCATTER_V */
  const void *in;         /* SCATTER: the root's (NULL elsewhere) */
  void *out;              /* GATHER: the root's (NULL elsewhere) */
  size_t out_bytes;       /* of out */
  size_t elem;            /* bytes per element of the counts */
  int64_t block;          /* GATHER, SCATTER: elements of each rank's block */
  const int64_t *counts, *displs;           /* ALLGATHERV, REDUCE_SCATTER_V; ALLTOALLV: send */
  const int64_t *recv_counts, *recv_displs; /* ALLTOALLV */
  dlpg__dtype_t dtype;    /* REDUCE_SCATTER_V: the dtype reduced (elem a multiple of its size) */
  dlpg_reduce_op_t rop;   /* REDUCE_SCATTER_V */
  int root;               /* GATHER, SCATTER */
} dlpg__shm_vcall_t;

/* Run c: every rank calls it with the same kind, dtype, root and block, and the v-forms with
 * counts that agree (a disagreement is DLPG_ERR_INVALID_ARGUMENT on every rank, naming both
 * ranks and both counts, after the same step: the handle stays usable). */
dlpg_status_t dlpg__shm_vcoll(dlpg__shm_t *sh, const dlpg__shm_vcall_t *c);

/* What the caller calls the next collective (its dlpg__op_kind_t, dtype and element counts
 * of its input and output): compared across ranks with the engine's own description and
 * named in the mismatch message ("rank 0 has 10 elements of float32 but rank 1 has 11
 * elements of float32"; numel -1: only the dtype is named, for a call whose counts differ
 * by rank). Optional; applies to the next collective only. */
void dlpg__shm_describe_next(dlpg__shm_t *sh, int op_kind, dlpg__dtype_t dt, int64_t in_numel,
                             int64_t out_numel);

/* A collective's arguments for the split below. */
typedef struct dlpg__shm_call {
  dlpg__op_kind_t kind;   /* ALLREDUCE, BROADCAST, REDUCE, ALLGATHER, REDUCE_SCATTER,
                             ALLTOALL or BARRIER */
  const void *in;         /* BROADCAST: the root's source */
  void *out;              /* BROADCAST: every rank's destination (the root's may be in);
                             REDUCE: NULL off the root */
  size_t count;           /* ALLREDUCE, REDUCE: elements; REDUCE_SCATTER: elements of out;
                             BROADCAST, ALLGATHER: bytes of in; ALLTOALL: bytes per block */
  dlpg__dtype_t dtype;    /* the reducing ops */
  dlpg_reduce_op_t rop;
  int root;               /* BROADCAST, REDUCE */
} dlpg__shm_call_t;

/* A small collective in two halves, so the caller's thread can post it without waiting and
 * any thread can finish it later. Start: when c takes one step, writes at most the
 * configured eager bytes and every peer has consumed this rank's slot of that step (no
 * waiting), this rank's part is written and posted -- everything its peers need of it --
 * and *started = 1: c is pending until dlpg__shm_finish ends it, and no other collective
 * may start or run before. Otherwise *started = 0 and nothing happened: run c whole with its
 * function above (which also reports a broken or aborted handle). A collective compares and
 * fails exactly as when run whole, and mixes with it: one rank may start what its peers run
 * whole. Start reads c->in; finish writes c->out, so both must stay valid until then. */
dlpg_status_t dlpg__shm_start(dlpg__shm_t *sh, const dlpg__shm_call_t *c, int *started);
/* Finish the pending collective: wait for the peers up to wait_s seconds (0: look once,
 * without spinning or sleeping), then read their parts into the output. *done = 0 and
 * DLPG_OK while a peer has not posted yet; *done = 1 and the collective's status once it
 * ended (the deadline, counted from its start, fails it as usual). */
dlpg_status_t dlpg__shm_finish(dlpg__shm_t *sh, double wait_s, int *done);
/* 1 while a started collective is pending. */
int dlpg__shm_pending(const dlpg__shm_t *sh);

#ifdef __cplusplus
}
#endif
#endif
