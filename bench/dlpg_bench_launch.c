/* One rank of a job a launcher started: which launcher, this process's rank, and the store
 * the ranks meet at. Kept to bench_job_detect so a library-level detection can replace it.
 *
 *   torchrun (or any script setting its variables): RANK, WORLD_SIZE, LOCAL_RANK, and the
 *     env:// store on MASTER_ADDR (rank 0 serves it one port above MASTER_PORT).
 *   mpirun (Open MPI): OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK. With MASTER_ADDR and
 *     MASTER_PORT (mpirun -x ...) the env:// store as above. Without them, when every rank
 *     is on this host (OMPI_COMM_WORLD_LOCAL_SIZE == _SIZE), rank 0 serves a TCP store on
 *     127.0.0.1 port 0 and publishes the port in a file named after the job
 *     (OMPI_MCA_ess_base_jobid) in $TMPDIR or /tmp, which the other ranks read; a job
 *     spanning hosts needs MASTER_ADDR and MASTER_PORT. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "dlpg_bench.h"

static int env_int(const char *name, int lo, int *out) {
  const char *v = getenv(name);
  if (!v || !*v) return 0;
  char *end = NULL;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || end == v || *end || x < lo || x > (1L << 30)) {
    fprintf(stderr, "dlpg-bench: %s='%s' is not an integer >= %d\n", name, v, lo);
    return -1;
  }
  *out = (int)x;
  return 1;
}

/* rank/world/local from three variables; 1 found, 0 absent, -1 malformed. */
static int read_triple(const char *rv, const char *wv, const char *lv, bench_job_t *j) {
  int hr = env_int(rv, 0, &j->rank), hw = env_int(wv, 1, &j->world);
  if (hr < 0 || hw < 0) return -1;
  if (!hr && !hw) return 0;
  if (!hr || !hw) {
    fprintf(stderr, "dlpg-bench: %s is set but %s is not\n", hr ? rv : wv, hr ? wv : rv);
    return -1;
  }
  if (j->rank >= j->world) {
    fprintf(stderr, "dlpg-bench: %s=%d is outside [0, %s=%d)\n", rv, j->rank, wv, j->world);
    return -1;
  }
  j->local_rank = j->rank;
  if (env_int(lv, 0, &j->local_rank) < 0) return -1;
  return 1;
}

int bench_job_detect(bench_job_t *j) {
  memset(j, 0, sizeof *j);
  int f = read_triple("RANK", "WORLD_SIZE", "LOCAL_RANK", j);
  if (f < 0) return -1;
  if (f > 0) {
    j->via = "torchrun";
    if (!getenv("MASTER_ADDR") || !getenv("MASTER_PORT")) {
      fprintf(stderr, "dlpg-bench: RANK and WORLD_SIZE are set but MASTER_ADDR or MASTER_PORT "
                      "is not (torchrun sets all four)\n");
      return -1;
    }
    snprintf(j->url, sizeof j->url, "env://");
    return 1;
  }
  f = read_triple("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", j);
  if (f <= 0) return f;
  j->via = "mpirun";
  char buf[16];
  snprintf(buf, sizeof buf, "%d", j->rank);
  /* env:// decides who serves from RANK. */
  setenv("RANK", buf, 1);
  if (getenv("MASTER_ADDR") && getenv("MASTER_PORT")) {
    snprintf(j->url, sizeof j->url, "env://");
    return 1;
  }
  int local_size = 0;
  if (env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1, &local_size) < 0) return -1;
  const char *job = getenv("OMPI_MCA_ess_base_jobid");
  if (local_size != j->world || !job || !*job || strchr(job, '/')) {
    fprintf(stderr, "dlpg-bench: under mpirun across hosts (OMPI_COMM_WORLD_LOCAL_SIZE=%d of "
                    "%d ranks) set MASTER_ADDR and MASTER_PORT (mpirun -x MASTER_ADDR=host "
                    "-x MASTER_PORT=port) for the store\n", local_size, j->world);
    return -1;
  }
  const char *tmp = getenv("TMPDIR");
  snprintf(j->port_file, sizeof j->port_file, "%s/dlpg-bench-%s.port",
           tmp && *tmp ? tmp : "/tmp", job);
  return 1;
}

static int fail(const bench_job_t *j, const char *what, const char *url, dlpg_status_t st) {
  fprintf(stderr, "dlpg-bench: rank %d: %s %s: %s: %s\n", j->rank, what, url,
          dlpg_status_name(st), dlpg_last_error());
  return -1;
}

/* Rank 0 of a one-host mpirun job: serve on port 0 and publish the port (written to a
 * temporary name, then renamed, so a reader never sees half a number). */
static int serve_and_publish(bench_job_t *j, double timeout_s, dlpg_store_t **store) {
  const char *url = "tcp://127.0.0.1:0?serve=1";
  int port = 0;
  dlpg_status_t st = dlpg_store_open(url, timeout_s, store);
  if (st == DLPG_OK) st = dlpg_store_port(*store, &port);
  if (st != DLPG_OK) return fail(j, "hosting the store", url, st);
  char tmp[224];
  snprintf(tmp, sizeof tmp, "%s.%d", j->port_file, (int)getpid());
  FILE *f = fopen(tmp, "w");
  int ok = f && fprintf(f, "%d\n", port) > 0;
  if (f) ok &= fclose(f) == 0;
  if (!ok || rename(tmp, j->port_file) != 0) {
    fprintf(stderr, "dlpg-bench: rank 0: cannot write the store's port to %s: %s\n",
            j->port_file, strerror(errno));
    unlink(tmp);
    return -1;
  }
  return 0;
}

/* The other ranks: wait for rank 0's file, then connect. */
static int read_published(bench_job_t *j, double timeout_s, dlpg_store_t **store) {
  double end = bench_now() + timeout_s;
  int port = 0;
  while (bench_now() < end) {
    FILE *f = fopen(j->port_file, "r");
    if (f) {
      int got = fscanf(f, "%d", &port);
      fclose(f);
      if (got == 1 && port > 0 && port < 65536) break;
      port = 0;
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  if (port == 0) {
    fprintf(stderr, "dlpg-bench: rank %d: rank 0 did not publish its store's port in %s "
                    "within %.0f s\n", j->rank, j->port_file, timeout_s);
    return -1;
  }
  char url[64];
  snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
  dlpg_status_t st = dlpg_store_open(url, timeout_s, store);
  return st == DLPG_OK ? 0 : fail(j, "dlpg_store_open", url, st);
}

int bench_job_open_store(bench_job_t *j, double timeout_s, dlpg_store_t **store) {
  *store = NULL;
  if (j->port_file[0])
    return j->rank == 0 ? serve_and_publish(j, timeout_s, store)
                        : read_published(j, timeout_s, store);
  dlpg_status_t st = dlpg_store_open(j->url, timeout_s, store);
  return st == DLPG_OK ? 0 : fail(j, "dlpg_store_open", j->url, st);
}

void bench_job_done(bench_job_t *j) {
  if (j->port_file[0] && j->rank == 0) unlink(j->port_file);
}
