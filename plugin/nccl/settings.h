/* The NCCL module's settings (settings.c): its parameter declarations, which its table
 * hands core, and what they decide. */
#ifndef DLPG_NCCL_SETTINGS_H_
#define DLPG_NCCL_SETTINGS_H_

#include "core/group/backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  DLPG__NCCL_PARAM_COMM_MODE,
  DLPG__NCCL_PARAM_BLOCKING_INIT,
  DLPG__NCCL_PARAM_RUNTIME_CONNECT,
  DLPG__NCCL_PARAM_CUDA_BACKEND,
  DLPG__NCCL_PARAM_IPC_CHUNK,
  DLPG__NCCL_PARAM_IPC_WAIT,
  DLPG__NCCL_PARAM_IPC_DIRECT,
  DLPG__NCCL_PARAM_IPC_DIRECT_WAIT,
  DLPG__NCCL_NPARAMS
};
extern const dlpg__be_param_t dlpg__nccl_params[DLPG__NCCL_NPARAMS];

/* How communicators are created and used (DLPG_NCCL_COMM_MODE). */
typedef enum dlpg__nccl_mode {
  DLPG__MODE_SPLIT = 0,       /* non-blocking init + blocking ncclCommSplit child for ops */
  DLPG__MODE_NONBLOCKING = 1, /* non-blocking init, ops on the non-blocking communicator */
  DLPG__MODE_BLOCKING = 2     /* blocking init and ops (no deadline inside NCCL's init) */
} dlpg__nccl_mode_t;

/* The mode of DLPG_NCCL_COMM_MODE for a communicator of nranks NCCL ranks. When it is unset:
 * blocking if DLPG_NCCL_BLOCKING_INIT=1 or nranks == 1 (no peer to wait for), else split. */
dlpg__nccl_mode_t dlpg__nccl_mode(int nranks);

/* Whether NCCL connects collectives lazily: NCCL_RUNTIME_CONNECT not 0. Sets it to 0 first
 * when unset (once, before NCCL's first communicator). */
int dlpg__nccl_lazy_colls(void);

/* DLPG_CUDA_BACKEND: which path CUDA tensors take. */
typedef enum dlpg__cuda_path {
  DLPG__CUDA_AUTO = 0, /* NCCL, or the IPC path where ranks share a GPU (route.c) */
  DLPG__CUDA_NCCL = 1,
  DLPG__CUDA_IPC = 2
} dlpg__cuda_path_t;
dlpg__cuda_path_t dlpg__cuda_path(void);
/* DLPG_NCCL_IPC_CHUNK_BYTES: bytes of each of the IPC path's two collective buffers. */
size_t dlpg__ipc_chunk_bytes(void);
/* DLPG_NCCL_IPC_WAIT: 1 when the IPC path's waits are stream memory operations, 0 when
 * its kernels wait. */
int dlpg__ipc_wait_stream(void);
/* DLPG_NCCL_IPC_DIRECT_BYTES: the smallest collective (bytes of a rank's input or output,
 * the larger) that reads the peers' tensors in place; 0: none does. */
size_t dlpg__ipc_direct_bytes(void);
/* DLPG_NCCL_IPC_DIRECT_WAIT_US: how long a rank waits, in seconds, for its peers' hosts to
 * reach such a collective before it runs staged. */
double dlpg__ipc_direct_wait_s(void);

#ifdef __cplusplus
}
#endif
#endif
