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
#include <math.h>
#include <string.h>

#include "base/clock.h"
#include "base/status.h"
#include "shm/reduce.h"
#include "shm/seg.h"

/* Bytes of each rank's piece for one destination in reduce_scatter and alltoall: the slot
 * split in one whole number of lines per rank (as the pipelined paths split it). */
static size_t dlpg__shm_sub(const dlpg__shm_t *sh) {
  return (sh->slot_bytes / (size_t)sh->size) & ~(size_t)(DLPG__SHM_LINE - 1);
}

static int dlpg__shm_reducing(dlpg__op_kind_t k) {
  return k == DLPG__OP_ALLREDUCE || k == DLPG__OP_REDUCE || k == DLPG__OP_REDUCE_SCATTER;
}

int dlpg__shm_one_step(const dlpg__shm_t *sh, const dlpg__shm_call_t *c, size_t *bytes) {
  size_t N = (size_t)sh->size, E = dlpg__shm_reducing(c->kind) ? dlpg__shm_elem_size(c->dtype) : 1;
  if (E == 0) return 0;
  switch (c->kind) {
    case DLPG__OP_ALLREDUCE:
    case DLPG__OP_REDUCE:
      *bytes = c->count * E;
      return *bytes <= DLPG__SHM_SMALL_BYTES && *bytes * N <= DLPG__SHM_SMALL_READ &&
             *bytes <= sh->slot_bytes;
    case DLPG__OP_BROADCAST:
      *bytes = sh->rank == c->root ? c->count : 0;
      return c->count <= sh->slot_bytes;
    case DLPG__OP_ALLGATHER:
      *bytes = c->count;
      return c->count <= sh->slot_bytes;
    case DLPG__OP_REDUCE_SCATTER:
      *bytes = N * c->count * E;
      return c->count * E <= dlpg__shm_sub(sh) && (c->count == 0 || dlpg__shm_sub(sh) >= E);
    case DLPG__OP_ALLTOALL:
      *bytes = N * c->count;
      return c->count <= dlpg__shm_sub(sh);
    case DLPG__OP_BARRIER:
      *bytes = 0;
      return 1;
    default:
      return 0;
  }
}

/* What the descriptor says of c: the same fields the pipelined paths give coll_start, so a
 * rank that starts c and one that runs it whole compare equal. */
static dlpg_status_t dlpg__shm_coll_start_of(dlpg__shm_t *sh, const dlpg__shm_call_t *c) {
  switch (c->kind) {
    case DLPG__OP_ALLREDUCE:
      return dlpg__shm_coll_start(sh, DLPG__SHM_ALLREDUCE, c->count, (int)c->dtype, (int)c->rop, 0);
    case DLPG__OP_REDUCE:
      return dlpg__shm_coll_start(sh, DLPG__SHM_REDUCE, c->count, (int)c->dtype, (int)c->rop,
                                  c->root);
    case DLPG__OP_REDUCE_SCATTER:
      return dlpg__shm_coll_start(sh, DLPG__SHM_REDUCE_SCATTER, c->count, (int)c->dtype,
                                  (int)c->rop, 0);
    case DLPG__OP_BROADCAST:
      return dlpg__shm_coll_start(sh, DLPG__SHM_BROADCAST, c->count, 0, 0, c->root);
    case DLPG__OP_ALLGATHER:
      return dlpg__shm_coll_start(sh, DLPG__SHM_ALLGATHER, c->count, 0, 0, 0);
    case DLPG__OP_ALLTOALL:
      return dlpg__shm_coll_start(sh, DLPG__SHM_ALLTOALL, c->count, 0, 0, 0);
    default:
      return dlpg__shm_coll_start(sh, DLPG__SHM_BARRIER, 0, 0, 0, 0);
  }
}

