/* The reducing collectives: allreduce, reduce and reduce_scatter, pipelined through the
 * ranks' slots (step.c). Every element is reduced by exactly one rank, in rank order
 * 0, 1, ..., size-1, and copied from there by all who need it, so every rank gets the same
 * bits and a rerun gives the same bits.
 *   small allreduce (one step): each rank writes its whole input, then reduces all slots
 *     itself -- in the same order, so still bitwise equal everywhere; one synchronisation.
 *   large allreduce/reduce (two steps per chunk of slot_bytes): each rank writes its chunk
 *     but its own slice r (only rank r reads slice r, and it reads its own part from its
 *     input), reduces slice r from all slots and its input into its other slot, then
 *     everyone copies the slices (reduce: the root alone). Leaving out its own slice saves
 *     1/size of the copy in, which at 2 ranks is half of it.
 *   reduce_scatter (one step per chunk): each rank writes its piece of every block, then
 *     reduces the pieces of block r from all slots into its output. */
#include <stdint.h>
#include <string.h>

#include "base/status.h"
#include "shm/copy_out.h"
#include "shm/eager.h"
#include "shm/reduce.h"
#include "shm/reduce_slots.h"
#include "shm/step.h"

dlpg_status_t dlpg__shm_check_reduce(const char *fn, dlpg__dtype_t dt, dlpg_reduce_op_t op) {
  dlpg__shm_reducer_t r;
  const char *dtn = (unsigned)dt < DLPG__DT_COUNT ? dlpg__dtype_name(dt) : "unknown";
  /* A complex tensor reduces as its real parts (backend.c hands them over), with the ops
   * that act on each part alone. */
  if (dlpg__dtype_is_complex(dt)) {
    if (op == DLPG_SUM || op == DLPG_AVG || op == DLPG_PREMUL_SUM) return DLPG_OK;
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "%s: reduce op %s is not defined on complex tensors (%s); complex "
                       "dtypes reduce with sum, avg and premul_sum (shm)",
                       fn, dlpg__reduce_op_name(op), dtn);
  }
  if ((unsigned)dt < DLPG__DT_COUNT && dlpg__shm_reducer(dt, op, &r)) return DLPG_OK;
  if (op == DLPG_AVG || op == DLPG_PREMUL_SUM)
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "%s: reduce op %s needs a floating or complex dtype, got %s (shm)", fn,
                       dlpg__reduce_op_name(op), dtn);
  if (op == DLPG_BAND || op == DLPG_BOR || op == DLPG_BXOR)
    return dlpg__error(DLPG_ERR_UNSUPPORTED,
                       "%s: bitwise reduce op %s needs an integer or bool dtype, got %s (shm)", fn,
                       dlpg__reduce_op_name(op), dtn);
  return dlpg__error(DLPG_ERR_UNSUPPORTED, "%s: shm cannot reduce %s tensors (reduce op %s)", fn,
                     dtn, dlpg__reduce_op_name(op));
}

static dlpg_status_t dlpg__shm_start_reduce(dlpg__shm_t *sh, const char *fn, dlpg__op_kind_t kind,
                                            size_t count, dlpg__dtype_t dt, dlpg_reduce_op_t op,
                                            int root, dlpg__shm_reducer_t *rd) {
  /* The pair was judged once, at validation (this backend's check, backend.c). */
  dlpg__shm_reducer(dt, op, rd);
  DLPG_ARG_CHECK(root >= 0 && root < dlpg__shm_steps(sh)->size,
                 "%s: root %d is out of range (size %d)", fn, root, dlpg__shm_steps(sh)->size);
  return dlpg__shm_coll_start(sh, kind, count, (int)dt, (int)op, root);
}

/* Two steps per chunk (see the top of the file); out written on `who` (all if -1). */
static dlpg_status_t dlpg__shm_reduce_large(dlpg__shm_t *sh, const dlpg__shm_reducer_t *rd,
                                            const uint8_t *in, uint8_t *out, size_t count, int who) {
  dlpg__shm_steps_t *st = dlpg__shm_steps(sh);
  size_t per = st->slot_bytes / rd->elem, E = rd->elem, N = (size_t)st->size, r = (size_t)st->rank;
  /* In place, the output's lines were just read into the cache: ordinary stores then. A
   * rank that is not the root of a reduce has no output (NULL). */
  size_t len = count * E;
  int apart = out && dlpg__shm_disjoint(out, len, in, len);
  int stream = apart && dlpg__shm_stream_out(sh, len);
  if (apart) dlpg__shm_prefault_out(sh, out, len);
  for (size_t off = 0; off < count; off += per) {
    size_t n = count - off < per ? count - off : per;
    size_t lo = n * r / N, hi = n * (r + 1) / N;
    DLPG_CHECK(dlpg__shm_step_begin(sh));
    uint8_t *mine = dlpg__shm_step_slot(st, st->rank);
    dlpg__shm_copy_t *cp = st->copies;
    cp[0] = (dlpg__shm_copy_t){mine, in + off * E, lo * E};
    cp[1] = (dlpg__shm_copy_t){mine + hi * E, in + (off + hi) * E, (n - hi) * E};
    dlpg__shm_copy_many(sh, cp, 2, 0);
    DLPG_CHECK(dlpg__shm_step_post(sh));
    DLPG_CHECK(dlpg__shm_step_wait_all(sh));
    /* The result goes into this rank's slot of the next step while this one's slots are
     * read: every rank posted this step (the wait above), all that beginning the next one
     * waits for, so it begins at once after the reduction. */
    uint8_t *dst = dlpg__shm_step_next_slot(st) + lo * E;
    dlpg__shm_reduce_many(sh, rd, dst, lo * E, hi - lo, in + (off + lo) * E);
    DLPG_CHECK(dlpg__shm_step_begin(sh));
    DLPG_CHECK(dlpg__shm_step_post(sh));
    if (who >= 0 && who != st->rank) continue;
    DLPG_CHECK(dlpg__shm_step_wait_all(sh));
    for (size_t q = 0; q < N; q++) {
      size_t qlo = n * q / N, qhi = n * (q + 1) / N;
      cp[q] = (dlpg__shm_copy_t){out + (off + qlo) * E, dlpg__shm_step_slot(st, (int)q) + qlo * E,
                                 (qhi - qlo) * E};
    }
    dlpg__shm_copy_many(sh, cp, N, stream);
  }
  return DLPG_OK;
}

