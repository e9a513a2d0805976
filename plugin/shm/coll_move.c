/* The collectives that move bytes without reducing them: broadcast, allgather, alltoall
 * and barrier, pipelined through the ranks' slots in chunks of at most slot_bytes (one
 * step per chunk, step.c). A zero-byte operation still takes one step, so it synchronises
 * and its arguments are compared with the peers'. */
#include <string.h>

#include "base/status.h"
#include "shm/copy_out.h"
#include "shm/seg.h"

static size_t dlpg__shm_min(size_t a, size_t b) { return a < b ? a : b; }

dlpg_status_t dlpg__shm_broadcast(dlpg__shm_t *sh, void *buf, size_t nbytes, int root) {
  const char *fn = "dlpg__shm_broadcast";
  DLPG_ARG_CHECK(sh, "%s: the engine is NULL", fn);
  DLPG_ARG_CHECK(root >= 0 && root < sh->size, "%s: root %d is out of range (size %d)", fn, root,
                 sh->size);
  DLPG_ARG_CHECK(nbytes == 0 || buf, "%s: rank %d: buf is NULL for %zu bytes", fn, sh->rank, nbytes);
  dlpg__shm_call_t c = {DLPG__OP_BROADCAST, buf, buf, nbytes, DLPG__DT_UINT8, DLPG_SUM, root};
  size_t bytes = 0;
  if (dlpg__shm_one_step(sh, &c, &bytes)) return dlpg__shm_run_one(sh, &c);
  DLPG_CHECK(dlpg__shm_coll_start(sh, DLPG__SHM_BROADCAST, nbytes, 0, 0, root));
  uint8_t *p = buf;
  if (sh->rank != root) dlpg__shm_prefault_out(sh, buf, nbytes);
  size_t off = 0;
  do {
    size_t n = dlpg__shm_min(nbytes - off, sh->slot_bytes);
    DLPG_CHECK(dlpg__shm_step_begin(sh));
    if (sh->rank == root) dlpg__shm_copy_many(sh, &(dlpg__shm_copy_t){dlpg__shm_cur_slot(sh, root), p + off, n}, 1, 0);
    DLPG_CHECK(dlpg__shm_step_post(sh));
    if (sh->rank != root) {
      DLPG_CHECK(dlpg__shm_step_wait(sh, root));
      dlpg__shm_copy_many(sh, &(dlpg__shm_copy_t){p + off, dlpg__shm_cur_slot(sh, root), n}, 1, 0);
    }
    off += n;
  } while (off < nbytes);
  return DLPG_OK;
}

dlpg_status_t dlpg__shm_allgather(dlpg__shm_t *sh, const void *in, void *out, size_t nbytes) {
  const char *fn = "dlpg__shm_allgather";
  DLPG_ARG_CHECK(sh, "%s: the engine is NULL", fn);
  DLPG_ARG_CHECK(nbytes == 0 || (in && out), "%s: rank %d: in or out is NULL", fn, sh->rank);
  dlpg__shm_call_t c = {DLPG__OP_ALLGATHER, in, out, nbytes, DLPG__DT_UINT8, DLPG_SUM, 0};
  size_t bytes = 0;
  if (dlpg__shm_one_step(sh, &c, &bytes)) return dlpg__shm_run_one(sh, &c);
  DLPG_CHECK(dlpg__shm_coll_start(sh, DLPG__SHM_ALLGATHER, nbytes, 0, 0, 0));
  dlpg__shm_prefault_out(sh, out, nbytes * (size_t)sh->size);
  const uint8_t *src = in;
  uint8_t *dst = out;
  size_t off = 0;
  do {
    size_t n = dlpg__shm_min(nbytes - off, sh->slot_bytes);
    DLPG_CHECK(dlpg__shm_step_begin(sh));
    dlpg__shm_copy_many(sh, &(dlpg__shm_copy_t){dlpg__shm_cur_slot(sh, sh->rank), src + off, n}, 1, 0);
    DLPG_CHECK(dlpg__shm_step_post(sh));
    DLPG_CHECK(dlpg__shm_step_wait_all(sh));
    for (int q = 0; q < sh->size; q++)
      sh->copies[q] = (dlpg__shm_copy_t){dst + (size_t)q * nbytes + off, dlpg__shm_cur_slot(sh, q), n};
    dlpg__shm_copy_many(sh, sh->copies, (size_t)sh->size, 0);
    off += n;
  } while (off < nbytes);
  return DLPG_OK;
}

dlpg_status_t dlpg__shm_alltoall(dlpg__shm_t *sh, const void *in, void *out, size_t nbytes) {
  const char *fn = "dlpg__shm_alltoall";
  DLPG_ARG_CHECK(sh, "%s: the engine is NULL", fn);
  DLPG_ARG_CHECK(nbytes == 0 || (in && out), "%s: rank %d: in or out is NULL", fn, sh->rank);
  dlpg__shm_call_t c = {DLPG__OP_ALLTOALL, in, out, nbytes, DLPG__DT_UINT8, DLPG_SUM, 0};
  size_t bytes = 0;
  if (dlpg__shm_one_step(sh, &c, &bytes)) return dlpg__shm_run_one(sh, &c);
  DLPG_CHECK(dlpg__shm_coll_start(sh, DLPG__SHM_ALLTOALL, nbytes, 0, 0, 0));
  size_t N = (size_t)sh->size, r = (size_t)sh->rank;
  /* The slot holds one piece per destination, each a whole number of lines. */
  size_t sub = (sh->slot_bytes / N) & ~(size_t)(DLPG__SHM_LINE - 1);
  const uint8_t *src = in;
  uint8_t *dst = out;
  if (dst != src) dlpg__shm_prefault_out(sh, out, nbytes * N);
  size_t off = 0;
  do {
    size_t n = dlpg__shm_min(nbytes - off, sub);
    DLPG_CHECK(dlpg__shm_step_begin(sh));
    uint8_t *mine = dlpg__shm_cur_slot(sh, sh->rank);
    for (size_t j = 0; j < N; j++)
      sh->copies[j] = (dlpg__shm_copy_t){mine + j * sub, src + j * nbytes + off, n};
    dlpg__shm_copy_many(sh, sh->copies, N, 0);
    DLPG_CHECK(dlpg__shm_step_post(sh));
    DLPG_CHECK(dlpg__shm_step_wait_all(sh));
    for (size_t q = 0; q < N; q++)
      sh->copies[q] = (dlpg__shm_copy_t){dst + q * nbytes + off, dlpg__shm_cur_slot(sh, (int)q) + r * sub, n};
    dlpg__shm_copy_many(sh, sh->copies, N, 0);
    off += n;
  } while (off < nbytes);
  return DLPG_OK;
}

dlpg_status_t dlpg__shm_barrier(dlpg__shm_t *sh) {
  DLPG_ARG_CHECK(sh, "dlpg__shm_barrier: the engine is NULL");
  dlpg__shm_call_t c = {DLPG__OP_BARRIER, NULL, NULL, 0, DLPG__DT_UINT8, DLPG_SUM, 0};
  return dlpg__shm_run_one(sh, &c);
}
