/* One rank's sweep. For each size: dlpg, then the baseline (interleaved, so machine noise
 * hits both), each measured the nccl-tests way: warmup, then `iters` operations issued back
 * to back followed by one completion wait, divided by iters; the median of `reps` such
 * loops; then the average over ranks (as nccl-tests averages). Ranks hand their numbers to
 * rank 0 through the store, which needs no working collective and so still reports when
 * the plugin's CPU path is what is being measured. */
#include <stdlib.h>
#include <string.h>
#include "dlpg_bench.h"

enum { MODE_DLPG = 0, MODE_BASE = 1 };

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int issue(bench_ctx_t *x, int mode, size_t per) {
  return mode == MODE_DLPG ? bench_dlpg_issue(x, per) : bench_nccl_issue(x, per);
}

/* Per-block element count of a size, the bytes actually moved as nccl-tests counts them,
 * and the count printed (elements of the counted buffer). */
static size_t shape_of(const bench_ctx_t *x, size_t size, size_t *bytes, size_t *count) {
  size_t es = bench_dtype_size(x->o->dtype), blocks = 1;
  if (x->o->op == BENCH_ALLGATHER || x->o->op == BENCH_REDUCE_SCATTER) blocks = (size_t)x->nparts;
  if (x->o->op == BENCH_ALLTOALL) blocks = (size_t)x->world;
  size_t per = size / (es * blocks);
  *count = per * blocks;
  *bytes = *count * es;
  return per;
}

/* Elements of one output tensor. */
static size_t out_elems(const bench_ctx_t *x, size_t per) {
  if (x->o->op == BENCH_ALLGATHER) return per * (size_t)x->nparts;
  if (x->o->op == BENCH_ALLTOALL) return per * (size_t)x->world;
  return per;
}

/* Check the outputs of the last operation; -1 when not checked. */
static long long check_outputs(bench_ctx_t *x, size_t per) {
  const bench_opts_t *o = x->o;
  long long wrong = 0;
  size_t es = bench_dtype_size(o->dtype);
  size_t nout = out_elems(x, per);
  for (int g = 0; g < o->gpus; g++) {
    /* Only the root's first output receives a reduce. */
    if (o->op == BENCH_REDUCE && (x->rank != o->root || g != 0)) continue;
    if (bench_mem_fetch_out(x, g, nout * es) != 0) return -1;
    wrong += bench_check(x, o->op, x->rank * o->gpus + g, x->host, per);
  }
  return wrong;
}

/* Measure one mode at one size on this rank. */
static int measure(bench_ctx_t *x, int mode, size_t per, double *first_us, double *time_us,
                   long long *wrong) {
  const bench_opts_t *o = x->o;
  double *t = calloc((size_t)o->reps, sizeof(double));
  if (!t) return -1;
  int rc = bench_mem_clear_out(x, bench_dtype_size(o->dtype) * out_elems(x, per));
  if (rc == 0 && first_us && *first_us < 0) {
    /* The first operation of a mode creates its communicator (dlpg lazily; the baseline
     * here, so both first-op times include it). */
    double t0 = bench_now();
    if (mode == MODE_BASE) rc = bench_nccl_setup(x);
    if (rc == 0) rc = issue(x, mode, per);
    if (rc == 0) rc = bench_sync(x);
    *first_us = (bench_now() - t0) * 1e6;
  }
  for (int i = 0; rc == 0 && i < o->warmup; i++) rc = issue(x, mode, per);
  if (rc == 0) rc = bench_sync(x);
  for (int r = 0; rc == 0 && r < o->reps; r++) {
    double t0 = bench_now();
    for (int i = 0; rc == 0 && i < o->iters; i++) rc = issue(x, mode, per);
    if (rc == 0) rc = bench_sync(x);
    t[r] = (bench_now() - t0) * 1e6 / o->iters;
  }
  if (rc == 0) {
    qsort(t, (size_t)o->reps, sizeof(double), cmp_double);
    *time_us = t[o->reps / 2];
    /* In place, the timed loop reduced the inputs over and over: restore them and check
     * one more operation. */
    if (o->check && o->inplace) {
      rc = bench_mem_restore_in(x, per);
      if (rc == 0) rc = issue(x, mode, per);
      if (rc == 0) rc = bench_sync(x);
    }
    *wrong = !o->check ? -1 : rc == 0 ? check_outputs(x, per) : -1;
  }
  free(t);
  return rc;
}

/* Post this rank's numbers; rank 0 gathers them into res. */
static int exchange(bench_ctx_t *x, int row, int mode, int ok, double time_us, long long wrong,
                    size_t bytes, bench_result_t *res) {
  char key[96], val[96];
  snprintf(key, sizeof key, "dlpg-bench/res/%d/%d/%d", row, mode, x->rank);
  snprintf(val, sizeof val, "%d %.6f %lld", ok, time_us, wrong);
  dlpg_status_t st = dlpg_store_set(x->store, key, val, strlen(val));
  if (st != DLPG_OK || x->rank != 0) return st == DLPG_OK ? 0 : -1;
  double sum = 0;
  long long wsum = 0;
  int all_ok = 1, checked = 0;
  for (int r = 0; r < x->world; r++) {
    size_t len = 0;
    snprintf(key, sizeof key, "dlpg-bench/res/%d/%d/%d", row, mode, r);
    memset(val, 0, sizeof val);
    st = dlpg_store_get(x->store, key, x->o->timeout_s, val, sizeof val - 1, &len);
    if (st != DLPG_OK) {
      fprintf(stderr, "dlpg-bench: result of rank %d: %s: %s\n", r, dlpg_status_name(st),
              dlpg_last_error());
      return -1;
    }
    int rok = 0;
    double rt = 0;
    long long rw = -1;
    if (sscanf(val, "%d %lf %lld", &rok, &rt, &rw) != 3) rok = 0;
    all_ok &= rok;
    sum += rt;
    if (rw >= 0) { wsum += rw; checked = 1; }
  }
  res->ok = all_ok;
  res->time_us = sum / x->world;
  res->wrong = checked ? wsum : -1;
  res->algbw = res->time_us > 0 ? (double)bytes / (res->time_us * 1e3) : 0;
  res->busbw = res->algbw * bench_busbw_factor(x->o->op, x->nparts);
  return 0;
}

