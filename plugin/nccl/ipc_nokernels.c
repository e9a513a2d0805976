/* The CUDA IPC path's launchers in a module built without nvcc (DLPG_NO_IPC_KERNELS): never
 * reached, since ipc_state.c refuses to make the path's state then; they keep the module
 * linking with --no-undefined. */
#ifdef DLPG_NO_IPC_KERNELS
#include "nccl/ipc.h"

cudaError_t dlpg__ipc_launch_put(const dlpg__ipc_step_t *p, cudaStream_t s) {
  (void)p, (void)s;
  return cudaErrorNotSupported;
}
cudaError_t dlpg__ipc_launch_get(const dlpg__ipc_step_t *p, cudaStream_t s) {
  (void)p, (void)s;
  return cudaErrorNotSupported;
}
cudaError_t dlpg__ipc_launch_step(const dlpg__ipc_step_t *p, cudaStream_t s) {
  (void)p, (void)s;
  return cudaErrorNotSupported;
}
cudaError_t dlpg__ipc_launch_flag(unsigned long long *flag, unsigned long long v,
                                  const unsigned long long *stop, cudaStream_t s) {
  (void)flag, (void)v, (void)stop, (void)s;
  return cudaErrorNotSupported;
}
cudaError_t dlpg__ipc_launch_send(const dlpg__ipc_chunk_t *c, cudaStream_t s) {
  (void)c, (void)s;
  return cudaErrorNotSupported;
}
cudaError_t dlpg__ipc_launch_recv(const dlpg__ipc_chunk_t *c, cudaStream_t s) {
  (void)c, (void)s;
  return cudaErrorNotSupported;
}
cudaError_t dlpg__ipc_preload(void) { return cudaErrorNotSupported; }
#else
/* ISO C wants a translation unit to declare something. */
typedef int dlpg__ipc_nokernels_unused_t;
#endif
