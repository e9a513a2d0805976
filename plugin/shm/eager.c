/* Collectives of one step (step.c), in two halves (shm.h: dlpg__shm_start and
 * dlpg__shm_finish). The first half writes this rank's part into its slot of the step and
 * posts the step: after that its peers need nothing more of this rank for this collective,
 * so they finish their own copies while it computes. The second half waits until every
 * rank posted the step, compares what each called (step.c's first-step check), and reads
 * the peers' slots into the output. Its peers' slots stay put until then: a peer writes
 * that slot again two steps later, after this rank posted the next step, which it does only
 * once this collective is finished. The blocking functions (coll_reduce.c, coll_move.c)
 * run their one-step calls through the same two halves back to back, so both paths compare
 * and compute alike and one rank may start what another runs whole. */
#include "shm/eager.h"

#include <math.h>
#include <string.h>

#include "base/clock.h"
#include "base/status.h"
#include "shm/reduce.h"
#include "shm/reduce_slots.h"
#include "shm/step.h"

/* Reducing inputs up to DLPG__SHM_SMALL_BYTES take one step while what each rank then reads,
 * size inputs, stays within DLPG__SHM_SMALL_READ: below that a second synchronisation costs
 * more than reading every rank's input; above it the two-step path wins (16 cores: 4 ranks
 * took 44 us for 64 KiB in one step, 40 us for 128 KiB in two; 8 ranks 95 us for 64 KiB in
 * one, 59 us for 128 KiB in two). */
#define DLPG__SHM_SMALL_BYTES ((size_t)64 << 10)
#define DLPG__SHM_SMALL_READ ((size_t)128 << 10)

static int dlpg__shm_reducing(dlpg__op_kind_t k) {
  return k == DLPG__OP_ALLREDUCE || k == DLPG__OP_REDUCE || k == DLPG__OP_REDUCE_SCATTER;
}

int dlpg__shm_one_step(dlpg__shm_t *sh, const dlpg__shm_call_t *c, size_t *bytes) {
  const dlpg__shm_steps_t *st = dlpg__shm_steps(sh);
  size_t N = (size_t)st->size, sub = st->piece_bytes, E = dlpg__shm_reducing(c->kind) ? dlpg__shm_elem_size(c->dtype) : 1;
  if (E == 0) return 0;
  switch (c->kind) {
    case DLPG__OP_ALLREDUCE:
    case DLPG__OP_REDUCE:
      *bytes = c->count * E;
      return *bytes <= DLPG__SHM_SMALL_BYTES && *bytes * N <= DLPG__SHM_SMALL_READ &&
             *bytes <= st->slot_bytes;
    case DLPG__OP_BROADCAST:
      *bytes = st->rank == c->root ? c->count : 0;
      return c->count <= st->slot_bytes;
    case DLPG__OP_ALLGATHER:
      *bytes = c->count;
      return c->count <= st->slot_bytes;
    case DLPG__OP_REDUCE_SCATTER:
      *bytes = N * c->count * E;
      return c->count * E <= sub && (c->count == 0 || sub >= E);
    case DLPG__OP_ALLTOALL:
      *bytes = N * c->count;
      return c->count <= sub;
    case DLPG__OP_BARRIER:
      *bytes = 0;
      return 1;
    default:
      return 0;
  }
}

/* What the descriptor says of c: the same fields the pipelined paths give coll_start (a
 * dtype and reduce op for the reducing kinds, a root for the rooted ones, else 0), so a rank
 * that starts c and one that runs it whole compare equal. */
static dlpg_status_t dlpg__shm_coll_start_of(dlpg__shm_t *sh, const dlpg__shm_call_t *c) {
  int reducing = dlpg__shm_reducing(c->kind);
  int rooted = c->kind == DLPG__OP_REDUCE || c->kind == DLPG__OP_BROADCAST;
  return dlpg__shm_coll_start(sh, c->kind, c->kind == DLPG__OP_BARRIER ? 0 : c->count,
                              reducing ? (int)c->dtype : 0, reducing ? (int)c->rop : 0,
                              rooted ? c->root : 0);
}

/* This rank's part, into its slot of the current step. */
static void dlpg__shm_write_part(dlpg__shm_t *sh, const dlpg__shm_call_t *c) {
  const dlpg__shm_steps_t *st = dlpg__shm_steps(sh);
  uint8_t *mine = dlpg__shm_step_slot(st, st->rank);
  const uint8_t *in = c->in;
  size_t N = (size_t)st->size, sub = st->piece_bytes, n = c->count;
  switch (c->kind) {
    case DLPG__OP_ALLREDUCE:
    case DLPG__OP_REDUCE:
      if (n) memcpy(mine, in, n * dlpg__shm_elem_size(c->dtype));
      break;
    case DLPG__OP_BROADCAST:
      if (st->rank == c->root && n) memcpy(mine, in, n);
      break;
    case DLPG__OP_ALLGATHER:
      if (n) memcpy(mine, in, n);
      break;
    case DLPG__OP_REDUCE_SCATTER: {
      size_t bytes = n * dlpg__shm_elem_size(c->dtype);
      for (size_t j = 0; bytes && j < N; j++) memcpy(mine + j * sub, in + j * bytes, bytes);
      break;
    }
    case DLPG__OP_ALLTOALL:
      for (size_t j = 0; n && j < N; j++) memcpy(mine + j * sub, in + j * n, n);
      break;
    default:
      break;
  }
}

