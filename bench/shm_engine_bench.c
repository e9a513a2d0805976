/* Micro-benchmark of the shm engine alone (plugin/shm, no group or worker around it):
 * allreduce float32 sum at 8 B, 64 KiB and 16 MiB on 2 and 4 ranks (forked processes
 * meeting through a TCP store on loopback), with a single-core memcpy of each size in the
 * same run as the memory-speed reference. Prints medians of rank 0's per-call times.
 * Usage: shm-engine-bench [iterations scale, default 1] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "shm/shm.h"

static int dlpg__cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double dlpg__median(double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, dlpg__cmp);
  return t[n / 2];
}

static const size_t kSizes[] = {8, 64 << 10, 16 << 20};

static int dlpg__iters(size_t bytes, double scale) {
  int n = bytes <= 8 ? 20000 : bytes <= (64 << 10) ? 2000 : 40;
  n = (int)(n * scale);
  return n < 5 ? 5 : n;
}

/* One rank: every size, barrier before each timed call; rank 0 writes its medians to fd. */
static int dlpg__rank(const char *url, int rank, int size, double scale, int fd) {
  dlpg_store_t *st = NULL;
  dlpg__shm_t *sh = NULL;
  dlpg__shm_config_t cfg = {.timeout_s = 60, .spin = -1};
  if (dlpg_store_open(url, 30, &st) != DLPG_OK ||
      dlpg__shm_create(st, "bench", rank, size, &cfg, &sh) != DLPG_OK) {
    fprintf(stderr, "rank %d: %s\n", rank, dlpg_last_error());
    return 1;
  }
  for (size_t s = 0; s < sizeof kSizes / sizeof kSizes[0]; s++) {
    size_t n = kSizes[s] / 4;
    float *in = malloc(kSizes[s]), *out = malloc(kSizes[s]);
    for (size_t i = 0; i < n; i++) in[i] = (float)(i % 100) + (float)rank;
    int iters = dlpg__iters(kSizes[s], scale);
    double *t = malloc(sizeof(double) * (size_t)iters);
    for (int w = 0; w < 3; w++) dlpg__shm_allreduce(sh, in, out, n, DLPG__DT_FLOAT32, DLPG_SUM);
    for (int i = 0; i < iters; i++) {
      if (dlpg__shm_barrier(sh) != DLPG_OK) return 1;
      double t0 = dlpg__now();
      if (dlpg__shm_allreduce(sh, in, out, n, DLPG__DT_FLOAT32, DLPG_SUM) != DLPG_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, dlpg_last_error());
        return 1;
      }
      t[i] = dlpg__now() - t0;
    }
    double med = dlpg__median(t, iters);
    if (rank == 0 && write(fd, &med, sizeof med) != (ssize_t)sizeof med) return 1;
    free(in);
    free(out);
    free(t);
  }
  dlpg__shm_destroy(sh);
  dlpg_store_close(st);
  return 0;
}

static double dlpg__memcpy_median(size_t bytes, double scale) {
  char *a = malloc(bytes), *b = malloc(bytes);
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  int iters = dlpg__iters(bytes, scale);
  double *t = malloc(sizeof(double) * (size_t)iters);
  for (int i = 0; i < iters; i++) {
    double t0 = dlpg__now();
    memcpy(b, a, bytes);
    __asm__ __volatile__("" : : "r"(b) : "memory"); /* keep the copy */
    t[i] = dlpg__now() - t0;
  }
  double m = dlpg__median(t, iters);
  free(a);
  free(b);
  free(t);
  return m;
}

int main(int argc, char **argv) {
  double scale = argc > 1 ? atof(argv[1]) : 1.0;
  dlpg_store_t *server = NULL;
  int port = 0;
  if (dlpg_store_open("tcp://127.0.0.1:0?serve=1", 30, &server) != DLPG_OK ||
      dlpg_store_port(server, &port) != DLPG_OK) {
    fprintf(stderr, "store: %s\n", dlpg_last_error());
    return 1;
  }
  char url[64];
  snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  printf("# shm engine allreduce float32 sum, median of rank 0's calls; %ld CPUs online\n", ncpu);
  printf("# busbw = 2(n-1)/n * bytes / time; memcpy: one core, same size, same run\n");
  printf("%6s %10s %12s %12s %14s %14s\n", "ranks", "bytes", "time_us", "busbw_GB/s", "memcpy_us",
         "memcpy_GB/s");
  double mc[3];
  for (int s = 0; s < 3; s++) mc[s] = dlpg__memcpy_median(kSizes[s], scale);
  const int ranks[] = {2, 4};
  for (int ri = 0; ri < 2; ri++) {
    int size = ranks[ri], fds[2];
    if (pipe(fds) != 0) return 1;
    pid_t pids[8];
    for (int r = 0; r < size; r++) {
      pids[r] = fork();
      if (pids[r] == 0) _exit(dlpg__rank(url, r, size, scale, fds[1]));
    }
    close(fds[1]);
    double med[3] = {0, 0, 0};
    for (int s = 0; s < 3; s++)
      if (read(fds[0], &med[s], sizeof med[s]) != (ssize_t)sizeof med[s]) med[s] = -1;
    close(fds[0]);
    int bad = 0;
    for (int r = 0; r < size; r++) {
      int status = 0;
      waitpid(pids[r], &status, 0);
      bad |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    if (bad) {
      fprintf(stderr, "a rank failed (%d ranks)\n", size);
      return 1;
    }
    for (int s = 0; s < 3; s++) {
      double bus = 2.0 * (size - 1) / size * (double)kSizes[s] / med[s] / 1e9;
      printf("%6d %10zu %12.2f %12.2f %14.2f %14.2f\n", size, kSizes[s], med[s] * 1e6, bus,
             mc[s] * 1e6, (double)kSizes[s] / mc[s] / 1e9);
    }
  }
  dlpg_store_close(server);
  return 0;
}
