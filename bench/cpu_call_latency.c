/* dlpg-call-latency: the per-call time of one small CPU collective through the public API,
 * issued three ways in one run: blocking (work == NULL), asynchronous with its work waited
 * for at once (dlpg_work_wait), and asynchronous with the work polled (dlpg_work_test) until
 * done. N local ranks (forked) meet through a TCP store on loopback (port 0). Each rank
 * times `iters` calls back to back, `reps` times per way (the ways interleaved, so machine
 * noise hits each alike), after a barrier; rank 0 prints the median over repetitions of
 * the per-call mean, and the same of the slowest rank. Only libdlpg.so's public API is
 * used, so one binary measures two builds of the library side by side (LD_LIBRARY_PATH).
 * Usage: dlpg-call-latency [-n ranks] [-o allreduce|broadcast|allgather|barrier]
 *                          [-b bytes] [-i iters] [-R reps] */
#include <dlpack/dlpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlpg/dlpg.h"

enum { WAY_BLOCKING, WAY_WAIT, WAY_TEST, WAY_COUNT };
static const char *const kWayName[WAY_COUNT] = {"blocking", "async+wait", "async+test"};

typedef struct opts {
  int ranks, iters, reps;
  size_t bytes;
  const char *op;
} opts_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void tensor(DLTensor *t, int64_t *shape, void *data, int64_t n) {
  memset(t, 0, sizeof *t);
  t->data = data;
  t->device.device_type = kDLCPU;
  t->ndim = 1;
  *shape = n;
  t->shape = shape;
  t->dtype.code = kDLFloat;
  t->dtype.bits = 32;
  t->dtype.lanes = 1;
}

/* One call of the measured operation. */
static dlpg_status_t issue(dlpg_group_t *g, const opts_t *o, DLTensor *in, DLTensor *out,
                           dlpg_work_t **w) {
  DLTensor *pin[1] = {in}, *pout[1] = {out};
  if (!strcmp(o->op, "broadcast")) return dlpg_broadcast(g, pin, pout, 1, 0, NULL, w);
  if (!strcmp(o->op, "allgather")) return dlpg_allgather(g, pin, pout, 1, NULL, w);
  if (!strcmp(o->op, "barrier")) return dlpg_barrier(g, w);
  return dlpg_allreduce(g, pin, pout, 1, DLPG_SUM, NULL, w);
}

static dlpg_status_t call(dlpg_group_t *g, const opts_t *o, DLTensor *in, DLTensor *out,
                          int way) {
  if (way == WAY_BLOCKING) return issue(g, o, in, out, NULL);
  dlpg_work_t *w = NULL;
  dlpg_status_t st = issue(g, o, in, out, &w);
  if (st != DLPG_OK) return st;
  if (way == WAY_WAIT) {
    st = dlpg_work_wait(w, 0);
  } else {
    int done = 0;
    while (st == DLPG_OK && !done) st = dlpg_work_test(w, &done);
    if (st == DLPG_OK) st = dlpg_work_wait(w, 0); /* the operation's status */
  }
  dlpg_work_free(w);
  return st;
}

