/* NCCL and CUDA results as dlpg statuses with a message naming the caller, the call and
 * NCCL's or CUDA's own words. */
#include "nccl/nccl_internal.h"

dlpg_status_t dlpg__nccl_result(ncclResult_t r, ncclComm_t comm, const char *fn, const char *what) {
  if (r == ncclSuccess || r == ncclInProgress) return DLPG_OK;
  const char *last = ncclGetLastError(comm);
  dlpg_status_t st = r == ncclRemoteError ? DLPG_ERR_REMOTE : DLPG_ERR_SYSTEM;
  return dlpg__error(st, "%s: %s failed: %s (%d)%s%s", fn, what, ncclGetErrorString(r), (int)r,
                     last && *last ? ": " : "", last ? last : "");
}

dlpg_status_t dlpg__cuda_result(cudaError_t e, const char *fn, const char *what) {
  if (e == cudaSuccess) return DLPG_OK;
  return dlpg__error(DLPG_ERR_SYSTEM, "%s: %s failed: %s (%s)", fn, what, cudaGetErrorString(e),
                     cudaGetErrorName(e));
}
