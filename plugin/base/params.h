/* Every environment variable dlpg reads, declared once (model: NCCL_PARAM). No getenv()
 * anywhere else. DLPG_* tuning variables are read once and cached; the launcher's
 * variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) are read at each use, because they
 * describe the job rather than tune the library. */
#ifndef DLPG_BASE_PARAMS_H_
#define DLPG_BASE_PARAMS_H_

#include <stdio.h>

#include "base/timeout.h" /* DLPG__DEFAULT_TIMEOUT_STR */

#ifdef __cplusplus
extern "C" {
#endif

/* X(id, env name, default as a string or NULL, cached?, description) */
#define DLPG__PARAM_MAP(X)                                                                   \
  X(TIMEOUT, "DLPG_TIMEOUT", DLPG__DEFAULT_TIMEOUT_STR, 1, "seconds before any blocking step fails")             \
  X(GROUP_NAME, "DLPG_GROUP_NAME", "dlpg", 1, "default store key prefix of a group")         \
  X(STORE_PORT, "DLPG_STORE_PORT", NULL, 0, "env:// store port (default MASTER_PORT + 1)")   \
  X(STORE_BIND, "DLPG_STORE_BIND", NULL, 0, "env:// rank 0's server address (default MASTER_ADDR's; * = every interface)") \
  X(STORE_TOKEN, "DLPG_STORE_TOKEN", NULL, 0, "shared secret of the TCP store, server and clients (never printed)") \
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
  X(DEBUG, "DLPG_DEBUG", "WARN", 1, "log level: NONE, WARN, INFO or TRACE")                  \
  X(DEBUG_SUBSYS, "DLPG_DEBUG_SUBSYS", "ALL", 1, "comma list: INIT,STORE,COLL,P2P,GLOO,NCCL") \
  X(GLOO_HOSTNAME, "DLPG_GLOO_HOSTNAME", NULL, 1, "address Gloo binds to (default: the store host's route)") \
  X(GLOO_IFACE, "DLPG_GLOO_IFACE", NULL, 1, "network interface Gloo binds to")               \
  X(NCCL_COMM_MODE, "DLPG_NCCL_COMM_MODE", NULL, 1, "split (default): non-blocking init (deadline-polled), ops on a blocking ncclCommSplit child; nonblocking: ops on the non-blocking communicator (~70 us more per op); blocking: blocking init, no deadline inside NCCL") \
  X(NCCL_BLOCKING_INIT, "DLPG_NCCL_BLOCKING_INIT", "0", 1, "deprecated: 1 means DLPG_NCCL_COMM_MODE=blocking when that is unset") \
  X(NCCL_RUNTIME_CONNECT, "NCCL_RUNTIME_CONNECT", NULL, 0, "NCCL's own variable; dlpg sets 0 when it is unset, so collective connections are made inside the deadline-polled creation") \
  X(NCCL_BACKEND, "DLPG_NCCL_BACKEND", NULL, 1, "path of the NCCL backend module (default: libdlpg_nccl.so beside libdlpg.so)") \
  X(FLIGHT_RECORDER_ENTRIES, "DLPG_FLIGHT_RECORDER_ENTRIES", "64", 1, "operations each group's flight recorder keeps (0: none)") \
  X(PROPAGATE_FAILURES, "DLPG_PROPAGATE_FAILURES", "1", 1, "0: a rank's failure is not recorded in the store for its peers") \
  X(RANK, "RANK", NULL, 0, "launcher: this process's rank")                                  \
  X(WORLD_SIZE, "WORLD_SIZE", NULL, 0, "launcher: number of ranks")                          \
  X(MASTER_ADDR, "MASTER_ADDR", NULL, 0, "launcher: host of rank 0")                         \
  X(MASTER_PORT, "MASTER_PORT", NULL, 0, "launcher: torchrun's store port")

typedef enum dlpg__param_id {
#define DLPG__PARAM_ENUM(id, env, def, cached, desc) DLPG__PARAM_##id,
  DLPG__PARAM_MAP(DLPG__PARAM_ENUM)
#undef DLPG__PARAM_ENUM
  DLPG__PARAM_COUNT
} dlpg__param_id_t;

/* The variable's name ("DLPG_TIMEOUT"). */
const char *dlpg__param_env_name(dlpg__param_id_t id);
/* The value (environment, else default); NULL when unset with no default. */
const char *dlpg__param_str(dlpg__param_id_t id);
/* 1 and the parsed value when set and numeric; 0 when unset or unparsable (a warning is
 * logged for unparsable values). */
int dlpg__param_double(dlpg__param_id_t id, double *out);
int dlpg__param_long(dlpg__param_id_t id, long *out);
/* Set the parameter's variable to value in the process environment unless it is already
 * set (for variables another library reads, such as NCCL's). Returns 1 if it set it. */
int dlpg__param_default_env(dlpg__param_id_t id, const char *value);
/* Print every parameter with its value, default and description (dlpg-info). */
void dlpg__params_print(FILE *f);

#ifdef __cplusplus
}
#endif
#endif