static dlpg_status_t dlpg__shm_reduce_any(dlpg__shm_t *sh, const char *fn, dlpg__op_kind_t kind,
                                          const void *in, void *out, size_t count,
                                          dlpg__dtype_t dt, dlpg_reduce_op_t op, int root) {
  DLPG_ARG_CHECK(sh, "%s: the engine is NULL", fn);
  int who = kind == DLPG__OP_REDUCE ? root : -1, rank = dlpg__shm_steps(sh)->rank;
  /* One step (eager.c) when it fits: every rank writes its input, then reduces all. */
  dlpg__shm_call_t c = {kind, in, out, count, dt, op, root < 0 ? 0 : root};
  size_t bytes = 0;
  if (dlpg__shm_one_step(sh, &c, &bytes)) {
    DLPG_ARG_CHECK(count == 0 || (in && (out || (who >= 0 && who != rank))),
                   "%s: rank %d: in or out is NULL for %zu elements", fn, rank, count);
    return dlpg__shm_run_one(sh, &c);
  }
  dlpg__shm_reducer_t rd;
  DLPG_CHECK(dlpg__shm_start_reduce(sh, fn, kind, count, dt, op, root < 0 ? 0 : root, &rd));
  DLPG_ARG_CHECK(count == 0 || (in && (out || (who >= 0 && who != rank))),
                 "%s: rank %d: in or out is NULL for %zu elements", fn, rank, count);
  return dlpg__shm_reduce_large(sh, &rd, in, out, count, who);
}

dlpg_status_t dlpg__shm_allreduce(dlpg__shm_t *sh, const void *in, void *out, size_t count,
                                  dlpg__dtype_t dt, dlpg_reduce_op_t op) {
  return dlpg__shm_reduce_any(sh, "dlpg__shm_allreduce", DLPG__OP_ALLREDUCE, in, out, count, dt,
                              op, -1);
}

dlpg_status_t dlpg__shm_reduce(dlpg__shm_t *sh, const void *in, void *out, size_t count,
                               dlpg__dtype_t dt, dlpg_reduce_op_t op, int root) {
  int size = sh ? dlpg__shm_steps(sh)->size : 0;
  DLPG_ARG_CHECK(!sh || (root >= 0 && root < size),
                 "dlpg__shm_reduce: root %d is out of range (size %d)", root, size);
  return dlpg__shm_reduce_any(sh, "dlpg__shm_reduce", DLPG__OP_REDUCE, in, out, count, dt, op,
                              root);
}

dlpg_status_t dlpg__shm_reduce_scatter(dlpg__shm_t *sh, const void *in, void *out,
                                       size_t count, dlpg__dtype_t dt, dlpg_reduce_op_t op) {
  const char *fn = "dlpg__shm_reduce_scatter";
  DLPG_ARG_CHECK(sh, "%s: the engine is NULL", fn);
  dlpg__shm_steps_t *st = dlpg__shm_steps(sh);
  dlpg__shm_call_t c = {DLPG__OP_REDUCE_SCATTER, in, out, count, dt, op, 0};
  size_t bytes = 0;
  if (dlpg__shm_one_step(sh, &c, &bytes)) {
    DLPG_ARG_CHECK(count == 0 || (in && out), "%s: rank %d: in or out is NULL", fn, st->rank);
    return dlpg__shm_run_one(sh, &c);
  }
  dlpg__shm_reducer_t rd;
  DLPG_CHECK(dlpg__shm_start_reduce(sh, fn, DLPG__OP_REDUCE_SCATTER, count, dt, op, 0, &rd));
  DLPG_ARG_CHECK(count == 0 || (in && out), "%s: rank %d: in or out is NULL", fn, st->rank);
  size_t E = rd.elem, N = (size_t)st->size;
  /* Each block's piece gets a whole number of lines of the slot. */
  size_t sub = st->piece_bytes, per = sub / E;
  const uint8_t *src = in;
  size_t off = 0;
  do {
    size_t n = count - off < per ? count - off : per;
    DLPG_CHECK(dlpg__shm_step_begin(sh));
    uint8_t *mine = dlpg__shm_step_slot(st, st->rank);
    for (size_t j = 0; j < N; j++)
      st->copies[j] = (dlpg__shm_copy_t){mine + j * sub, src + (j * count + off) * E, n * E};
    dlpg__shm_copy_many(sh, st->copies, N, 0);
    DLPG_CHECK(dlpg__shm_step_post(sh));
    DLPG_CHECK(dlpg__shm_step_wait_all(sh));
    dlpg__shm_reduce_many(sh, &rd, (uint8_t *)out + off * E, (size_t)st->rank * sub, n, NULL);
    off += n;
  } while (off < count);
  return DLPG_OK;
}
