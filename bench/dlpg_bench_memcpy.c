/* --memcpy: the memory-speed reference of the CPU comparison. One process, one core: for
 * each size, memcpy from one buffer to another, timed like the collectives (warmup, then
 * iters copies, the median of --reps loops), printed in the same table (algbw = busbw =
 * bytes / time; the time column's in-place half is N/A) and, with -J, the same JSON with
 * rows keyed "memcpy". */
#include <stdlib.h>
#include <string.h>
#include "dlpg_bench.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static volatile unsigned char sink;

static double time_copy(void *dst, const void *src, size_t n, int warmup, int iters, int reps,
                        double *t) {
  for (int i = 0; i < warmup; i++) memcpy(dst, src, n);
  for (int r = 0; r < reps; r++) {
    double t0 = bench_now();
    for (int i = 0; i < iters; i++) memcpy(dst, src, n);
    t[r] = (bench_now() - t0) * 1e6 / iters;
    sink = ((unsigned char *)dst)[n - 1]; /* the copies are used */
  }
  qsort(t, (size_t)reps, sizeof(double), cmp_double);
  return t[reps / 2];
}

int bench_memcpy_main(bench_opts_t *o) {
  bench_ctx_t x;
  memset(&x, 0, sizeof x);
  x.o = o;
  x.world = x.nparts = 1;
  o->launched_by = "--memcpy";
  o->run_ip = 0;
  o->check = 0;
  size_t cap = o->max_bytes ? o->max_bytes : 1;
  unsigned char *src = malloc(cap), *dst = malloc(cap);
  double *t = calloc((size_t)o->reps, sizeof(double));
  int nrows = 0, rc = 0, ncap = 64;
  bench_row_t *rows = calloc((size_t)ncap, sizeof(*rows));
  if (!src || !dst || !t || !rows) {
    fprintf(stderr, "dlpg-bench: --memcpy: cannot allocate 2 x %zu bytes\n", cap);
    rc = 1;
    goto out;
  }
  memset(src, 1, cap);
  memset(dst, 0, cap); /* touch every page before timing */
  bench_report_header(stdout, o, &x);
  for (size_t size = o->min_bytes; size <= o->max_bytes;) {
    bench_row_t row;
    memset(&row, 0, sizeof row);
    row.bytes = size;
    row.count = size / bench_dtype_size(o->dtypes[0]);
    row.dtype = o->dtypes[0];
    row.iters = o->iters;
    row.warmup = o->warmup;
    if (o->iters_bytes) {
      size_t n = o->iters_bytes / size;
      row.iters = n < 1 ? 1 : n < (size_t)o->iters ? (int)n : o->iters;
      if (row.warmup > row.iters) row.warmup = row.iters;
    }
    row.ran[0] = 1;
    bench_result_t *r = &row.d[0];
    r->time_us = time_copy(dst, src, size, row.warmup, row.iters, o->reps, t);
    r->ok = 1;
    r->wrong = -1;
    r->algbw = r->busbw = (double)size / (r->time_us * 1e3);
    bench_report_row(stdout, o, &row);
    if (nrows == ncap) {
      bench_row_t *n = realloc(rows, sizeof(*rows) * (size_t)(ncap *= 2));
      if (!n) { rc = 1; break; }
      rows = n;
    }
    rows[nrows++] = row;
    size_t next = o->factor > 1.0 ? (size_t)((double)size * o->factor) : size + o->step_bytes;
    if (next <= size) break;
    size = next;
  }
  bench_report_trailer(stdout, o, rows, nrows, rc != 0);
  if (rc == 0 && o->json_path && bench_report_json(o->json_path, o, &x, rows, nrows, -1, -1) != 0)
    rc = 1;
out:
  free(rows);
  free(t);
  free(src);
  free(dst);
  return rc;
}
