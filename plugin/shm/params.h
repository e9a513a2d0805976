/* The shared-memory backend's own environment variables and log subsystem, declared here
 * (base/params.h and base/log.h hold only core's) and handed to core in the backend's table
 * (shm/backend.h), which core registers with the registry's line: dlpg-info lists them and
 * DLPG_DEBUG_SUBSYS=SHM selects the backend's lines. */
#ifndef DLPG_SHM_PARAMS_H_
#define DLPG_SHM_PARAMS_H_

#include "base/log.h"
#include "base/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(id, env name, default as a string or NULL, flags, description) */
#define DLPG__SHM_PARAM_MAP(X)                                                               \
  X(SLOT_BYTES, "DLPG_SHM_SLOT_BYTES", "1048576", DLPG__PARAM_CACHED,                        \
    "bytes of each of a rank's two shared-memory slots (larger operations are pipelined through them)") \
  X(SPIN, "DLPG_SHM_SPIN", NULL, DLPG__PARAM_CACHED,                                         \
    "pause iterations a waiting rank spins before it sleeps on a futex (default 4000; 400 when more than 2 ranks fill over half the CPUs; 64 when ranks outnumber CPUs)") \
  X(YIELD_US, "DLPG_SHM_YIELD_US", NULL, DLPG__PARAM_CACHED,                                \
    "microseconds a waiting rank yields its CPU (sched_yield) after its spin, before it sleeps on a futex: a peer that waits for a CPU gets it at once (default 1000 when ranks outnumber CPUs, else 0)") \
  X(THREADS, "DLPG_SHM_THREADS", NULL, DLPG__PARAM_CACHED,                                 \
    "threads each rank splits the copies and reductions of its pipelined collectives (reductions above 64 KiB, others above a slot) between, its own included (default: the CPUs the process may run on divided by the ranks, at most 8; 1: none)") \
  X(P2P_SLOT_BYTES, "DLPG_SHM_P2P_SLOT_BYTES", "262144", DLPG__PARAM_CACHED,                 \
    "bytes of each chunk slot of a pair's segment (send/recv; larger messages are pipelined through 4 of them)") \
  X(P2P_STAGE_BYTES, "DLPG_SHM_P2P_STAGE_BYTES", "67108864", DLPG__PARAM_CACHED,             \
    "most bytes of small messages a rank holds per peer before their receives are posted (the sender then waits)") \
  X(STREAM_BYTES, "DLPG_SHM_STREAM_BYTES", "8388608", DLPG__PARAM_CACHED,                  \
    "output bytes from which an out-of-place allreduce or reduce writes its output with streaming (non-temporal) stores, past the caches (0: never)") \
  X(EAGER_BYTES, "DLPG_SHM_EAGER_BYTES", "65536", DLPG__PARAM_CACHED,                        \
    "most bytes a rank posts on the caller's thread when it issues an asynchronous collective (larger ones go to the group's worker thread; 0: all do)") \
  X(POOL_AREAS, "DLPG_SHM_POOL_AREAS", "256", DLPG__PARAM_CACHED,                            \
    "areas of a group's shared-memory segment that its children (dlpg_group_split, dlpg_group_create_subset) of up to 16 ranks run in, without a segment of their own (0: none; a child finding none free makes its own)")

enum {
#define DLPG__SHM_PARAM_ENUM(id, env, def, flags, desc) DLPG__SHM_PARAM_##id,
  DLPG__SHM_PARAM_MAP(DLPG__SHM_PARAM_ENUM)
#undef DLPG__SHM_PARAM_ENUM
  DLPG__SHM_PARAM_COUNT
};

extern const dlpg__param_decl_t dlpg__shm_params[DLPG__SHM_PARAM_COUNT];
#define DLPG__SHM_PARAM(id) (&dlpg__shm_params[DLPG__SHM_PARAM_##id])

/* The bit of the "SHM" log subsystem; DLPG_INFO(SHM, ...) logs under it. */
dlpg__log_subsys_t dlpg__shm_log_subsys(void);
#define DLPG__SUB_SHM dlpg__shm_log_subsys()

#ifdef __cplusplus
}
#endif
#endif