/* One rank: writes its medians (WAY_COUNT doubles, seconds per call) to fd. */
static int rank_main(const opts_t *o, const char *url, int rank, int fd) {
  dlpg_store_t *st = NULL;
  dlpg_group_t *g = NULL;
  if (dlpg_store_open(url, 60, &st) != DLPG_OK) goto fail;
  dlpg_group_options_t go = DLPG_GROUP_OPTIONS_INIT;
  go.name = "call-latency";
  go.timeout_s = 60;
  if (dlpg_group_create(st, rank, o->ranks, &go, &g) != DLPG_OK) goto fail;
  int64_t n = (int64_t)(o->bytes / 4), nout = !strcmp(o->op, "allgather") ? n * o->ranks : n;
  float *a = calloc((size_t)(n > 0 ? n : 1), 4), *b = calloc((size_t)(nout > 0 ? nout : 1), 4);
  DLTensor in, out;
  int64_t sin, sout;
  tensor(&in, &sin, a, n);
  tensor(&out, &sout, b, nout);
  double *t = calloc((size_t)o->reps * WAY_COUNT, sizeof *t);
  for (int i = 0; i < 50; i++)
    if (call(g, o, &in, &out, i % WAY_COUNT) != DLPG_OK) goto fail;
  for (int r = 0; r < o->reps; r++)
    for (int way = 0; way < WAY_COUNT; way++) {
      if (dlpg_barrier(g, NULL) != DLPG_OK) goto fail;
      double t0 = now_s();
      for (int i = 0; i < o->iters; i++)
        if (call(g, o, &in, &out, way) != DLPG_OK) goto fail;
      t[way * o->reps + r] = (now_s() - t0) / o->iters;
    }
  double med[WAY_COUNT];
  for (int way = 0; way < WAY_COUNT; way++) {
    qsort(t + way * o->reps, (size_t)o->reps, sizeof *t, cmp_double);
    med[way] = t[way * o->reps + o->reps / 2];
  }
  if (write(fd, med, sizeof med) != (ssize_t)sizeof med) return 1;
  dlpg_group_destroy(g);
  dlpg_store_close(st);
  free(a);
  free(b);
  free(t);
  return 0;
fail:
  fprintf(stderr, "rank %d: %s\n", rank, dlpg_last_error());
  return 1;
}

int main(int argc, char **argv) {
  opts_t o = {2, 2000, 11, 8, "allreduce"};
  int c;
  while ((c = getopt(argc, argv, "n:o:b:i:R:")) != -1) {
    switch (c) {
      case 'n': o.ranks = atoi(optarg); break;
      case 'o': o.op = optarg; break;
      case 'b': o.bytes = (size_t)strtoull(optarg, NULL, 10); break;
      case 'i': o.iters = atoi(optarg); break;
      case 'R': o.reps = atoi(optarg); break;
      default:
        fprintf(stderr, "usage: %s [-n ranks] [-o op] [-b bytes] [-i iters] [-R reps]\n", argv[0]);
        return 2;
    }
  }
  if (o.ranks < 1 || o.ranks > 64 || o.iters < 1 || o.reps < 1) {
    fprintf(stderr, "dlpg-call-latency: -n must be 1..64, -i and -R at least 1\n");
    return 2;
  }
  dlpg_store_t *server = NULL;
  int port = 0;
  if (dlpg_store_open("tcp://127.0.0.1:0?serve=1", 30, &server) != DLPG_OK ||
      dlpg_store_port(server, &port) != DLPG_OK) {
    fprintf(stderr, "store: %s\n", dlpg_last_error());
    return 1;
  }
  char url[64];
  snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
  int fds[2];
  if (pipe(fds) != 0) return 1;
  pid_t pids[64];
  for (int r = 0; r < o.ranks; r++) {
    pids[r] = fork();
    if (pids[r] == 0) _exit(rank_main(&o, url, r, fds[1]));
  }
  close(fds[1]);
  double worst[WAY_COUNT] = {0}, first[WAY_COUNT] = {0}, med[WAY_COUNT];
  for (int r = 0; r < o.ranks; r++) {
    if (read(fds[0], med, sizeof med) != (ssize_t)sizeof med) break;
    for (int way = 0; way < WAY_COUNT; way++) {
      if (r == 0) first[way] = med[way];
      if (med[way] > worst[way]) worst[way] = med[way];
    }
  }
  close(fds[0]);
  int bad = 0;
  for (int r = 0; r < o.ranks; r++) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    bad |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  dlpg_store_close(server);
  if (bad) {
    fprintf(stderr, "dlpg-call-latency: a rank failed\n");
    return 1;
  }
  const char *be = getenv("DLPG_CPU_BACKEND");
  printf("# %s float32 %zu B, %d ranks, %d calls x %d reps; %ld CPUs online; DLPG_CPU_BACKEND=%s\n",
         o.op, o.bytes, o.ranks, o.iters, o.reps, sysconf(_SC_NPROCESSORS_ONLN), be ? be : "");
  printf("%-12s %14s %16s\n", "way", "us/call", "slowest_rank_us");
  for (int way = 0; way < WAY_COUNT; way++)
    printf("%-12s %14.2f %16.2f\n", kWayName[way], first[way] * 1e6, worst[way] * 1e6);
  return 0;
}
