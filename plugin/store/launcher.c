/* Launcher detection (launcher.h): each launcher's variables in one table, read in order of
 * precedence, then the store address by the rules of launcher.h. Messages name the
 * variables as the user sets them. */
#include "store/launcher.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/params.h"
#include "base/status.h"

/* One launcher's variables. Alternatives are read in order, the first set one counts. */
typedef struct dlpg__launcher_spec {
  const char *name;
  const char *rank;
  const char *size[3];
  const char *local_rank;
  const char *local_size;
  const char *job_id[2];
} dlpg__launcher_spec_t;

/* torchrun first: a user who sets RANK and WORLD_SIZE under another launcher means them.
 * Open MPI and MPICH before Slurm: mpirun/mpiexec inside an allocation inherits the
 * allocation's SLURM_* variables, and the MPI launcher's are the ones of this job. */
static const dlpg__launcher_spec_t dlpg__launchers[] = {
    {"torchrun", "RANK", {"WORLD_SIZE"}, "LOCAL_RANK", "LOCAL_WORLD_SIZE", {NULL}},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", {"OMPI_COMM_WORLD_SIZE"}, "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"}},
    {"MPICH", "PMI_RANK", {"PMI_SIZE"}, "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
     {"PMIX_NAMESPACE"}},
    {"Slurm", "SLURM_PROCID", {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"},
     "SLURM_LOCALID", NULL, {NULL}},
};
#define DLPG__NLAUNCHERS ((int)(sizeof dlpg__launchers / sizeof dlpg__launchers[0]))

typedef struct dlpg__env {
  dlpg__launch_getenv_fn get;
  void *ctx;
} dlpg__env_t;

static const char *dlpg__var(const dlpg__env_t *e, const char *name) {
  if (!name) return NULL;
  const char *v = e->get(e->ctx, name);
  return v && *v ? v : NULL;
}

/* The first set variable of names (up to n), or NULL; *which receives its name. */
static const char *dlpg__first_var(const dlpg__env_t *e, const char *const *names, int n,
                                   const char **which) {
  for (int i = 0; i < n && names[i]; ++i) {
    const char *v = dlpg__var(e, names[i]);
    if (v) {
      *which = names[i];
      return v;
    }
  }
  *which = names[0];
  return NULL;
}

/* v as an integer in [lo, hi] into *out; an error naming the variable otherwise. */
static dlpg_status_t dlpg__parse_int(const char *name, const char *v, long lo, long hi, int *out) {
  char *end = NULL;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > hi)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s is \"%s\", not an integer in [%ld, %ld]",
                       name, v, lo, hi);
  *out = (int)x;
  return DLPG_OK;
}

/* Variable name as an integer in [lo, hi], or -1 when unset. */
static dlpg_status_t dlpg__int_var(const dlpg__env_t *e, const char *name, long lo, int *out) {
  *out = -1;
  const char *v = dlpg__var(e, name);
  return v ? dlpg__parse_int(name, v, lo, 0x7fffffffL, out) : DLPG_OK;
}

int dlpg__nodelist_first(const char *list, char *out, size_t cap) {
  if (!list || !*list || !out || cap == 0) return -1;
  size_t o = 0;
  for (const char *p = list; *p && *p != ','; ++p) {
    if (*p == '[') {
      /* The first entry of the range list: digits up to '-', ',' or ']'. */
      const char *q = p + 1, *b = q;
      while (*q >= '0' && *q <= '9') ++q;
      if (q == b || (*q != '-' && *q != ',' && *q != ']')) return -1;
      const char *close = strchr(q, ']');
      if (!close || (size_t)(q - b) + o >= cap) return -1;
      memcpy(out + o, b, (size_t)(q - b));
      o += (size_t)(q - b);
      p = close;
      continue;
    }
    if (*p == ']' || o + 1 >= cap) return -1;
    out[o++] = *p;
  }
  out[o] = '\0';
  return o ? 0 : -1;
}

int dlpg__launch_port(const char *job_id) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (const unsigned char *p = (const unsigned char *)job_id; p && *p; ++p) {
    h ^= *p;
    h *= 16777619u;
  }
  return 10000 + (int)(h % 22000u);
}

