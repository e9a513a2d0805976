/* mpi_bench: the Open MPI anchor of bench/cpu-compare.py and bench/vcoll-compare.py.
 * MPI_Allreduce (float sum, out of place), MPI_Allgather, MPI_Bcast (root 0), and
 * MPI_Allgatherv / MPI_Alltoallv with dlpg-bench's --skew layout (bench_weight in
 * dlpg_bench.h: the first half of the ranks K times the others' blocks; allgatherv: what they
 * contribute, alltoallv: what every rank sends them), on float32 over the sizes dlpg-bench sweeps,
 * timed as dlpg-bench times them: warmup, then `iters` operations back to back, divided by
 * iters; the median of `reps` such loops; the mean over ranks. Sizes are counted as
 * nccl-tests and dlpg-bench count them (allgather(v): its output; alltoallv: each rank's
 * input, the mean buffer), and busbw uses the same factors. Every result is checked against
 * a reference (small integers, exact in float).
 *
 * usage: mpirun -np N mpi_bench OP MINBYTES MAXBYTES FACTOR WARMUP ITERS REPS ITERS_BYTES [SKEW]
 *   OP: allreduce | allgather | broadcast | allgatherv | alltoallv; ITERS_BYTES > 0: per
 *   size, iters and warmup at most ITERS_BYTES / size (at least 1); SKEW (default 1): the
 *   uneven ops' K. Rank 0 prints one line per size:
 *   "ROW size time_us algbw_GBps busbw_GBps wrong iters". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static float value(int rank, size_t i) { return (float)(1 + (i * 7u + (unsigned)rank * 13u) % 4u); }

enum { OP_ALLREDUCE, OP_ALLGATHER, OP_BROADCAST, OP_ALLGATHERV, OP_ALLTOALLV };

/* The uneven ops' layout (dlpg-bench's bench_weight): weights and, for a unit `per`, the
 * arrays MPI takes (ints, displacements packed). */
static int skew = 1;
static int weight(int n, int r) { return r < (n / 2 > 0 ? n / 2 : 1) ? skew : 1; }
static int *vc, *vd, *rc, *rd; /* counts, displs; alltoallv receive counts, displs */

static void layout(int op, int n, int rank, size_t per) {
  int at = 0, rat = 0;
  for (int r = 0; r < n; r++) {
    vc[r] = (int)per * weight(n, r);
    vd[r] = at;
    at += vc[r];
    rc[r] = (int)per * weight(n, rank);
    rd[r] = rat;
    rat += rc[r];
  }
  (void)op;
}

