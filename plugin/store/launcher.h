/* Which launcher started this process (torchrun, Open MPI, MPICH/Hydra, Slurm), this rank's
 * place in the job, and where the job's dlpg store is: the one place that reads launchers'
 * variables. dlpg_group_create_from_env and env:// both ask here. The detection is a pure
 * function of an environment lookup (and the parent's pid), so tests feed it made-up
 * environments; dlpg__launch_detect_env reads the process's own (through base/params.h).
 *
 * The store address, first rule that applies:
 *   DLPG_STORE_URL                 a store that already runs (dlpg-store); nobody serves
 *   MASTER_ADDR                    port DLPG_STORE_PORT, else MASTER_PORT + 1, else derived
 *                                  from the launcher's job id; rank 0 serves
 *   every rank on this host        127.0.0.1, port DLPG_STORE_PORT or derived; rank 0 serves
 *   Slurm across hosts             the step's first node, port as above; rank 0 serves
 *   otherwise                      an error naming MASTER_ADDR and DLPG_STORE_URL */
#ifndef DLPG_STORE_LAUNCHER_H_
#define DLPG_STORE_LAUNCHER_H_

#include "dlpg/dlpg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The value of variable name, or NULL when unset. */
typedef const char *(*dlpg__launch_getenv_fn)(void *ctx, const char *name);

typedef struct dlpg__launch {
  /* "torchrun", "Open MPI", "MPICH", "Slurm"; NULL: no launcher's variables are set. */
  const char *launcher;
  int rank, size;             /* -1: the launcher did not say */
  int local_rank, local_size; /* -1: the launcher did not say */
  /* DLPG_STORE_URL when set: open it as it is (then host is "" and serve 0). */
  char url[1024];
  char host[256];
  int port;
  int serve;      /* this process hosts the store server */
  char bind[256]; /* the server's address when serve (DLPG_STORE_BIND, "*": every one) */
  char how[640];  /* how the address was chosen, for messages */
} dlpg__launch_t;

/* Fill *out from the variables get returns. ppid names the job when the launcher's
 * variables carry no job id (the ranks of one host share the launcher's proxy as parent).
 * DLPG_OK with out->launcher NULL and no address when nothing is set; an address error
 * (DLPG_ERR_INVALID_ARGUMENT naming the variables) only when it is asked for: need_store. */
dlpg_status_t dlpg__launch_detect(dlpg__launch_getenv_fn get, void *ctx, long ppid,
                                  int need_store, dlpg__launch_t *out);
/* The same over this process's environment. */
dlpg_status_t dlpg__launch_detect_env(int need_store, dlpg__launch_t *out);

/* The first host of a Slurm node list ("node[03-05,7],gpu1" -> "node03"). 0, or -1 when
 * list is empty or malformed or the host does not fit in cap bytes. */
int dlpg__nodelist_first(const char *list, char *out, size_t cap);

/* The store port of a job: the same for every rank that sees job id, in [10000, 32000)
 * (below Linux's ephemeral ports, which outgoing connections take). */
int dlpg__launch_port(const char *job_id);

#ifdef __cplusplus
}
#endif
#endif
