/* The NCCL module's own settings, declared here and nowhere else: its table lists them
 * (dlpg-info prints them once the module is loaded) and core reads them for it, once each,
 * through the host table. DLPG_NCCL_BACKEND, which says where this module is, stays core's:
 * it is read before the module exists. */
#include "nccl/settings.h"

#include <pthread.h>
#include <string.h>

#include "nccl/host.h"

const dlpg__be_param_t dlpg__nccl_params[DLPG__NCCL_NPARAMS] = {
    [DLPG__NCCL_PARAM_COMM_MODE] = {"DLPG_NCCL_COMM_MODE", NULL, DLPG__BE_PARAM_CACHED,
        "split (default): non-blocking init (deadline-polled), ops on a blocking ncclCommSplit "
        "child (unset: a communicator of one NCCL rank, with no peer to wait for, is blocking); "
        "nonblocking: ops on the non-blocking communicator (~70 us more per op); "
        "blocking: blocking init, no deadline inside NCCL"},
    [DLPG__NCCL_PARAM_BLOCKING_INIT] = {"DLPG_NCCL_BLOCKING_INIT", "0", DLPG__BE_PARAM_CACHED,
        "deprecated: 1 means DLPG_NCCL_COMM_MODE=blocking when that is unset"},
    [DLPG__NCCL_PARAM_RUNTIME_CONNECT] = {"NCCL_RUNTIME_CONNECT", NULL, 0,
        "NCCL's own variable; dlpg sets 0 when it is unset, so collective connections are made "
        "inside the deadline-polled creation"},
    [DLPG__NCCL_PARAM_CUDA_BACKEND] = {"DLPG_CUDA_BACKEND", "auto", DLPG__BE_PARAM_CACHED,
        "auto (default): NCCL, or CUDA IPC (kernels over shared GPU memory) for a group or pair "
        "of one host in which ranks share a GPU, which NCCL refuses; nccl; ipc (ranks of one "
        "host)"},
    [DLPG__NCCL_PARAM_IPC_CHUNK] = {"DLPG_NCCL_IPC_CHUNK_BYTES", "16777216", DLPG__BE_PARAM_CACHED,
        "CUDA IPC path: bytes of each of a rank's two staging buffers per group (a larger "
        "collective moves through them in steps, each a wait for the peers); every rank must "
        "use the same"},
    [DLPG__NCCL_PARAM_IPC_WAIT] = {"DLPG_NCCL_IPC_WAIT", "stream", DLPG__BE_PARAM_CACHED,
        "CUDA IPC path: how a rank waits for its peers: stream (default: stream memory "
        "operations wait, the GPU runs other processes' work meanwhile, a watchdog thread ends "
        "a wait at the group's timeout) or kernel (the kernels spin, bounded by the GPU's "
        "timer: under MPS the lowest latency, but a torch benchmark under MPS did not finish "
        "with it; without MPS each wait holds the GPU for a time slice); every rank must use "
        "the same"},
    [DLPG__NCCL_PARAM_IPC_DIRECT] = {"DLPG_NCCL_IPC_DIRECT_BYTES", "4194304", DLPG__BE_PARAM_CACHED,
        "CUDA IPC path, stream waits: a collective of at least this many bytes per rank reads "
        "the peers' tensors in place (exported with cudaIpcGetMemHandle, mapped once per "
        "allocation) instead of copying them through the staging buffers, when every rank's "
        "tensor can be exported and every rank's host reaches the operation within "
        "DLPG_NCCL_IPC_DIRECT_WAIT_US; 0: never; every rank must use the same"},
    [DLPG__NCCL_PARAM_IPC_DIRECT_WAIT] = {"DLPG_NCCL_IPC_DIRECT_WAIT_US", "10000", DLPG__BE_PARAM_CACHED,
        "CUDA IPC path: microseconds a rank's host waits for its peers' hosts at a collective "
        "that could read their tensors in place; past it the collective runs staged (so a "
        "rank never blocks on a peer busy elsewhere)"},
};

dlpg__cuda_path_t dlpg__cuda_path(void) {
  const char *m = dlpg__nccl_param_str(&dlpg__nccl_params[DLPG__NCCL_PARAM_CUDA_BACKEND]);
  if (!m || !m[0] || strcmp(m, "auto") == 0) return DLPG__CUDA_AUTO;
  if (strcmp(m, "nccl") == 0) return DLPG__CUDA_NCCL;
  if (strcmp(m, "ipc") == 0) return DLPG__CUDA_IPC;
  DLPG_NCCL_WARN(-1, "DLPG_CUDA_BACKEND=\"%s\" is not auto, nccl or ipc; using auto", m);
  return DLPG__CUDA_AUTO;
}