/* The output, from every rank's slot of the current step (all posted). */
static void dlpg__shm_read_parts(dlpg__shm_t *sh, const dlpg__shm_call_t *c) {
  const dlpg__shm_steps_t *st = dlpg__shm_steps(sh);
  uint8_t *out = c->out;
  size_t N = (size_t)st->size, r = (size_t)st->rank, sub = st->piece_bytes, n = c->count;
  dlpg__shm_reducer_t rd;
  if (dlpg__shm_reducing(c->kind) && !dlpg__shm_reducer(c->dtype, c->rop, &rd)) return;
  switch (c->kind) {
    case DLPG__OP_ALLREDUCE:
      dlpg__shm_reduce_slots(sh, &rd, out, 0, n);
      break;
    case DLPG__OP_REDUCE:
      if (st->rank == c->root) dlpg__shm_reduce_slots(sh, &rd, out, 0, n);
      break;
    case DLPG__OP_REDUCE_SCATTER:
      dlpg__shm_reduce_slots(sh, &rd, out, r * sub, n);
      break;
    case DLPG__OP_BROADCAST:
      if (!n) break;
      if (st->rank != c->root) memcpy(out, dlpg__shm_step_slot(st, c->root), n);
      else if (out != c->in) memcpy(out, c->in, n);
      break;
    case DLPG__OP_ALLGATHER:
      for (size_t q = 0; n && q < N; q++) memcpy(out + q * n, dlpg__shm_step_slot(st, (int)q), n);
      break;
    case DLPG__OP_ALLTOALL:
      for (size_t q = 0; n && q < N; q++)
        memcpy(out + q * n, dlpg__shm_step_slot(st, (int)q) + r * sub, n);
      break;
    default:
      break;
  }
}

/* Write and post c's step (block: wait for the slot as step_begin does; else the caller
 * checked that it is free). */
static dlpg_status_t dlpg__shm_post_part(dlpg__shm_t *sh, dlpg__shm_eager_t *e,
                                         const dlpg__shm_call_t *c) {
  DLPG_CHECK(dlpg__shm_coll_start_of(sh, c));
  DLPG_CHECK(dlpg__shm_step_begin(sh));
  dlpg__shm_write_part(sh, c);
  dlpg__shm_step_publish(sh);
  e->pending = 1;
  e->call = *c;
  return DLPG_OK;
}

dlpg_status_t dlpg__shm_start(dlpg__shm_t *sh, const dlpg__shm_call_t *c, int *started) {
  *started = 0;
  if (!sh || !c) return DLPG_OK;
  dlpg__shm_eager_t *e = dlpg__shm_eager_of(sh);
  size_t bytes = 0;
  if (e->pending || e->max_bytes < 0 || !dlpg__shm_one_step(sh, c, &bytes) ||
      bytes > (size_t)e->max_bytes)
    return DLPG_OK;
  /* What running it whole would report (a broken or aborted handle, a reduce op the engine
   * lacks), or a slot a peer has not consumed yet (it would wait): leave it to that path. */
  dlpg__shm_reducer_t rd;
  if (!dlpg__shm_step_free(sh) ||
      (dlpg__shm_reducing(c->kind) && !dlpg__shm_reducer(c->dtype, c->rop, &rd)) ||
      ((c->kind == DLPG__OP_BROADCAST || c->kind == DLPG__OP_REDUCE) &&
       (c->root < 0 || c->root >= dlpg__shm_steps(sh)->size)))
    return DLPG_OK;
  DLPG_CHECK(dlpg__shm_post_part(sh, e, c));
  *started = 1;
  return DLPG_OK;
}

int dlpg__shm_pending(const dlpg__shm_t *sh) {
  return sh && dlpg__shm_eager_of((dlpg__shm_t *)sh)->pending;
}

/* Finish the pending collective by until (see dlpg__shm_wait_until). */
static dlpg_status_t dlpg__shm_finish_until(dlpg__shm_t *sh, dlpg__shm_eager_t *e, double until,
                                            int *done) {
  *done = 0;
  int ready = 1;
  dlpg_status_t st = dlpg__shm_step_check_first(sh, until, &ready);
  if (st == DLPG_OK && !ready) return DLPG_OK;
  e->pending = 0;
  *done = 1;
  if (st == DLPG_OK) dlpg__shm_read_parts(sh, &e->call);
  return st;
}

dlpg_status_t dlpg__shm_finish(dlpg__shm_t *sh, double wait_s, int *done) {
  *done = 0;
  dlpg__shm_eager_t *e = sh ? dlpg__shm_eager_of(sh) : NULL;
  if (!e || !e->pending) {
    *done = 1;
    return dlpg__error(DLPG_ERR_INTERNAL, "dlpg__shm_finish: no collective was started");
  }
  return dlpg__shm_finish_until(sh, e, wait_s > 0 ? dlpg__now() + wait_s : 0, done);
}

dlpg_status_t dlpg__shm_run_one(dlpg__shm_t *sh, const dlpg__shm_call_t *c) {
  dlpg__shm_eager_t *e = dlpg__shm_eager_of(sh);
  DLPG_CHECK(dlpg__shm_post_part(sh, e, c));
  int done = 0;
  dlpg_status_t st = DLPG_OK;
  while (st == DLPG_OK && !done) st = dlpg__shm_finish_until(sh, e, INFINITY, &done);
  return st;
}
