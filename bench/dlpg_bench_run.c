/* One rank's sweep. For each dtype and reduce op (-d/-o, "all" names several) and each size:
 * out of place then in place (as nccl-tests' columns), and within each dlpg then the
 * baseline (interleaved, so machine noise hits both), each measured the nccl-tests way:
 * warmup, then `iters` operations issued back to back followed by one completion wait,
 * divided by iters; the median of `reps` such loops; then the mean over ranks (or rank 0's,
 * the minimum or the maximum: -a). Ranks hand their numbers to
 * rank 0 through the store, which needs no working collective and so still reports when
 * the plugin's CPU path is what is being measured. */
#include <stdlib.h>
#include <string.h>
#include "dlpg_bench.h"

enum { MODE_DLPG = 0, MODE_BASE = 1 };

/* The average over ranks of -a: 0 rank 0's, 1 the mean, 2 the minimum, 3 the maximum. */
static double combine(int how, double acc, double v, int r) {
  if (r == 0) return v;
  switch (how) {
    case 0: return acc;
    case 2: return v < acc ? v : acc;
    case 3: return v > acc ? v : acc;
    default: return acc + v;
  }
}

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
  bench_op_t op = x->o->op;
  if (op == BENCH_ALLGATHER || op == BENCH_REDUCE_SCATTER) blocks = (size_t)x->nparts;
  if (op == BENCH_ALLTOALL || op == BENCH_GATHER || op == BENCH_SCATTER) blocks = (size_t)x->world;
  /* Units of bench_weight: the counted buffer holds weight_sum of them. */
  if (op == BENCH_ALLGATHERV || op == BENCH_ALLTOALLV) blocks = bench_weight_sum(x->o, x->world);
  size_t per = size / (es * blocks);
  *count = per * blocks;
  *bytes = *count * es;
  return per;
}

/* Elements of one output tensor. */
static size_t out_elems(const bench_ctx_t *x, size_t per) {
  const bench_opts_t *o = x->o;
  if (o->op == BENCH_ALLGATHER) return per * (size_t)x->nparts;
  if (o->op == BENCH_ALLTOALL) return per * (size_t)x->world;
  if (o->op == BENCH_GATHER) return x->rank == o->root ? per * (size_t)x->world : 0;
  if (o->op == BENCH_ALLGATHERV) return per * bench_weight_sum(o, x->world);
  if (o->op == BENCH_ALLTOALLV)
    return per * (size_t)bench_weight(o, x->world, x->rank) * (size_t)x->world;
  return per;
}

/* Check the outputs of the last operation; -1 when not checked. */
static long long check_outputs(bench_ctx_t *x, size_t per) {
  const bench_opts_t *o = x->o;
  long long wrong = 0;
  size_t es = bench_dtype_size(o->dtype);
  size_t nout = out_elems(x, per);
  for (int g = 0; g < o->gpus; g++) {
    /* Only the root's first output receives a reduce or a gather. */
    if ((o->op == BENCH_REDUCE || o->op == BENCH_GATHER) && (x->rank != o->root || g != 0))
      continue;
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
    for (int i = 0; rc == 0 && i < o->iters; i++) {
      rc = issue(x, mode, per);
      if (rc == 0 && o->blocking) rc = bench_sync(x); /* -z 1 */
    }
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
    /* In place changed the inputs: give the next measurement its fill back. */
    if (rc == 0 && o->inplace) rc = bench_mem_restore_in(x, per);
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
  double acc = 0;
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
    acc = combine(x->o->average, acc, rt, r);
    if (rw >= 0) { wsum += rw; checked = 1; }
  }
  res->ok = all_ok;
  res->time_us = x->o->average == 1 ? acc / x->world : acc;
  res->wrong = checked ? wsum : -1;
  res->algbw = res->time_us > 0 ? (double)bytes / (res->time_us * 1e3) : 0;
  res->busbw = res->algbw * bench_busbw_factor(x->o->op, x->nparts);
  return 0;
}