int dlpg__ipc_wait_stream(void) {
  const char *m = dlpg__nccl_param_str(&dlpg__nccl_params[DLPG__NCCL_PARAM_IPC_WAIT]);
  if (!m || !m[0] || strcmp(m, "stream") == 0) return 1;
  if (strcmp(m, "kernel") == 0) return 0;
  DLPG_NCCL_WARN(-1, "DLPG_NCCL_IPC_WAIT=\"%s\" is not stream or kernel; using stream", m);
  return 1;
}

size_t dlpg__ipc_chunk_bytes(void) {
  long v = 0;
  /* 16 MiB: each step waits for the peers once, which costs a switch between the ranks'
   * contexts without MPS (about 150 us on an H100), so fewer, larger steps; under MPS a
   * 16 MiB allreduce of 2 ranks took 67 us with it against 100 us with 4 MiB. The cost: two
   * buffers and 2 x ranks mailboxes of a quarter of it, per rank and group. */
  const long dflt = 16777216;
  if (!dlpg__nccl_param_long(&dlpg__nccl_params[DLPG__NCCL_PARAM_IPC_CHUNK], &v) || v < 65536) {
    if (v) DLPG_NCCL_WARN(-1, "DLPG_NCCL_IPC_CHUNK_BYTES=%ld is below 65536; using %ld", v, dflt);
    return (size_t)dflt;
  }
  /* 16-byte multiples keep every rank's part of a step aligned for vector copies. */
  return (size_t)v & ~(size_t)15;
}

size_t dlpg__ipc_direct_bytes(void) {
  long v = 0;
  if (!dlpg__nccl_param_long(&dlpg__nccl_params[DLPG__NCCL_PARAM_IPC_DIRECT], &v)) v = 4194304;
  return v < 0 ? 0 : (size_t)v;
}

double dlpg__ipc_direct_wait_s(void) {
  long v = 0;
  if (!dlpg__nccl_param_long(&dlpg__nccl_params[DLPG__NCCL_PARAM_IPC_DIRECT_WAIT], &v) || v < 0)
    v = 10000;
  return (double)v * 1e-6;
}

dlpg__nccl_mode_t dlpg__nccl_mode(int nranks) {
  const char *m = dlpg__nccl_param_str(&dlpg__nccl_params[DLPG__NCCL_PARAM_COMM_MODE]);
  if (!m) {
    long blocking = 0;
    dlpg__nccl_param_long(&dlpg__nccl_params[DLPG__NCCL_PARAM_BLOCKING_INIT], &blocking);
    /* The split buys a deadline on waiting for peers; one NCCL rank has none to wait for,
     * and the parent's creation with its eager connections costs ~40 ms (first-op bench). */
    return blocking || nranks == 1 ? DLPG__MODE_BLOCKING : DLPG__MODE_SPLIT;
  }
  if (strcmp(m, "split") == 0) return DLPG__MODE_SPLIT;
  if (strcmp(m, "nonblocking") == 0) return DLPG__MODE_NONBLOCKING;
  if (strcmp(m, "blocking") == 0) return DLPG__MODE_BLOCKING;
  DLPG_NCCL_WARN(-1, "DLPG_NCCL_COMM_MODE=\"%s\" is not split, nonblocking or blocking; using "
                 "split", m);
  return DLPG__MODE_SPLIT;
}

/* NCCL 2.22+ connects collective peers lazily, at the first operation that needs a
 * connection. On a blocking communicator that connect would wait for the peer with no
 * deadline, so unless the user chose otherwise dlpg asks NCCL to connect during creation,
 * which dlpg polls against the group's deadline (the behaviour of NCCL before 2.22). Set
 * before NCCL's first call in this process, once. */
static pthread_once_t dlpg__runtime_connect_once = PTHREAD_ONCE_INIT;
static void dlpg__runtime_connect_default(void) {
  if (dlpg__nccl_param_default_env(&dlpg__nccl_params[DLPG__NCCL_PARAM_RUNTIME_CONNECT], "0"))
    DLPG_NCCL_INFO(-1, "NCCL_RUNTIME_CONNECT unset: set to 0 (connect during creation)");
}

int dlpg__nccl_lazy_colls(void) {
  pthread_once(&dlpg__runtime_connect_once, dlpg__runtime_connect_default);
  const char *rc = dlpg__nccl_param_str(&dlpg__nccl_params[DLPG__NCCL_PARAM_RUNTIME_CONNECT]);
  return !(rc && strcmp(rc, "0") == 0);
}
