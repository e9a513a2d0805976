/* dlpg demo: N local ranks (forked processes) meet on the embedded TCP store of the parent
 * and run allreduce, broadcast, allgather and a send/recv ring on CPU tensors. Each rank
 * checks its results against values it computes itself; rank 0 prints them.
 *   usage: dlpg-demo [nranks]   (default 4)
 * Started by a launcher, the process is one rank of the launcher's job (it forks nothing)
 * and meets the others through dlpg_group_create_from_env, which finds the store:
 *   python3 -m torch.distributed.run --nproc_per_node 4 --no_python dlpg-demo
 *   mpirun -np 4 dlpg-demo            (Open MPI; MPICH's mpiexec alike)
 *   srun -n 4 dlpg-demo               (Slurm) */
#include <dlpg/dlpg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define N 4 /* elements per rank */

static DLTensor cpu_tensor(float *data, int64_t *shape) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = 1;
  t.dtype.code = kDLFloat;
  t.dtype.bits = 32;
  t.dtype.lanes = 1;
  t.shape = shape;
  return t;
}

static int fail(int rank, const char *what, dlpg_status_t st) {
  fprintf(stderr, "rank %d: %s failed: %s: %s\n", rank, what, dlpg_status_name(st), dlpg_last_error());
  return 1;
}

static void print_vec(const char *label, const float *v, int n) {
  printf("  %-28s [", label);
  for (int i = 0; i < n; i++) printf("%s%g", i ? ", " : "", v[i]);
  printf("]\n");
}

#define TRY(what, call)                              \
  do {                                               \
    dlpg_status_t st_ = (call);                      \
    if (st_ != DLPG_OK) return fail(rank, what, st_); \
  } while (0)

/* Run the demo's operations on g and destroy it; returns nonzero on a wrong result. */
static int run_ops(dlpg_group_t *g, int rank, int world) {
  int bad = 0;
  int64_t shape = N, gshape = (int64_t)N * world;
  float x[N], out[N], gathered[64 * N];
  DLTensor tx = cpu_tensor(x, &shape), tout = cpu_tensor(out, &shape);
  DLTensor tg = cpu_tensor(gathered, &gshape);
  DLTensor *px = &tx, *pout = &tout, *pg = &tg;

  /* allreduce: element i of rank r holds r*10 + i; the sum is 10*sum(r) + world*i. */
  for (int i = 0; i < N; i++) x[i] = (float)(rank * 10 + i);
  TRY("dlpg_allreduce", dlpg_allreduce(g, &px, &pout, 1, DLPG_SUM, NULL, NULL));
  for (int i = 0; i < N; i++) bad |= out[i] != (float)(10 * world * (world - 1) / 2 + world * i);
  if (rank == 0) print_vec("allreduce(sum) of r*10+i:", out, N);

  /* broadcast from the last rank, in place. */
  int root = world - 1;
  for (int i = 0; i < N; i++) x[i] = rank == root ? (float)(100 + i) : -1.0f;
  TRY("dlpg_broadcast", dlpg_broadcast(g, &px, NULL, 1, root, NULL, NULL));
  for (int i = 0; i < N; i++) bad |= x[i] != (float)(100 + i);
  if (rank == 0) print_vec("broadcast from last rank:", x, N);

  /* allgather: every rank contributes its rank number N times. */
  for (int i = 0; i < N; i++) x[i] = (float)rank;
  TRY("dlpg_allgather", dlpg_allgather(g, &px, &pg, 1, NULL, NULL));
  for (int i = 0; i < N * world; i++) bad |= gathered[i] != (float)(i / N);
  if (rank == 0) print_vec("allgather of ranks:", gathered, N * world);

  /* send/recv ring inside one batch, so the pairs cannot deadlock. */
  if (world > 1) {
    for (int i = 0; i < N; i++) x[i] = (float)(1000 * rank + i);
    dlpg_work_t *ws = NULL, *wr = NULL;
    TRY("dlpg_group_start", dlpg_group_start(g));
    TRY("dlpg_send", dlpg_send(g, px, (rank + 1) % world, 7, NULL, &ws));
    TRY("dlpg_recv", dlpg_recv(g, pout, (rank + world - 1) % world, 7, NULL, &wr));
    TRY("dlpg_group_end", dlpg_group_end(g));
    TRY("send wait", dlpg_work_wait(ws, 0));
    TRY("recv wait", dlpg_work_wait(wr, 0));
    dlpg_work_free(ws);
    dlpg_work_free(wr);
    int prev = (rank + world - 1) % world;
    for (int i = 0; i < N; i++) bad |= out[i] != (float)(1000 * prev + i);
    if (rank == 0) print_vec("rank 0 received from last:", out, N);
  }
  TRY("dlpg_barrier", dlpg_barrier(g, NULL));
  dlpg_group_destroy(g);
  if (bad) fprintf(stderr, "rank %d: WRONG RESULT\n", rank);
  return bad;
}

