/* The stream memory operations of the CUDA IPC path's stream-wait mode (ipc.h): a wait on
 * and a write of a 64-bit counter, queued on a stream like a kernel, and the step counters
 * every collective publishes with them (the staged steps and the in-place ones). They come from the
 * driver through the runtime's entry-point query, so the module links no libcuda. A wait
 * does not occupy the GPU's cores, so while one process's stream waits for a peer process,
 * the GPU can run that peer's work (contexts of several processes take turns on a GPU
 * unless MPS runs; a kernel that spins holds its turn until the time slice ends). */
#include <pthread.h>
#include <stdint.h>
#include <cuda.h>

#include "nccl/ipc_host.h"

typedef CUresult (*dlpg__memop_fn)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);

static pthread_once_t dlpg__memops_once = PTHREAD_ONCE_INIT;
static dlpg__memop_fn dlpg__wait64, dlpg__write64;

static void dlpg__memops_load(void) {
  void *w = NULL, *v = NULL;
  enum cudaDriverEntryPointQueryResult q1 = cudaDriverEntryPointSymbolNotFound, q2 = q1;
  if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", &w, 12000, cudaEnableDefault,
                                       &q1) != cudaSuccess ||
      cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &v, 12000, cudaEnableDefault,
                                       &q2) != cudaSuccess ||
      q1 != cudaDriverEntryPointSuccess || q2 != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return;
  }
  dlpg__wait64 = (dlpg__memop_fn)w;
  dlpg__write64 = (dlpg__memop_fn)v;
}

int dlpg__ipc_memops_loaded(void) {
  pthread_once(&dlpg__memops_once, dlpg__memops_load);
  return dlpg__wait64 && dlpg__write64;
}

/* The driver's result as a runtime error for dlpg__cuda_result's message. */
static cudaError_t dlpg__memop_result(CUresult r) {
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorUnknown;
}

cudaError_t dlpg__ipc_wait_ge(cudaStream_t s, const unsigned long long *word, unsigned long long v) {
  return dlpg__memop_result(dlpg__wait64((CUstream)s, (CUdeviceptr)(uintptr_t)word, v,
                                         CU_STREAM_WAIT_VALUE_GEQ));
}

cudaError_t dlpg__ipc_write(cudaStream_t s, unsigned long long *word, unsigned long long v) {
  /* The default write is preceded by a memory fence: what the stream wrote before it (a
   * kernel's part in the staging buffer) is visible to a peer that sees the value. */
  return dlpg__memop_result(dlpg__write64((CUstream)s, (CUdeviceptr)(uintptr_t)word, v,
                                          CU_STREAM_WRITE_VALUE_DEFAULT));
}

/* The step counters a rank publishes to every peer (its in_ready or in_done word there),
 * and the waits on its own words the peers publish. */
dlpg_status_t dlpg__ipc_tell(const char *fn, const dlpg__ipc_t *ipc, const dlpg__ipc_step_t *p,
                             cudaStream_t s, int done, unsigned long long t) {
  for (int q = 0; q < ipc->size; q++) {
    if (q == ipc->rank) continue;
    dlpg__ipc_flags_t *f = p->flags[q];
    DLPG_CHECK(dlpg__cuda_result(dlpg__ipc_write(s, done ? &f->in_done[ipc->rank] : &f->in_ready[ipc->rank], t),
                                 fn, "cuStreamWriteValue64 (CUDA IPC)"));
  }
  return DLPG_OK;
}

dlpg_status_t dlpg__ipc_await(const char *fn, const dlpg__ipc_t *ipc, const dlpg__ipc_step_t *p,
                              cudaStream_t s, int done, unsigned long long t, int all) {
  dlpg__ipc_flags_t *mine = p->flags[ipc->rank];
  for (int q = 0; q < ipc->size; q++) {
    if (q == ipc->rank || !(all || dlpg__ipc_reads(p, q))) continue;
    DLPG_CHECK(dlpg__cuda_result(dlpg__ipc_wait_ge(s, done ? &mine->in_done[q] : &mine->in_ready[q], t),
                                 fn, "cuStreamWaitValue64 (CUDA IPC)"));
  }
  return DLPG_OK;
}