static int validate(const bench_ctx_t *x) {
  const bench_opts_t *o = x->o;
  if ((o->op == BENCH_ALLTOALL || o->op == BENCH_SENDRECV) && o->gpus != 1) {
    fprintf(stderr, "dlpg-bench: -o %s takes one tensor per rank: use -g 1, not %d\n",
            bench_op_name(o->op), o->gpus);
    return -1;
  }
  if (o->op == BENCH_SENDRECV && x->world < 2) {
    fprintf(stderr, "dlpg-bench: -o sendrecv needs at least 2 ranks, not %d\n", x->world);
    return -1;
  }
  if (o->inplace && o->op != BENCH_ALLREDUCE && o->op != BENCH_BROADCAST &&
      o->op != BENCH_REDUCE) {
    fprintf(stderr, "dlpg-bench: --inplace applies to allreduce, broadcast and reduce, not %s\n",
            bench_op_name(o->op));
    return -1;
  }
  if (o->root < 0 || o->root >= x->world) {
    fprintf(stderr, "dlpg-bench: root %d is outside [0, %d)\n", o->root, x->world);
    return -1;
  }
  return 0;
}

static int sweep(bench_ctx_t *x) {
  const bench_opts_t *o = x->o;
  int cap = 64, nrows = 0, rc = 0;
  bench_row_t *rows = calloc((size_t)cap, sizeof(*rows));
  double first[2] = {-1, -1};
  if (!rows) return -1;
  if (x->rank == 0) bench_report_header(stdout, o, x);
  for (size_t size = o->min_bytes; size <= o->max_bytes && rc == 0;) {
    bench_row_t row;
    memset(&row, 0, sizeof row);
    size_t per = shape_of(x, size, &row.bytes, &row.count);
    if (per > 0) {
      for (int mode = 0; mode < 2 && rc == 0; mode++) {
        if ((mode == MODE_DLPG && o->no_dlpg) || (mode == MODE_BASE && !o->baseline)) continue;
        double t = 0;
        long long wrong = -1;
        int ok = measure(x, mode, per, &first[mode], &t, &wrong) == 0;
        bench_result_t *res = mode == MODE_DLPG ? &row.d : &row.b;
        if (exchange(x, nrows, mode, ok, t, wrong, row.bytes, res) != 0 || !ok) rc = -1;
        if (x->rank == 0 && !res->ok) rc = -1;
      }
      if (x->rank == 0) {
        bench_report_row(stdout, o, &row);
        if (nrows == cap) {
          bench_row_t *n = realloc(rows, sizeof(*rows) * (size_t)(cap *= 2));
          if (!n) { rc = -1; break; }
          rows = n;
        }
        rows[nrows] = row;
      }
      nrows++;
    }
    size_t next = (size_t)((double)size * o->factor);
    if (next <= size) break;
    size = next;
  }
  if (x->rank == 0) {
    if (first[0] >= 0) printf("# first dlpg op (includes lazy communicator creation): %.1f us\n", first[0]);
    if (first[1] >= 0) printf("# first baseline op (includes ncclCommInitRank): %.1f us\n", first[1]);
    long long wrong = 0;
    for (int i = 0; i < nrows; i++)
      wrong += (rows[i].d.wrong > 0 ? rows[i].d.wrong : 0) + (rows[i].b.wrong > 0 ? rows[i].b.wrong : 0);
    printf("# rows: %d, wrong elements: %lld%s\n", nrows, wrong, o->check ? "" : " (not checked)");
    if (wrong > 0) rc = -1;
    if (o->json_path && bench_report_json(o->json_path, o, x, rows, nrows, first[0], first[1]) != 0)
      rc = -1;
    fflush(stdout);
  }
  free(rows);
  return rc;
}

int bench_rank_main(const bench_opts_t *o, dlpg_store_t *store, int rank, int world,
                    int local_rank) {
  bench_ctx_t x;
  memset(&x, 0, sizeof x);
  x.o = o;
  x.rank = rank;
  x.world = world;
  x.local_rank = local_rank;
  x.nparts = world * o->gpus;
  x.store = store;
  for (int g = 0; g < o->gpus; g++) x.dev[g] = local_rank * o->gpus + g;
  if (validate(&x) != 0) return 1;
  if (!o->no_dlpg) {
    dlpg_group_options_t go = DLPG_GROUP_OPTIONS_INIT;
    go.timeout_s = o->timeout_s;
    go.name = "dlpg-bench";
    dlpg_status_t st = dlpg_group_create(store, rank, world, &go, &x.group);
    if (st != DLPG_OK) {
      fprintf(stderr, "dlpg-bench: rank %d: dlpg_group_create: %s: %s\n", rank,
              dlpg_status_name(st), dlpg_last_error());
      return 1;
    }
  }
  int rc = bench_mem_setup(&x) == 0 ? sweep(&x) : -1;
  if (rc != 0 && x.group) dlpg_group_abort(x.group);
  dlpg_group_destroy(x.group);
  bench_nccl_teardown(&x);
  bench_mem_teardown(&x);
  return rc == 0 ? 0 : 1;
}