static int run_rank(int port, int rank, int world) {
  char url[64];
  snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
  dlpg_store_t *store = NULL;
  dlpg_group_t *g = NULL;
  TRY("dlpg_store_open", dlpg_store_open(url, 30, &store));
  dlpg_group_options_t opt = DLPG_GROUP_OPTIONS_INIT;
  opt.timeout_s = 60;
  opt.name = "demo";
  TRY("dlpg_group_create", dlpg_group_create(store, rank, world, &opt, &g));
  dlpg_store_close(store); /* the group holds its own reference */
  return run_ops(g, rank, world);
}

/* One rank of a job started by a launcher (torchrun, mpirun, mpiexec, srun). */
static int run_from_env(void) {
  dlpg_group_t *g = NULL;
  int rank = -1, world = 0;
  dlpg_group_options_t opt = DLPG_GROUP_OPTIONS_INIT;
  opt.timeout_s = 60;
  TRY("dlpg_group_create_from_env", dlpg_group_create_from_env(&opt, &g));
  dlpg_group_rank(g, &rank);
  dlpg_group_size(g, &world);
  if (rank == 0) printf("rank 0 of %d (from the launcher's environment):\n", world);
  int bad = run_ops(g, rank, world);
  if (!bad) printf("rank %d: results checked: OK\n", rank);
  return bad;
}

/* Whether a launcher started this process: the rank variable of torchrun, Open MPI, MPICH
 * or Slurm is set (dlpg_group_create_from_env reads the rest). */
static int launched(void) {
  static const char *const vars[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    if (getenv(vars[i]) && *getenv(vars[i])) return 1;
  return 0;
}

int main(int argc, char **argv) {
  if (launched()) return run_from_env();
  int world = argc > 1 ? atoi(argv[1]) : 4;
  if (world < 1 || world > 64) {
    fprintf(stderr, "usage: %s [nranks 1..64]\n", argv[0]);
    return 2;
  }
  const char *info = "";
  dlpg_get_build_info(&info);
  printf("%s\n%d local ranks on the embedded TCP store:\n", info, world);
  fflush(stdout);
  dlpg_store_t *server = NULL;
  if (dlpg_store_open("tcp://127.0.0.1:0?serve=1", 30, &server) != DLPG_OK) {
    fprintf(stderr, "cannot start the store: %s\n", dlpg_last_error());
    return 1;
  }
  int port = 0;
  dlpg_store_port(server, &port);
  for (int r = 0; r < world; r++) {
    pid_t pid = fork();
    if (pid == 0) {
      int rc = run_rank(port, r, world);
      fflush(stdout); /* _exit skips stdio's flush, and stdout may be a pipe */
      _exit(rc);
    }
    if (pid < 0) return 1;
  }
  int failed = 0, status = 0;
  while (wait(&status) > 0) failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  dlpg_store_close(server);
  printf(failed ? "demo: FAILED\n" : "demo: every rank checked its results: OK\n");
  return failed;
}
