/* The collectives that move bytes without reducing them: broadcast, allgather, alltoall
 * and barrier, pipelined through the ranks' slots in chunks of at most slot_bytes (one
 * step per chunk, step.c). A zero-byte operation still takes one step, so it synchronises
 * and its arguments are compared with the peers'. */
#include <string.h>

#include "base/status.h"
#include "shm/copy_out.h"
#include "shm/eager.h"
#include "shm/step.h"

static size_t dlpg__shm_min(size_t a, size_t b) { return a < b ? a : b; }

dlpg_status_t dlpg__shm_broadcast(dlpg__shm_t *sh, void *buf, size_t nbytes, int root) {
  const char *fn = "dlpg__shm_broadcast";
  DLPG_ARG_CHECK(sh, "%s: the engine is NULL", fn);
  dlpg__shm_steps_t *st = dlpg__shm_steps(sh);
  DLPG_ARG_CHECK(root >= 0 && root < st->size, "%s: root %d is out of range (size %d)", fn, root,
                 st->size);
  DLPG_ARG_CHECK(nbytes == 0 || buf, "%s: rank %d: buf is NULL for %zu bytes", fn, st->rank, nbytes);
  dlpg__shm_call_t c = {DLPG__OP_BROADCAST, buf, buf, nbytes, DLPG__DT_UINT8, DLPG_SUM, root};
  size_t bytes = 0;
  if (dlpg__shm_one_step(sh, &c, &bytes)) return dlpg__shm_run_one(sh, &c);
  DLPG_CHECK(dlpg__shm_coll_start(sh, DLPG__OP_BROADCAST, nbytes, 0, 0, root));
  uint8_t *p = buf;
  if (st->rank != root) dlpg__shm_prefault_out(sh, buf, nbytes);
  size_t off = 0;
  do {
    size_t n = dlpg__shm_min(nbytes - off, st->slot_bytes);
    DLPG_CHECK(dlpg__shm_step_begin(sh));
    if (st->rank == root) dlpg__shm_copy_many(sh, &(dlpg__shm_copy_t){dlpg__shm_step_slot(st, root), p + off, n}, 1, 0);
    DLPG_CHECK(dlpg__shm_step_post(sh));
    if (st->rank != root) {
      DLPG_CHECK(dlpg__shm_step_wait(sh, root));
      dlpg__shm_copy_many(sh, &(dlpg__shm_copy_t){p + off, dlpg__shm_step_slot(st, root), n}, 1, 0);
    }
    off += n;
  } while (off < nbytes);
  return DLPG_OK;
}

dlpg_status_t dlpg__shm_allgather(dlpg__shm_t *sh, const void *in, void *out, size_t nbytes) {
  const char *fn = "dlpg__shm_allgather";
  DLPG_ARG_CHECK(sh, "%s: the engine is NULL", fn);
  dlpg__shm_steps_t *st = dlpg__shm_steps(sh);
  DLPG_ARG_CHECK(nbytes == 0 || (in && out), "%s: rank %d: in or out is NULL", fn, st->rank);
  dlpg__shm_call_t c = {DLPG__OP_ALLGATHER, in, out, nbytes, DLPG__DT_UINT8, DLPG_SUM, 0};
  size_t bytes = 0;
  if (dlpg__shm_one_step(sh, &c, &bytes)) return dlpg__shm_run_one(sh, &c);
  DLPG_CHECK(dlpg__shm_coll_start(sh, DLPG__OP_ALLGATHER, nbytes, 0, 0, 0));
  dlpg__shm_prefault_out(sh, out, nbytes * (size_t)st->size);
  const uint8_t *src = in;
  uint8_t *dst = out;
  size_t off = 0;
  do {
    size_t n = dlpg__shm_min(nbytes - off, st->slot_bytes);
    DLPG_CHECK(dlpg__shm_step_begin(sh));
    dlpg__shm_copy_many(sh, &(dlpg__shm_copy_t){dlpg__shm_step_slot(st, st->rank), src + off, n}, 1, 0);
    DLPG_CHECK(dlpg__shm_step_post(sh));
    DLPG_CHECK(dlpg__shm_step_wait_all(sh));
    for (int q = 0; q < st->size; q++)
      st->copies[q] = (dlpg__shm_copy_t){dst + (size_t)q * nbytes + off, dlpg__shm_step_slot(st, q), n};
    dlpg__shm_copy_many(sh, st->copies, (size_t)st->size, 0);
    off += n;
  } while (off < nbytes);
  return DLPG_OK;
}

dlpg_status_t dlpg__shm_alltoall(dlpg__shm_t *sh, const void *in, void *out, size_t nbytes) {
  const char *fn = "dlpg__shm_alltoall";
  DLPG_ARG_CHECK(sh, "%s: the engine is NULL", fn);
  dlpg__shm_steps_t *st = dlpg__shm_steps(sh);
  DLPG_ARG_CHECK(nbytes == 0 || (in && out), "%s: rank %d: in or out is NULL", fn, st->rank);
  dlpg__shm_call_t c = {DLPG__OP_ALLTOALL, in, out, nbytes, DLPG__DT_UINT8, DLPG_SUM, 0};
  size_t bytes = 0;
  if (dlpg__shm_one_step(sh, &c, &bytes)) return dlpg__shm_run_one(sh, &c);
  DLPG_CHECK(dlpg__shm_coll_start(sh, DLPG__OP_ALLTOALL, nbytes, 0, 0, 0));
  size_t N = (size_t)st->size, r = (size_t)st->rank;
  /* The slot holds one piece per destination. */
  size_t sub = st->piece_bytes;
  const uint8_t *src = in;
  uint8_t *dst = out;
  if (dst != src) dlpg__shm_prefault_out(sh, out, nbytes * N);
  size_t off = 0;
  do {
    size_t n = dlpg__shm_min(nbytes - off, sub);
    DLPG_CHECK(dlpg__shm_step_begin(sh));
    uint8_t *mine = dlpg__shm_step_slot(st, st->rank);
    for (size_t j = 0; j < N; j++)
      st->copies[j] = (dlpg__shm_copy_t){mine + j * sub, src + j * nbytes + off, n};
    dlpg__shm_copy_many(sh, st->copies, N, 0);
    DLPG_CHECK(dlpg__shm_step_post(sh));
    DLPG_CHECK(dlpg__shm_step_wait_all(sh));
    for (size_t q = 0; q < N; q++)
      st->copies[q] = (dlpg__shm_copy_t){dst + q * nbytes + off, dlpg__shm_step_slot(st, (int)q) + r * sub, n};
    dlpg__shm_copy_many(sh, st->copies, N, 0);
    off += n;
  } while (off < nbytes);
  return DLPG_OK;
}

dlpg_status_t dlpg__shm_barrier(dlpg__shm_t *sh) {
  DLPG_ARG_CHECK(sh, "dlpg__shm_barrier: the engine is NULL");
  dlpg__shm_call_t c = {DLPG__OP_BARRIER, NULL, NULL, 0, DLPG__DT_UINT8, DLPG_SUM, 0};
  return dlpg__shm_run_one(sh, &c);
}