static int validate(const bench_ctx_t *x) {
  const bench_opts_t *o = x->o;
  if (bench_op_single(o->op) && o->gpus != 1) {
    fprintf(stderr, "dlpg-bench: %s takes one tensor per rank: use -g 1, not %d\n",
            bench_op_name(o->op), o->gpus);
    return -1;
  }
  if ((o->op == BENCH_ALLGATHERV || o->op == BENCH_ALLTOALLV) && x->world > BENCH_MAX_RANKS) {
    fprintf(stderr, "dlpg-bench: %s takes at most %d ranks, not %d\n", bench_op_name(o->op),
            BENCH_MAX_RANKS, x->world);
    return -1;
  }
  if (o->op == BENCH_SENDRECV && x->world < 2) {
    fprintf(stderr, "dlpg-bench: sendrecv needs at least 2 ranks, not %d\n", x->world);
    return -1;
  }
  if (o->root < 0 || o->root >= x->world) {
    fprintf(stderr, "dlpg-bench: -r %d is outside [0, %d ranks)\n", o->root, x->world);
    return -1;
  }
  return 0;
}

/* Whether the backend reduces this pair; every rank asks the same question, so all skip
 * together. A pair named alone (-d T -o R) that is not served is an error, one of "all"
 * is skipped with a line saying so. */
static int pair_served(const bench_ctx_t *x, const bench_opts_t *cur, int named_alone) {
  if (!bench_op_has_redop(cur->op) || cur->no_dlpg) return 1;
  DLDevice dev = {cur->cuda ? kDLCUDA : kDLCPU, cur->cuda ? x->dev[0] : 0};
  dlpg_status_t st = dlpg_reduce_supported(dev, bench_dtype_dl(cur->dtype), cur->redop);
  if (st == DLPG_OK) return 1;
  if (named_alone) {
    fprintf(stderr, "dlpg-bench: rank %d: -d %s -o %s: %s: %s\n", x->rank,
            bench_dtype_nccl_name(cur->dtype), bench_redop_name(cur->redop),
            dlpg_status_name(st), dlpg_last_error());
    return -1;
  }
  if (x->rank == 0)
    printf("# skipped %s %s: %s\n", bench_dtype_nccl_name(cur->dtype),
           bench_redop_name(cur->redop), dlpg_last_error());
  return 0;
}

typedef struct rows {
  bench_row_t *v;
  int n, cap, issued; /* issued: rows measured, the store keys' index (every rank) */
  double first[2];
} rows_t;

/* Measure every column of one size; rank 0 prints and keeps the row. */
static int one_size(bench_ctx_t *x, bench_opts_t *cur, size_t size, rows_t *rs) {
  bench_row_t row;
  memset(&row, 0, sizeof row);
  row.dtype = cur->dtype;
  row.redop = cur->redop;
  size_t per = shape_of(x, size, &row.bytes, &row.count);
  if (per == 0) return 0;
  int rc = 0;
  /* --iters-bytes: fewer operations for larger sizes, so one run spans 8 B to GiBs. */
  const int iters0 = cur->iters, warmup0 = cur->warmup;
  if (cur->iters_bytes > 0) {
    size_t n = cur->iters_bytes / (row.bytes ? row.bytes : 1);
    cur->iters = n < 1 ? 1 : n < (size_t)iters0 ? (int)n : iters0;
    if (cur->warmup > cur->iters) cur->warmup = cur->iters;
  }
  row.iters = cur->iters;
  row.warmup = cur->warmup;
  for (int ip = 0; ip < 2 && rc == 0; ip++) {
    if (ip ? !cur->run_ip || !bench_op_has_inplace(cur->op) : !cur->run_oop) continue;
    cur->inplace = ip;
    row.ran[ip] = 1;
    for (int mode = 0; mode < 2 && rc == 0; mode++) {
      if ((mode == MODE_DLPG && cur->no_dlpg) || (mode == MODE_BASE && !cur->baseline)) continue;
      double t = 0;
      long long wrong = -1;
      int ok = measure(x, mode, per, &rs->first[mode], &t, &wrong) == 0;
      bench_result_t *res = mode == MODE_DLPG ? &row.d[ip] : &row.b[ip];
      if (exchange(x, rs->issued, mode * 2 + ip, ok, t, wrong, row.bytes, res) != 0 || !ok)
        rc = -1;
      if (x->rank == 0 && !res->ok) rc = -1;
    }
  }
  cur->inplace = 0;
  cur->iters = iters0;
  cur->warmup = warmup0;
  rs->issued++;
  if (x->rank != 0) return rc;
  bench_report_row(stdout, cur, &row);
  if (rs->n == rs->cap) {
    int cap = rs->cap ? rs->cap * 2 : 64;
    bench_row_t *n = realloc(rs->v, sizeof(*n) * (size_t)cap);
    if (!n) return -1;
    rs->v = n;
    rs->cap = cap;
  }
  rs->v[rs->n++] = row;
  return rc;
}