/* This rank's part, into its slot of the current step. */
static void dlpg__shm_write_part(dlpg__shm_t *sh, const dlpg__shm_call_t *c) {
  uint8_t *mine = dlpg__shm_cur_slot(sh, sh->rank);
  const uint8_t *in = c->in;
  size_t N = (size_t)sh->size, sub = dlpg__shm_sub(sh), n = c->count;
  switch (c->kind) {
    case DLPG__OP_ALLREDUCE:
    case DLPG__OP_REDUCE:
      if (n) memcpy(mine, in, n * dlpg__shm_elem_size(c->dtype));
      break;
    case DLPG__OP_BROADCAST:
      if (sh->rank == c->root && n) memcpy(mine, in, n);
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
  uint8_t *out = c->out;
  size_t N = (size_t)sh->size, r = (size_t)sh->rank, sub = dlpg__shm_sub(sh), n = c->count;
  dlpg__shm_reducer_t rd;
  if (dlpg__shm_reducing(c->kind) && !dlpg__shm_reducer(c->dtype, c->rop, &rd)) return;
  switch (c->kind) {
    case DLPG__OP_ALLREDUCE:
      dlpg__shm_reduce_slots(sh, &rd, out, 0, n);
      break;
    case DLPG__OP_REDUCE:
      if (sh->rank == c->root) dlpg__shm_reduce_slots(sh, &rd, out, 0, n);
      break;
    case DLPG__OP_REDUCE_SCATTER:
      dlpg__shm_reduce_slots(sh, &rd, out, r * sub, n);
      break;
    case DLPG__OP_BROADCAST:
      if (!n) break;
      if (sh->rank != c->root) memcpy(out, dlpg__shm_cur_slot(sh, c->root), n);
      else if (out != c->in) memcpy(out, c->in, n);
      break;
    case DLPG__OP_ALLGATHER:
      for (size_t q = 0; n && q < N; q++) memcpy(out + q * n, dlpg__shm_cur_slot(sh, (int)q), n);
      break;
    case DLPG__OP_ALLTOALL:
      for (size_t q = 0; n && q < N; q++)
        memcpy(out + q * n, dlpg__shm_cur_slot(sh, (int)q) + r * sub, n);
      break;
    default:
      break;
  }
}

/* Write and post c's step (block: wait for the slot as step_begin does; else the caller
 * checked that it is free). */
static dlpg_status_t dlpg__shm_post_part(dlpg__shm_t *sh, const dlpg__shm_call_t *c) {
  DLPG_CHECK(dlpg__shm_coll_start_of(sh, c));
  DLPG_CHECK(dlpg__shm_step_begin(sh));
  dlpg__shm_write_part(sh, c);
  sh->step = sh->cur;
  dlpg__shm_rankctl_t *me = &sh->ctl[sh->rank];
  dlpg__shm_post(&me->seq, &me->seq_waiters, sh->step);
  sh->pending = 1;
  sh->pend = *c;
  sh->pend_deadline = sh->deadline;
  return DLPG_OK;
}

dlpg_status_t dlpg__shm_start(dlpg__shm_t *sh, const dlpg__shm_call_t *c, int *started) {
  *started = 0;
  size_t bytes = 0;
  if (!sh || !c || sh->pending || sh->eager_bytes < 0 || !dlpg__shm_one_step(sh, c, &bytes) ||
      bytes > (size_t)sh->eager_bytes)
    return DLPG_OK;
  /* What running it whole would report (a broken or aborted handle, a reduce op the engine
   * lacks), or a slot a peer has not consumed yet (it would wait): leave it to that path. */
  dlpg__shm_reducer_t rd;
  if (atomic_load(&sh->aborted) || sh->broken != DLPG_OK || !dlpg__shm_step_free(sh) ||
      (dlpg__shm_reducing(c->kind) && !dlpg__shm_reducer(c->dtype, c->rop, &rd)) ||
      ((c->kind == DLPG__OP_BROADCAST || c->kind == DLPG__OP_REDUCE) &&
       (c->root < 0 || c->root >= sh->size)))
    return DLPG_OK;
  DLPG_CHECK(dlpg__shm_post_part(sh, c));
  *started = 1;
  return DLPG_OK;
}

int dlpg__shm_pending(const dlpg__shm_t *sh) { return sh && sh->pending; }

/* Finish the pending collective by until (see dlpg__shm_wait_until). */
static dlpg_status_t dlpg__shm_finish_until(dlpg__shm_t *sh, double until, int *done) {
  *done = 0;
  /* A pair operation in between set its own deadline and name. */
  sh->deadline = sh->pend_deadline;
  sh->op_name = NULL;
  int ready = 1;
  dlpg_status_t st = dlpg__shm_step_check_first(sh, until, &ready);
  if (st == DLPG_OK && !ready) return DLPG_OK;
  sh->pending = 0;
  *done = 1;
  if (st == DLPG_OK) dlpg__shm_read_parts(sh, &sh->pend);
  return st;
}

dlpg_status_t dlpg__shm_finish(dlpg__shm_t *sh, double wait_s, int *done) {
  *done = 0;
  if (!sh || !sh->pending) {
    *done = 1;
    return dlpg__error(DLPG_ERR_INTERNAL, "dlpg__shm_finish: no collective was started");
  }
  return dlpg__shm_finish_until(sh, wait_s > 0 ? dlpg__now() + wait_s : 0, done);
}

dlpg_status_t dlpg__shm_run_one(dlpg__shm_t *sh, const dlpg__shm_call_t *c) {
  DLPG_CHECK(dlpg__shm_post_part(sh, c));
  int done = 0;
  dlpg_status_t st = DLPG_OK;
  while (st == DLPG_OK && !done) st = dlpg__shm_finish_until(sh, INFINITY, &done);
  return st;
}
