/* Subgroups: dlpg_group_split and dlpg_group_create_subset (the members alone, their parent
 * ranks listed) against each rank making its subgroup with dlpg_group_create
 * under a fresh name, as N forked processes of one host meeting through a TCP store on
 * loopback (this process serves it). Measured: from a barrier of the whole group until
 * every rank holds its subgroup and has completed a first barrier on it (the slowest rank's
 * time, an allreduce-max over the whole group), for two layouts of 8 subgroups of a 16-rank
 * job: color = rank % 8 (strided, 2 ranks each) and blocks of 2 (color = rank / 2); other
 * rank counts keep 8 colors, or fewer when there are fewer than 16 ranks. The six cases
 * alternate within each repetition, so load drifts hit them alike; medians over the
 * repetitions are printed side by side as a Markdown table, with the time until every rank
 * held its subgroup (the call alone) beside it.
 * Usage: split-create [ranks, default 16] [repetitions, default 15] */
#include <dlpack/dlpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dlpg/dlpg.h"

/* The cases, in the order they alternate. */
enum { SPLIT_STRIDED, SPLIT_BLOCKS, CREATE_STRIDED, CREATE_BLOCKS, SUBSET_STRIDED, SUBSET_BLOCKS,
       NCASES };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The slowest rank's value (allreduce max of one float64 over g). */
static int max_over(dlpg_group_t *g, double *v) {
  int64_t shape = 1;
  DLTensor t = {0};
  t.data = v;
  t.device.device_type = kDLCPU;
  t.ndim = 1;
  t.dtype.code = kDLFloat;
  t.dtype.bits = 64;
  t.dtype.lanes = 1;
  t.shape = &shape;
  DLTensor *tp = &t;
  return dlpg_allreduce(g, &tp, NULL, 1, DLPG_MAX, NULL, NULL) == DLPG_OK;
}

/* This rank's color, rank and size in the subgroup of layout strided (else blocks). */
static void layout(int strided, int rank, int size, int ncolors, int *color, int *crank,
                   int *csize) {
  if (strided) {
    *color = rank % ncolors;
    *crank = rank / ncolors;
    *csize = size / ncolors + (rank % ncolors < size % ncolors);
  } else {
    int per = (size + ncolors - 1) / ncolors;
    *color = rank / per;
    *crank = rank % per;
    *csize = (*color + 1) * per <= size ? per : size - *color * per;
  }
}

/* The parent ranks of this rank's subgroup, in subgroup rank order (layout's); returns n. */
static int members_of(int strided, int rank, int size, int ncolors, int *out) {
  int color, crank, csize, n = 0;
  layout(strided, rank, size, ncolors, &color, &crank, &csize);
  for (int r = 0; r < size; r++) {
    int c2, r2, s2;
    layout(strided, r, size, ncolors, &c2, &r2, &s2);
    if (c2 == color) out[r2] = r, n++;
  }
  return n;
}

static int run_rank(const char *url, int rank, int size, int reps, int fd) {
  dlpg_store_t *st = NULL;
  dlpg_group_t *world = NULL;
  if (dlpg_store_open(url, 60, &st) != DLPG_OK) return 2;
  dlpg_group_options_t o = DLPG_GROUP_OPTIONS_INIT;
  o.name = "split-bench";
  o.timeout_s = 120;
  if (dlpg_group_create(st, rank, size, &o, &world) != DLPG_OK ||
      dlpg_barrier(world, NULL) != DLPG_OK) {
    fprintf(stderr, "rank %d: %s\n", rank, dlpg_last_error());
    return 3;
  }
  int ncolors = size >= 16 ? 8 : size / 2 > 0 ? size / 2 : 1;
  /* Per repetition and case: the whole (subgroup and first barrier), then the subgroup alone. */
  double *times = calloc((size_t)reps * NCASES * 2, sizeof *times);
  for (int rep = 0; rep < reps; rep++) {
    for (int c = 0; c < NCASES; c++) {
      int color, crank, csize;
      int strided = c == SPLIT_STRIDED || c == CREATE_STRIDED || c == SUBSET_STRIDED;
      layout(strided, rank, size, ncolors, &color, &crank, &csize);
      int members[4096], nm = 0;
      if (c == SUBSET_STRIDED || c == SUBSET_BLOCKS)
        nm = members_of(strided, rank, size, ncolors, members);
      dlpg_group_t *sub = NULL;
      if (dlpg_barrier(world, NULL) != DLPG_OK) goto fail;
      double t0 = now_s();
      if (c == SPLIT_STRIDED || c == SPLIT_BLOCKS) {
        if (dlpg_group_split(world, color, rank, NULL, &sub) != DLPG_OK) goto fail;
      } else if (nm > 0) {
        if (dlpg_group_create_subset(world, nm, members, NULL, &sub) != DLPG_OK) goto fail;
      } else {
        char name[96];
        snprintf(name, sizeof name, "sub/%d/%d/%d", rep, c, color);
        dlpg_group_options_t so = DLPG_GROUP_OPTIONS_INIT;
        so.name = name;
        so.timeout_s = 120;
        if (dlpg_group_create(st, crank, csize, &so, &sub) != DLPG_OK) goto fail;
      }
      double got = now_s() - t0;
      if (dlpg_barrier(sub, NULL) != DLPG_OK) goto fail;
      double el = now_s() - t0;
      if (!max_over(world, &el) || !max_over(world, &got)) goto fail;
      times[(rep * NCASES + c) * 2] = el;
      times[(rep * NCASES + c) * 2 + 1] = got;
      dlpg_group_destroy(sub);
    }
  }
  if (rank == 0 && write(fd, times, sizeof *times * (size_t)reps * NCASES * 2) < 0) return 4;
  dlpg_group_destroy(world);
  dlpg_store_close(st);
  free(times);
  return 0;
fail:
  fprintf(stderr, "rank %d: %s\n", rank, dlpg_last_error());
  return 5;
}

