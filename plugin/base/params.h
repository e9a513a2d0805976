/* Environment variables (model: NCCL_PARAM), each declared once, by its owner: core declares
 * its own and the launcher's below; a backend declares its own in its folder as an array of
 * dlpg__param_decl_t and registers it (dlpg__params_register), so dlpg-info lists every
 * variable and a read of a cached one reads the environment once. No getenv() anywhere but
 * params.c. Tuning variables are read once and cached; the launcher's (RANK, WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT, mpirun's and Slurm's) and variables other libraries read are read at each use, because
 * a host may set them after loading the library. */
#ifndef DLPG_BASE_PARAMS_H_
#define DLPG_BASE_PARAMS_H_

#include <stdio.h>

#include "base/timeout.h" /* DLPG__DEFAULT_TIMEOUT_STR */

#ifdef __cplusplus
extern "C" {
#endif

/* flags of a declaration */
#define DLPG__PARAM_CACHED 1u /* read from the environment once, then kept */
#define DLPG__PARAM_SECRET 2u /* its value is never printed */

/* One variable. A backend's table is a static array of these; the pointer to an entry is
 * how the owner reads it. */
typedef struct dlpg__param_decl {
  const char *env;  /* "DLPG_TIMEOUT" */
  const char *def;  /* default as a string, or NULL: unset */
  unsigned flags;   /* DLPG__PARAM_CACHED | DLPG__PARAM_SECRET */
  const char *desc; /* one line, printed by dlpg-info */
} dlpg__param_decl_t;

/* Register owner's table ("gloo", "nccl"): dlpg__params_print lists it under owner, and
 * cached entries are kept from their first read on. decls must live as long as the process
 * (a module is never unloaded once registered). Registering the same table again is a
 * no-op. Returns 0, or -1 (with a warning) when the registry is full or a variable is
 * already declared by another owner. Any thread, any time (a module is loaded late). */
int dlpg__params_register(const char *owner, const dlpg__param_decl_t *decls, int n);

/* Reads by declaration. A declaration that is not part of a registered table is read from
 * the environment at each use. */
/* The value (environment, else default); NULL when unset with no default. */
const char *dlpg__param_get(const dlpg__param_decl_t *p);
/* 1 and the parsed value when set and numeric; 0 when unset or unparsable (one warning per
 * variable is logged for unparsable values). */
int dlpg__param_get_double(const dlpg__param_decl_t *p, double *out);
int dlpg__param_get_long(const dlpg__param_decl_t *p, long *out);
/* As dlpg__param_get_double, also refusing a value below min (or equal to it unless
 * min_allowed) or not finite; the warning names accepted ("a number of seconds > 0"). */
int dlpg__param_get_double_min(const dlpg__param_decl_t *p, double min, int min_allowed,
                               const char *accepted, double *out);
/* Warn that p's value (or, when part is non-NULL, that part of it) is ignored, naming the
 * variable, the value and the accepted values: once per variable for the life of the
 * process, however often it is read. For an owner whose rule goes beyond a number (a list
 * of names); the getters above warn through it. */
void dlpg__param_reject(const dlpg__param_decl_t *p, const char *value, const char *part,
                        const char *accepted);
/* Set p's variable in the process environment unless it is already set (for variables
 * another library reads, such as NCCL's). Returns 1 if it set it. */
int dlpg__param_set_default_env(const dlpg__param_decl_t *p, const char *value);

/* Print every registered variable, owner by owner, with its value, default and
 * description (dlpg-info). Secret values print as "(hidden)". */
void dlpg__params_print(FILE *f);

/* Core's own variables and the launcher's.
 * X(id, env name, default as a string or NULL, flags, description) */
#define DLPG__PARAM_MAP(X)                                                                   \
  X(TIMEOUT, "DLPG_TIMEOUT", DLPG__DEFAULT_TIMEOUT_STR, DLPG__PARAM_CACHED, "seconds before any blocking step fails") \
  X(GROUP_NAME, "DLPG_GROUP_NAME", "dlpg", DLPG__PARAM_CACHED, "default store key prefix of a group") \
  X(STORE_PORT, "DLPG_STORE_PORT", NULL, 0, "env:// store port (default MASTER_PORT + 1)")   \
  X(STORE_BIND, "DLPG_STORE_BIND", NULL, 0, "env:// rank 0's server address (default MASTER_ADDR's; * = every interface)") \
  X(STORE_TOKEN, "DLPG_STORE_TOKEN", NULL, DLPG__PARAM_SECRET, "shared secret of the TCP store, server and clients (never printed)") \
  X(STORE_MAX_CONNS, "DLPG_STORE_MAX_CONNS", "16384", 0, "store server: connections in total (also kept below RLIMIT_NOFILE)") \
  X(STORE_MAX_CONNS_PER_PEER, "DLPG_STORE_MAX_CONNS_PER_PEER", "4096", 0, "store server: connections from one address") \
  X(STORE_MAX_REPLY_BYTES, "DLPG_STORE_MAX_REPLY_BYTES", "1048576", 0, "store server: unread reply bytes of one connection before its requests wait") \
  X(STORE_MAX_QUEUED_BYTES, "DLPG_STORE_MAX_QUEUED_BYTES", "268435456", 0, "store server: unread reply bytes of all connections before GETs are answered busy") \
  X(STORE_MAX_BYTES, "DLPG_STORE_MAX_BYTES", "536870912", 0, "store server: key and value bytes stored") \
  X(STORE_MAX_KEYS, "DLPG_STORE_MAX_KEYS", "1048576", 0, "store server: keys stored") \
  X(STORE_MAX_KEY_BYTES, "DLPG_STORE_MAX_KEY_BYTES", "4096", 0, "store server: bytes of one key") \
  X(STORE_MAX_VALUE_BYTES, "DLPG_STORE_MAX_VALUE_BYTES", "67108864", 0, "store server: bytes of one value") \
  X(STORE_MAX_WAIT_KEYS, "DLPG_STORE_MAX_WAIT_KEYS", "16384", 0, "store server: keys in one WAIT or CHECK") \
  X(STORE_MAX_WAIT_S, "DLPG_STORE_MAX_WAIT_S", "3600", 0, "store server: longest WAIT (clients wait longer in slices)") \
  X(STORE_FRAME_TIMEOUT_S, "DLPG_STORE_FRAME_TIMEOUT_S", "30", 0, "store server: seconds to finish a frame, the handshake or a stalled reply") \
  X(STORE_IDLE_TIMEOUT_S, "DLPG_STORE_IDLE_TIMEOUT_S", "3600", 0, "store server: idle connections are closed (clients reconnect)") \
  X(STORE_FIRST_FRAME_TIMEOUT_S, "DLPG_STORE_FIRST_FRAME_TIMEOUT_S", "10", 0, "store server: seconds a new connection has to complete its first frame (with a token: the handshake)") \
  X(STORE_MAX_PENDING_BYTES, "DLPG_STORE_MAX_PENDING_BYTES", "268435456", 0, "store server: bytes of unfinished requests held for all connections (beyond: BUSY)") \
  X(DEBUG, "DLPG_DEBUG", "WARN", DLPG__PARAM_CACHED, "log level: NONE, WARN, INFO or TRACE") \
  X(DEBUG_SUBSYS, "DLPG_DEBUG_SUBSYS", "ALL", DLPG__PARAM_CACHED, "comma list of log subsystems (ALL, core's INIT,STORE,COLL,P2P and each backend's own; ^ first excludes them)") \
  X(NCCL_BACKEND, "DLPG_NCCL_BACKEND", NULL, DLPG__PARAM_CACHED, "path of the NCCL backend module (default: libdlpg_nccl.so beside libdlpg.so)") \
  X(CPU_BACKEND, "DLPG_CPU_BACKEND", "auto", 0, "host-memory tensors: auto (per group: the first backend whose locality every rank shares), or the name of a backend serving cpu") \
  X(FLIGHT_RECORDER_ENTRIES, "DLPG_FLIGHT_RECORDER_ENTRIES", "64", DLPG__PARAM_CACHED, "operations each group's flight recorder keeps (0: none)") \
  X(PROPAGATE_FAILURES, "DLPG_PROPAGATE_FAILURES", "1", DLPG__PARAM_CACHED, "0: a rank's failure is not recorded in the store for its peers") \
  X(STALL_WARN_S, "DLPG_STALL_WARN_S", NULL, DLPG__PARAM_CACHED, "seconds an operation stays blocked before one WARN names the ranks that had not reached it (default min(60, half the group's timeout); 0: off)") \
  X(DEBUG_FILE, "DLPG_DEBUG_FILE", NULL, DLPG__PARAM_CACHED, "write the log to this file instead of stderr (%h: host, %p: pid, %%: %)") \
  X(FLIGHT_RECORDER_DUMP, "DLPG_FLIGHT_RECORDER_DUMP", NULL, DLPG__PARAM_CACHED, "directory (or path prefix) where each rank writes <group>.<rank>.json, its flight record, on timeout, abort or remote failure") \
  X(RANK, "RANK", NULL, 0, "launcher: this process's rank")                                  \
  X(WORLD_SIZE, "WORLD_SIZE", NULL, 0, "launcher: number of ranks")                          \
  X(MASTER_ADDR, "MASTER_ADDR", NULL, 0, "launcher: host of rank 0")                         \
  X(MASTER_PORT, "MASTER_PORT", NULL, 0, "launcher: torchrun's store port")               \
  X(STORE_URL, "DLPG_STORE_URL", NULL, 0, "env:// and from_env: a running store's URL (else MASTER_ADDR, else the launcher's)") \
  X(LOCAL_RANK, "LOCAL_RANK", NULL, 0, "launcher (torchrun): rank on this host")             \
  X(LOCAL_WORLD_SIZE, "LOCAL_WORLD_SIZE", NULL, 0, "launcher (torchrun): ranks on this host") \
  X(OMPI_RANK, "OMPI_COMM_WORLD_RANK", NULL, 0, "launcher (Open MPI): this process's rank")   \
  X(OMPI_SIZE, "OMPI_COMM_WORLD_SIZE", NULL, 0, "launcher (Open MPI): number of ranks")       \
  X(OMPI_LOCAL_RANK, "OMPI_COMM_WORLD_LOCAL_RANK", NULL, 0, "launcher (Open MPI): rank on this host") \
  X(OMPI_LOCAL_SIZE, "OMPI_COMM_WORLD_LOCAL_SIZE", NULL, 0, "launcher (Open MPI): ranks on this host") \
  X(OMPI_JOBID, "OMPI_MCA_ess_base_jobid", NULL, 0, "launcher (Open MPI): job id (names the store port)") \
  X(PMIX_NAMESPACE, "PMIX_NAMESPACE", NULL, 0, "launcher (PMIx): job id (names the store port)") \
  X(PMI_RANK, "PMI_RANK", NULL, 0, "launcher (MPICH/Hydra): this process's rank")             \
  X(PMI_SIZE, "PMI_SIZE", NULL, 0, "launcher (MPICH/Hydra): number of ranks")                 \
  X(MPI_LOCALRANKID, "MPI_LOCALRANKID", NULL, 0, "launcher (MPICH/Hydra): rank on this host") \
  X(MPI_LOCALNRANKS, "MPI_LOCALNRANKS", NULL, 0, "launcher (MPICH/Hydra): ranks on this host") \
  X(SLURM_PROCID, "SLURM_PROCID", NULL, 0, "launcher (Slurm): this task's rank")             \
  X(SLURM_STEP_NUM_TASKS, "SLURM_STEP_NUM_TASKS", NULL, 0, "launcher (Slurm): tasks of the step") \
  X(SLURM_NTASKS, "SLURM_NTASKS", NULL, 0, "launcher (Slurm): tasks (when SLURM_STEP_NUM_TASKS is unset)") \
  X(SLURM_NPROCS, "SLURM_NPROCS", NULL, 0, "launcher (Slurm): tasks (older name)")           \
  X(SLURM_LOCALID, "SLURM_LOCALID", NULL, 0, "launcher (Slurm): task's rank on this node")   \
  X(SLURM_JOB_ID, "SLURM_JOB_ID", NULL, 0, "launcher (Slurm): job id (names the store port)") \
  X(SLURM_STEP_ID, "SLURM_STEP_ID", NULL, 0, "launcher (Slurm): step id (names the store port)") \
  X(SLURM_STEP_NUM_NODES, "SLURM_STEP_NUM_NODES", NULL, 0, "launcher (Slurm): nodes of the step") \
  X(SLURM_JOB_NUM_NODES, "SLURM_JOB_NUM_NODES", NULL, 0, "launcher (Slurm): nodes of the job") \
  X(SLURM_NNODES, "SLURM_NNODES", NULL, 0, "launcher (Slurm): nodes (older name)")           \
  X(SLURM_NTASKS_PER_NODE, "SLURM_NTASKS_PER_NODE", NULL, 0, "launcher (Slurm): tasks per node") \
  X(SLURM_STEP_NODELIST, "SLURM_STEP_NODELIST", NULL, 0, "launcher (Slurm): the step's nodes (the first hosts the store)") \
  X(SLURM_JOB_NODELIST, "SLURM_JOB_NODELIST", NULL, 0, "launcher (Slurm): the job's nodes")   \
  X(SLURM_NODELIST, "SLURM_NODELIST", NULL, 0, "launcher (Slurm): the job's nodes (older name)")

typedef enum dlpg__param_id {
#define DLPG__PARAM_ENUM(id, env, def, flags, desc) DLPG__PARAM_##id,
  DLPG__PARAM_MAP(DLPG__PARAM_ENUM)
#undef DLPG__PARAM_ENUM
  DLPG__PARAM_COUNT
} dlpg__param_id_t;

/* Core's table (registered as "core" from the start), indexed by dlpg__param_id_t. */
extern const dlpg__param_decl_t dlpg__core_params[DLPG__PARAM_COUNT];

/* Core's reads by id: the functions above on &dlpg__core_params[id]. */
/* The variable's name ("DLPG_TIMEOUT"). */
const char *dlpg__param_env_name(dlpg__param_id_t id);
const char *dlpg__param_str(dlpg__param_id_t id);
int dlpg__param_double(dlpg__param_id_t id, double *out);
int dlpg__param_long(dlpg__param_id_t id, long *out);
int dlpg__param_double_min(dlpg__param_id_t id, double min, int min_allowed,
                           const char *accepted, double *out);
void dlpg__param_reject_id(dlpg__param_id_t id, const char *value, const char *part,
                           const char *accepted);

#ifdef __cplusplus
}
#endif
#endif
