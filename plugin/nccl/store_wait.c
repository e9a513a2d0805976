/* Waiting for a peer's store key (nccl_internal.h: dlpg__store_get_slices): in slices, so an
 * abort is noticed while a peer is awaited, up to a deadline. Used by the communicators'
 * rendezvous (comm_create.c) and the CUDA IPC path's exchanges (route.c, ipc_state.c). */
#include "nccl/nccl_internal.h"

/* Longest single store wait, so an abort is noticed while a peer is awaited. */
#define DLPG__STORE_SLICE_S 0.5

/* dlpg_store_get in slices, so the abort flag is seen; TIMEOUT with a message naming what
 * was awaited. */
dlpg_status_t dlpg__store_get_slices(const char *fn, struct dlpg__nccl *st, const char *key,
                                     void *buf, size_t cap, size_t *len, double deadline,
                                     const char *what) {
  for (;;) {
    if (atomic_load(&st->aborted) || (st->g && dlpg__be_group_aborted(st->g)))
      return dlpg__error(DLPG_ERR_ABORTED, "%s: group '%s' was aborted while waiting for %s", fn,
                         st->name, what);
    double left = deadline - dlpg__now();
    if (left <= 0)
      return dlpg__error(DLPG_ERR_TIMEOUT,
                         "%s: rank %d of group '%s' timed out after %.1f s waiting for %s (store "
                         "key '%s'); is every rank alive and issuing the same CUDA operations?",
                         fn, st->rank, st->name, st->g ? st->g->timeout_s : 0.0, what, key);
    double slice = left < DLPG__STORE_SLICE_S ? left : DLPG__STORE_SLICE_S;
    dlpg_status_t s = dlpg__nccl_store_get(st->g->store, key, slice, buf, cap, len);
    if (s == DLPG_OK) return DLPG_OK;
    if (s != DLPG_ERR_TIMEOUT) return dlpg__error_prefix(s, fn);
  }
}