int main(int argc, char **argv) {
  int size = argc > 1 ? atoi(argv[1]) : 16, reps = argc > 2 ? atoi(argv[2]) : 15;
  if (size < 2 || size > 4096 || reps < 1) {
    fprintf(stderr, "usage: split-create [ranks 2..4096, default 16] [repetitions, default 15]\n");
    return 1;
  }
  dlpg_store_t *server = NULL;
  if (dlpg_store_open("tcp://127.0.0.1:0?serve=1", 30, &server) != DLPG_OK) {
    fprintf(stderr, "store: %s\n", dlpg_last_error());
    return 1;
  }
  int port = 0, fds[2];
  dlpg_store_port(server, &port);
  if (pipe(fds) != 0) return 1;
  char url[64];
  snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
  pid_t *kids = calloc((size_t)size, sizeof *kids);
  for (int r = 0; r < size; r++) {
    kids[r] = fork();
    if (kids[r] == 0) {
      close(fds[0]);
      _exit(run_rank(url, r, size, reps, fds[1]));
    }
  }
  close(fds[1]);
  double *times = calloc((size_t)reps * NCASES * 2, sizeof *times);
  size_t want = sizeof *times * (size_t)reps * NCASES * 2, got = 0;
  while (got < want) {
    ssize_t k = read(fds[0], (char *)times + got, want - got);
    if (k <= 0) break;
    got += (size_t)k;
  }
  int bad = 0;
  for (int r = 0; r < size; r++) {
    int status = 0;
    waitpid(kids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) bad = 1;
  }
  dlpg_store_close(server);
  if (bad || got < want) {
    fprintf(stderr, "a rank failed\n");
    return 1;
  }
  double med[NCASES][2], v[4096];
  for (int c = 0; c < NCASES; c++)
    for (int k = 0; k < 2; k++) {
      for (int rep = 0; rep < reps && rep < 4096; rep++) v[rep] = times[(rep * NCASES + c) * 2 + k];
      med[c][k] = median(v, reps < 4096 ? reps : 4096);
    }
  int ncolors = size >= 16 ? 8 : size / 2 > 0 ? size / 2 : 1;
  printf("%d ranks, %d subgroups, %d repetitions; median ms until every rank holds its subgroup "
         "and finished a first barrier on it\n\n", size, ncolors, reps);
  printf("| layout | split (ms) | subset (ms) | create (ms) | split / create | subset / create | "
         "split: call alone (ms) | subset: call alone (ms) | create: call alone (ms) |\n"
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int l = 0; l < 2; l++)
    printf("| %s | %.2f | %.2f | %.2f | %.2fx | %.2fx | %.2f | %.2f | %.2f |\n",
           l == 0 ? "color = rank % 8" : "blocks of 2", med[l][0] * 1e3, med[l + 4][0] * 1e3,
           med[l + 2][0] * 1e3, med[l][0] / med[l + 2][0], med[l + 4][0] / med[l + 2][0],
           med[l][1] * 1e3, med[l + 4][1] * 1e3, med[l + 2][1] * 1e3);
  free(times);
  free(kids);
  return 0;
}