/* Rank, size and local place of the launcher spec names. */
static dlpg_status_t dlpg__read_place(const dlpg__env_t *e, const dlpg__launcher_spec_t *s,
                                      dlpg__launch_t *out) {
  const char *size_var = NULL;
  const char *sv = dlpg__first_var(e, s->size, 3, &size_var);
  DLPG_CHECK(dlpg__int_var(e, s->rank, 0, &out->rank));
  if (sv) DLPG_CHECK(dlpg__parse_int(size_var, sv, 1, 0x7fffffffL, &out->size));
  DLPG_CHECK(dlpg__int_var(e, s->local_rank, 0, &out->local_rank));
  DLPG_CHECK(dlpg__int_var(e, s->local_size, 1, &out->local_size));
  if (out->rank >= 0 && out->size >= 1 && out->rank >= out->size)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s is %d but %s is %d (the rank must be "
                       "below the number of ranks)", s->rank, out->rank, size_var, out->size);
  return DLPG_OK;
}

/* The job's id as the launcher spells it ("" when it has none); Slurm's is job.step. */
static void dlpg__job_id(const dlpg__env_t *e, const dlpg__launcher_spec_t *s, long ppid,
                         char *id, size_t cap, char *how, size_t hcap) {
  id[0] = '\0';
  if (s && !strcmp(s->name, "Slurm")) {
    const char *job = dlpg__var(e, "SLURM_JOB_ID"), *step = dlpg__var(e, "SLURM_STEP_ID");
    if (job) {
      snprintf(id, cap, "%s.%s", job, step ? step : "batch");
      snprintf(how, hcap, "SLURM_JOB_ID.SLURM_STEP_ID %s", id);
      return;
    }
  }
  for (int i = 0; s && i < 2 && s->job_id[i]; ++i) {
    const char *v = dlpg__var(e, s->job_id[i]);
    if (v) {
      snprintf(id, cap, "%s", v);
      snprintf(how, hcap, "%s %s", s->job_id[i], v);
      return;
    }
  }
  /* The ranks of one host are the children of one launcher process (mpirun's or srun's
   * daemon, Hydra's proxy, torchrun's agent). */
  snprintf(id, cap, "ppid-%ld", ppid);
  snprintf(how, hcap, "the parent process id %ld (no job id variable is set)", ppid);
}

/* Whether the launcher says that every rank of the job runs on this host. */
static int dlpg__all_local(const dlpg__env_t *e, const dlpg__launch_t *l) {
  if (l->size == 1) return 1;
  if (l->local_size >= 1 && l->local_size == l->size) return 1;
  if (l->launcher && !strcmp(l->launcher, "Slurm")) {
    const char *names[] = {"SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"};
    const char *which = NULL;
    const char *nodes = dlpg__first_var(e, names, 3, &which);
    if (nodes && !strcmp(nodes, "1")) return 1;
    const char *per = dlpg__var(e, "SLURM_NTASKS_PER_NODE");
    if (per && l->size >= 1 && atoi(per) == l->size) return 1;
  }
  return 0;
}

/* The port: DLPG_STORE_PORT, else MASTER_PORT + 1, else (derive) from the job id. */
static dlpg_status_t dlpg__port(const dlpg__env_t *e, const dlpg__launcher_spec_t *s, long ppid,
                                int derive, dlpg__launch_t *out, char *how, size_t hcap) {
  const char *v = dlpg__var(e, "DLPG_STORE_PORT");
  if (v) {
    snprintf(how, hcap, "port DLPG_STORE_PORT");
    return dlpg__parse_int("DLPG_STORE_PORT", v, 1, 65535, &out->port);
  }
  if ((v = dlpg__var(e, "MASTER_PORT"))) {
    int mp = 0;
    DLPG_CHECK(dlpg__parse_int("MASTER_PORT", v, 0, 65534, &mp));
    out->port = mp + 1;
    snprintf(how, hcap, "port MASTER_PORT + 1");
    return DLPG_OK;
  }
  if (!derive)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "env:// needs DLPG_STORE_PORT or MASTER_PORT, both unset");
  char id[300], idhow[340];
  dlpg__job_id(e, s, ppid, id, sizeof id, idhow, sizeof idhow);
  out->port = dlpg__launch_port(id);
  snprintf(how, hcap, "port %d from %s; DLPG_STORE_PORT chooses another", out->port, idhow);
  return DLPG_OK;
}

