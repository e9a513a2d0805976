/* Blocking send/recv ping-pong between two ranks of one host (forked processes meeting
 * through a TCP store on loopback), through the public API: rank 0 sends, rank 1 receives
 * and sends back, for 8 B, 64 KiB and 16 MiB messages. Prints the median one-way time
 * (half a round trip) and the bandwidth it gives. Run it as is (host memory's default:
 * shared memory for a pair on one host) and with DLPG_CPU_BACKEND=gloo to compare.
 * Usage: p2p-pingpong [iterations scale, default 1] */
#include <dlpack/dlpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlpg/dlpg.h"

static const size_t kSizes[] = {8, 64 << 10, 16 << 20};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int iters(size_t bytes, double scale) {
  int n = bytes <= 8 ? 5000 : bytes <= (64 << 10) ? 1000 : 30;
  n = (int)(n * scale);
  return n < 5 ? 5 : n;
}

static int run_rank(const char *url, int rank, double scale) {
  dlpg_store_t *st = NULL;
  dlpg_group_t *g = NULL;
  if (dlpg_store_open(url, 30, &st) != DLPG_OK) return 2;
  dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
  o.name = "pingpong";
  if (dlpg_group_create(st, rank, 2, &o, &g) != DLPG_OK) {
    fprintf(stderr, "rank %d: %s\n", rank, dlpg_last_error());
    return 3;
  }
  const int peer = 1 - rank;
  for (size_t si = 0; si < sizeof kSizes / sizeof kSizes[0]; si++) {
    size_t bytes = kSizes[si];
    unsigned char *buf = malloc(bytes);
    memset(buf, rank + 1, bytes);
    int64_t shape = (int64_t)bytes;
    DLTensor t = {0};
    t.data = buf;
    t.device.device_type = kDLCPU;
    t.ndim = 1;
    t.dtype.code = kDLUInt;
    t.dtype.bits = 8;
    t.dtype.lanes = 1;
    t.shape = &shape;
    int n = iters(bytes, scale), warm = n / 10 + 2;
    double *tv = malloc(sizeof *tv * (size_t)n);
    for (int i = -warm; i < n; i++) {
      double t0 = now_s();
      dlpg_status_t s1, s2;
      if (rank == 0) {
        s1 = dlpg_send(g, &t, peer, 1, NULL, NULL);
        s2 = dlpg_recv(g, &t, peer, 1, NULL, NULL);
      } else {
        s1 = dlpg_recv(g, &t, peer, 1, NULL, NULL);
        s2 = dlpg_send(g, &t, peer, 1, NULL, NULL);
      }
      if (s1 != DLPG_OK || s2 != DLPG_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, dlpg_last_error());
        return 4;
      }
      if (i >= 0) tv[i] = (now_s() - t0) / 2;
    }
    if (rank == 0) {
      qsort(tv, (size_t)n, sizeof *tv, cmp);
      double med = tv[n / 2];
      printf("%10zu B  one-way %10.2f us  %8.3f GB/s  (%d round trips)\n", bytes, med * 1e6,
             (double)bytes / med / 1e9, n);
      fflush(stdout);
    }
    free(tv);
    free(buf);
  }
  dlpg_group_destroy(g);
  dlpg_store_close(st);
  return 0;
}

int main(int argc, char **argv) {
  double scale = argc > 1 ? atof(argv[1]) : 1.0;
  if (scale <= 0) scale = 1.0;
  dlpg_store_t *server = NULL;
  if (dlpg_store_open("tcp://127.0.0.1:0?serve=1", 30, &server) != DLPG_OK) {
    fprintf(stderr, "store: %s\n", dlpg_last_error());
    return 1;
  }
  int port = 0;
  dlpg_store_port(server, &port);
  char url[64];
  snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
  const char *cpu = getenv("DLPG_CPU_BACKEND");
  printf("blocking send/recv ping-pong, 2 ranks, DLPG_CPU_BACKEND=%s\n", cpu ? cpu : "(unset: auto)");
  fflush(stdout);
  pid_t kids[2];
  for (int r = 0; r < 2; r++) {
    kids[r] = fork();
    if (kids[r] == 0) _exit(run_rank(url, r, scale));
  }
  int bad = 0;
  for (int r = 0; r < 2; r++) {
    int status = 0;
    waitpid(kids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) bad = 1;
  }
  dlpg_store_close(server);
  return bad;
}