static void issue(int op, int rank, float *in, float *out, size_t per, size_t total) {
  if (op == OP_ALLREDUCE) MPI_Allreduce(in, out, (int)total, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  else if (op == OP_ALLGATHER) MPI_Allgather(in, (int)per, MPI_FLOAT, out, (int)per, MPI_FLOAT, MPI_COMM_WORLD);
  else if (op == OP_BROADCAST) MPI_Bcast(out, (int)total, MPI_FLOAT, 0, MPI_COMM_WORLD);
  else if (op == OP_ALLGATHERV)
    MPI_Allgatherv(in, vc[rank], MPI_FLOAT, out, vc, vd, MPI_FLOAT, MPI_COMM_WORLD);
  else MPI_Alltoallv(in, vc, vd, MPI_FLOAT, out, rc, rd, MPI_FLOAT, MPI_COMM_WORLD);
}

/* Refill what the op reads: the broadcast's root buffer is its output (in place, as
 * MPI_Bcast is); others read `in`, which no op writes. */
static void prepare(int op, int rank, float *in, float *out, size_t total) {
  if (op == OP_BROADCAST) {
    for (size_t i = 0; i < total; i++) out[i] = rank == 0 ? value(0, i) : 0.0f;
  } else {
    memset(out, 0, total * sizeof(float));
  }
  (void)in;
}

static long long check(int op, int rank, int n, const float *out, size_t per, size_t total) {
  long long wrong = 0;
  if (op == OP_ALLGATHERV || op == OP_ALLTOALLV) {
    /* Block r of the output: rank r's elements from where it keeps this rank's share. */
    for (int r = 0; r < n; r++) {
      size_t len = (size_t)(op == OP_ALLGATHERV ? vc[r] : rc[r]);
      size_t at = (size_t)(op == OP_ALLGATHERV ? vd[r] : rd[r]);
      size_t from = op == OP_ALLGATHERV ? 0 : (size_t)vd[rank];
      for (size_t i = 0; i < len; i++)
        if (out[at + i] != value(r, from + i)) wrong++;
    }
    return wrong;
  }
  for (size_t i = 0; i < total; i++) {
    float want;
    if (op == OP_ALLREDUCE) {
      /* 13r = r (mod 4): every 4 consecutive ranks add 1+2+3+4 = 10. */
      unsigned base = (unsigned)((i * 7u) % 4u);
      want = 10.0f * (float)(n / 4);
      for (int r = 0; r < n % 4; r++) want += (float)(1 + (base + (unsigned)r) % 4u);
    } else if (op == OP_ALLGATHER) {
      want = value((int)(i / per), i % per);
    } else {
      want = value(0, i);
    }
    if (out[i] != want) wrong++;
  }
  (void)rank;
  return wrong;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (argc != 9 && argc != 10) {
    if (rank == 0)
      fprintf(stderr, "usage: mpi_bench allreduce|allgather|broadcast|allgatherv|alltoallv "
                      "MINBYTES MAXBYTES FACTOR WARMUP ITERS REPS ITERS_BYTES [SKEW]\n");
    MPI_Finalize();
    return 2;
  }
  int op = !strcmp(argv[1], "allreduce") ? OP_ALLREDUCE : !strcmp(argv[1], "allgather") ? OP_ALLGATHER
         : !strcmp(argv[1], "broadcast") ? OP_BROADCAST : !strcmp(argv[1], "allgatherv") ? OP_ALLGATHERV
         : !strcmp(argv[1], "alltoallv") ? OP_ALLTOALLV : -1;
  if (argc == 10) skew = atoi(argv[9]);
  size_t minb = strtoull(argv[2], NULL, 10), maxb = strtoull(argv[3], NULL, 10);
  double factor = strtod(argv[4], NULL);
  int warmup0 = atoi(argv[5]), iters0 = atoi(argv[6]), reps = atoi(argv[7]);
  size_t iters_bytes = strtoull(argv[8], NULL, 10);
  if (op < 0 || minb == 0 || minb > maxb || factor <= 1.0 || iters0 < 1 || reps < 1 ||
      warmup0 < 0 || skew < 1 || skew > 1024) {
    if (rank == 0) fprintf(stderr, "mpi_bench: bad arguments (op '%s')\n", argv[1]);
    MPI_Finalize();
    return 2;
  }
  /* A skewed alltoallv's heavy receiver gets up to SKEW times the counted bytes. */
  size_t cap = maxb / sizeof(float) * (op == OP_ALLTOALLV ? (size_t)skew : 1) + (size_t)n;
  float *in = malloc(cap * sizeof(float)), *out = malloc(cap * sizeof(float));
  double *t = calloc((size_t)reps, sizeof(double));
  vc = calloc((size_t)n, sizeof(int)), vd = calloc((size_t)n, sizeof(int));
  rc = calloc((size_t)n, sizeof(int)), rd = calloc((size_t)n, sizeof(int));
  if (!in || !out || !t || !vc || !vd || !rc || !rd) {
    fprintf(stderr, "mpi_bench: rank %d: cannot allocate 2 x %zu bytes\n", rank, cap * 4);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (size_t i = 0; i < cap; i++) in[i] = value(rank, i);
  double factor_bw = op == OP_ALLREDUCE ? 2.0 * (n - 1) / n : op == OP_BROADCAST ? 1.0
                     : (double)(n - 1) / n;
  size_t wsum = 0;
  for (int r = 0; r < n; r++) wsum += (size_t)weight(n, r);
  int status = 0;
  for (size_t size = minb; size <= maxb;) {
    size_t blocks = op == OP_ALLGATHER ? (size_t)n
                    : op == OP_ALLGATHERV || op == OP_ALLTOALLV ? wsum : 1;
    size_t per = size / (sizeof(float) * blocks), total = per * blocks;
    size_t bytes = total * sizeof(float);
    if (per > 0) {
      int iters = iters0, warmup = warmup0;
      if (iters_bytes) {
        size_t k = iters_bytes / bytes;
        iters = k < 1 ? 1 : k < (size_t)iters0 ? (int)k : iters0;
        if (warmup > iters) warmup = iters;
      }
      if (op == OP_ALLGATHERV || op == OP_ALLTOALLV) layout(op, n, rank, per);
      prepare(op, rank, in, out, op == OP_ALLTOALLV ? per * (size_t)weight(n, rank) * (size_t)n : total);
      issue(op, rank, in, out, per, total);
      long long wrong = check(op, rank, n, out, per, total), wsum = 0;
      for (int i = 0; i < warmup; i++) issue(op, rank, in, out, per, total);
      MPI_Barrier(MPI_COMM_WORLD);
      for (int r = 0; r < reps; r++) {
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++) issue(op, rank, in, out, per, total);
        t[r] = (MPI_Wtime() - t0) * 1e6 / iters;
      }
      qsort(t, (size_t)reps, sizeof(double), cmp_double);
      double med = t[reps / 2], sum = 0;
      MPI_Reduce(&med, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
      MPI_Reduce(&wrong, &wsum, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
      if (rank == 0) {
        double us = sum / n, algbw = (double)bytes / (us * 1e3);
        printf("ROW %zu %.4f %.6f %.6f %lld %d\n", bytes, us, algbw, algbw * factor_bw, wsum, iters);
        fflush(stdout);
        if (wsum) status = 1;
      }
    }
    size_t next = (size_t)((double)size * factor);
    if (next <= size) break;
    size = next;
  }
  free(in);
  free(out);
  free(t);
  free(vc), free(vd), free(rc), free(rd);
  MPI_Finalize();
  return status;
}
