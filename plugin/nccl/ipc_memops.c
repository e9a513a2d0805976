/* The stream memory operations of the CUDA IPC path's stream-wait mode (ipc.h): a wait on
 * and a write of a 64-bit counter, queued on a stream like a kernel. They come from the
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