static dlpg_status_t dlpg__address(const dlpg__env_t *e, const dlpg__launcher_spec_t *s,
                                   long ppid, dlpg__launch_t *out) {
  const char *url = dlpg__var(e, "DLPG_STORE_URL");
  if (url) {
    if (strlen(url) >= sizeof out->url)
      return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "DLPG_STORE_URL has %zu bytes (at most %zu)",
                         strlen(url), sizeof out->url - 1);
    if (!strncmp(url, "env://", 6))
      return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                         "DLPG_STORE_URL is \"%s\"; it names the store itself (tcp://HOST:PORT "
                         "of a running dlpg-store), not env://", url);
    memcpy(out->url, url, strlen(url) + 1);
    snprintf(out->how, sizeof out->how, "DLPG_STORE_URL");
    return DLPG_OK;
  }
  const char *bind = dlpg__var(e, "DLPG_STORE_BIND");
  const char *addr = dlpg__var(e, "MASTER_ADDR");
  char phow[420];
  char node[256] = "";
  const char *where = NULL;
  if (addr) {
    where = "MASTER_ADDR";
    DLPG_CHECK(dlpg__port(e, s, ppid, s != NULL, out, phow, sizeof phow));
  } else if (!s) {
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "env:// needs MASTER_ADDR, which is unset, and no launcher's variables "
                       "are set (RANK/WORLD_SIZE of torchrun, OMPI_COMM_WORLD_* of Open MPI, "
                       "PMI_RANK/PMI_SIZE of MPICH, SLURM_PROCID of Slurm); or set "
                       "DLPG_STORE_URL to a running store");
  } else if (dlpg__all_local(e, out)) {
    addr = "127.0.0.1";
    where = "every rank on this host";
    DLPG_CHECK(dlpg__port(e, s, ppid, 1, out, phow, sizeof phow));
  } else if (!strcmp(s->name, "Slurm")) {
    const char *names[] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"};
    const char *which = NULL;
    const char *list = dlpg__first_var(e, names, 3, &which);
    if (dlpg__nodelist_first(list, node, sizeof node) != 0)
      return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                         "Slurm job of %d ranks across hosts: %s is %s%s%s, not a node list to "
                         "take the store's host from (set MASTER_ADDR to rank 0's host, or "
                         "DLPG_STORE_URL to a running store)", out->size, which,
                         list ? "\"" : "", list ? list : "unset", list ? "\"" : "");
    addr = node;
    where = which;
    DLPG_CHECK(dlpg__port(e, s, ppid, 1, out, phow, sizeof phow));
  } else {
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "%s job of %d ranks across hosts (%d on this one): the store's host is "
                       "not known; set MASTER_ADDR to rank 0's host (and MASTER_PORT or "
                       "DLPG_STORE_PORT), or DLPG_STORE_URL to a running store (dlpg-store), "
                       "e.g. mpirun -x MASTER_ADDR=host0 -x MASTER_PORT=29500",
                       s->name, out->size, out->local_size);
  }
  if (strlen(addr) >= sizeof out->host)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s has %zu bytes (at most %zu)", where,
                       strlen(addr), sizeof out->host - 1);
  memcpy(out->host, addr, strlen(addr) + 1);
  out->serve = out->rank <= 0; /* rank 0, or a process that has no rank (env:// alone) */
  if (out->serve) {
    const char *b = bind ? bind : addr;
    if (strlen(b) >= sizeof out->bind)
      return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "DLPG_STORE_BIND has %zu bytes (at most %zu)",
                         strlen(b), sizeof out->bind - 1);
    memcpy(out->bind, b, strlen(b) + 1);
  }
  snprintf(out->how, sizeof out->how, "%s%s%s, %s", s ? s->name : "", s ? ": " : "", where, phow);
  return DLPG_OK;
}

dlpg_status_t dlpg__launch_detect(dlpg__launch_getenv_fn get, void *ctx, long ppid,
                                  int need_store, dlpg__launch_t *out) {
  memset(out, 0, sizeof *out);
  out->rank = out->size = out->local_rank = out->local_size = -1;
  dlpg__env_t e = {get, ctx};
  const dlpg__launcher_spec_t *s = NULL;
  /* A launcher is recognised by its rank variable (in a Slurm allocation's shell, outside
   * srun, SLURM_NTASKS is set but this process is no task). */
  for (int i = 0; i < DLPG__NLAUNCHERS && !s; ++i)
    if (dlpg__var(&e, dlpg__launchers[i].rank)) s = &dlpg__launchers[i];
  if (s) {
    out->launcher = s->name;
    DLPG_CHECK(dlpg__read_place(&e, s, out));
  }
  return need_store ? dlpg__address(&e, s, ppid, out) : DLPG_OK;
}

/* Only declared variables are read (base/params.h lists each with a description). */
static const char *dlpg__process_getenv(void *ctx, const char *name) {
  (void)ctx;
  for (int i = 0; i < DLPG__PARAM_COUNT; ++i)
    if (!strcmp(dlpg__core_params[i].env, name)) return dlpg__param_get(&dlpg__core_params[i]);
  return NULL;
}

dlpg_status_t dlpg__launch_detect_env(int need_store, dlpg__launch_t *out) {
  return dlpg__launch_detect(dlpg__process_getenv, NULL, (long)getppid(), need_store, out);
}