/* Every size of one (dtype, redop) pair, on buffers filled for it. */
static int one_pair(bench_ctx_t *x, bench_opts_t *cur, rows_t *rs) {
  x->o = cur;
  int rc = bench_mem_setup(x);
  for (size_t size = cur->min_bytes; rc == 0 && size <= cur->max_bytes;) {
    rc = one_size(x, cur, size, rs);
    size_t next = cur->factor > 1.0 ? (size_t)((double)size * cur->factor) : size + cur->step_bytes;
    if (next <= size) break;
    size = next;
  }
  bench_mem_teardown(x);
  return rc;
}

static int sweep(bench_ctx_t *x) {
  const bench_opts_t *o = x->o;
  rows_t rs;
  memset(&rs, 0, sizeof rs);
  rs.first[0] = rs.first[1] = -1;
  int rc = 0;
  if (x->rank == 0) bench_report_header(stdout, o, x);
  /* Operations without a reduce op run once per dtype. */
  int nred = bench_op_has_redop(o->op) ? o->nredops : 1;
  for (int d = 0; rc == 0 && d < o->ndtypes; d++) {
    for (int r = 0; rc == 0 && r < nred; r++) {
      bench_opts_t cur = *o;
      cur.dtype = o->dtypes[d];
      cur.redop = bench_op_has_redop(o->op) ? o->redops[r] : DLPG_SUM;
      x->o = &cur;
      int served = pair_served(x, &cur, o->ndtypes == 1 && o->nredops == 1);
      if (served < 0) rc = -1;
      else if (served > 0) rc = one_pair(x, &cur, &rs);
      x->o = o;
    }
  }
  if (x->rank == 0) {
    if (rs.first[0] >= 0) printf("# first dlpg op (includes lazy communicator creation): %.1f us\n", rs.first[0]);
    if (rs.first[1] >= 0) printf("# first baseline op (includes ncclCommInitRank): %.1f us\n", rs.first[1]);
    bench_report_trailer(stdout, o, rs.v, rs.n, rc != 0);
    for (int i = 0; i < rs.n; i++)
      for (int ip = 0; ip < 2; ip++)
        if (rs.v[i].d[ip].wrong > 0 || rs.v[i].b[ip].wrong > 0) rc = -1;
    if (o->json_path && bench_report_json(o->json_path, o, x, rs.v, rs.n, rs.first[0], rs.first[1]) != 0)
      rc = -1;
    fflush(stdout);
  }
  free(rs.v);
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
  for (int g = 0; g < o->gpus; g++) x.dev[g] = (o->shared_gpu ? 0 : local_rank * o->gpus) + g;
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
  int rc = sweep(&x);
  if (rc != 0 && x.group) dlpg_group_abort(x.group);
  dlpg_group_destroy(x.group);
  bench_nccl_teardown(&x);
  return rc == 0 ? 0 : 1;
}
