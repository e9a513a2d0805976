/* Output: the nccl-tests-style table on rank 0's stdout and, with -J, every row as JSON
 * (read by bench/plot_busbw.py and bench/gpu_table.py). */
#include <string.h>
#include <time.h>
#include "dlpg_bench.h"

/* nccl-tests' bus-bandwidth factors (doc/PERFORMANCE.md there): the fraction of the data
 * each participant's busiest link carries, so busbw is comparable with the link speed. */
double bench_busbw_factor(bench_op_t op, int n) {
  if (n <= 0) return 1.0;
  switch (op) {
    case BENCH_ALLREDUCE: return 2.0 * (n - 1) / n;
    case BENCH_ALLGATHER:
    case BENCH_REDUCE_SCATTER:
    case BENCH_ALLTOALL:
    /* nccl-tests' gather and scatter factor; the uneven forms as their even ones (a size
     * counts allgatherv's output and the mean alltoallv buffer, bench_weight). */
    case BENCH_GATHER:
    case BENCH_SCATTER:
    case BENCH_ALLGATHERV:
    case BENCH_ALLTOALLV: return (double)(n - 1) / n;
    default: return 1.0;
  }
}

static const char *build_info(void) {
  const char *info = NULL;
  return dlpg_get_build_info(&info) == DLPG_OK && info ? info : "?";
}

/* nccl-tests' layout, so scripts that read its tables read these: the same three header
 * lines, the same columns (out of place, then in place) and the same trailer. */
void bench_report_header(FILE *f, const bench_opts_t *o, const bench_ctx_t *x) {
  if (o->memcpy_ref)
    fprintf(f, "# dlpg-bench memcpy: one process, one core, memcpy of each size (the memory-speed "
               "reference; busbw = algbw)\n");
  else
    fprintf(f, "# dlpg-bench %s: %d rank(s) x %d %s tensor(s) = %d participants, ranks from %s\n",
          bench_op_name(o->op), x->world, o->gpus, o->cuda ? "cuda" : "cpu", x->nparts,
          o->launched_by ? o->launched_by : "?");
  fprintf(f, "# nThread 1 nGpus %d minBytes %zu maxBytes %zu step: %g(%s) warmup iters: %d "
             "iters: %d agg iters: 1 validation: %d graph: 0\n",
          o->gpus, o->min_bytes, o->max_bytes,
          o->factor > 1.0 ? o->factor : (double)o->step_bytes,
          o->factor > 1.0 ? "factor" : "bytes", o->warmup, o->iters, o->check);
  fprintf(f, "# %s; time: host time of iters back-to-back ops + one completion wait, / iters; "
             "median of %d repetitions (--reps); %s over ranks (-a %d)%s%s\n",
          build_info(), o->reps,
          o->average == 0 ? "rank 0's" : o->average == 2 ? "minimum" : o->average == 3 ? "maximum" : "mean",
          o->average, o->async ? "; --async: each op's work waited" : "",
          o->blocking ? "; -z 1: each op waited" : "");
  if (o->iters_bytes)
    fprintf(f, "# --iters-bytes %zu: per size, iters and warmup at most %zu / size, at least 1\n",
            o->iters_bytes, o->iters_bytes);
  if (o->op == BENCH_ALLGATHERV || o->op == BENCH_ALLTOALLV)
    fprintf(f, "# --skew %d: the first %d rank(s) %s %d x the others' blocks; size = %s (the "
               "mean buffer), busbw factor (n-1)/n as nccl-tests' %s\n",
            o->skew, x->world / 2 > 0 ? x->world / 2 : 1,
            o->op == BENCH_ALLGATHERV ? "contribute" : "receive", o->skew,
            o->op == BENCH_ALLGATHERV ? "the output" : "each rank's input",
            o->op == BENCH_ALLGATHERV ? "allgather" : "alltoall");
  if (o->baseline)
    fprintf(f, "# --baseline nccl: NCCL's columns after '|', then time and busbw dlpg/nccl "
               "(out of place)\n");
  fprintf(f, "#\n");
  fprintf(f, "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          ",
          "", "", "", "", "");
  if (o->baseline) fprintf(f, " | nccl out-of-place                  nccl in-place");
  fputc('\n', f);
  fprintf(f, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s", "size", "count",
          "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
          "#wrong");
  if (o->baseline)
    fprintf(f, " |  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s | %8s %8s", "time", "algbw", "busbw",
            "#wrong", "time", "algbw", "busbw", "#wrong", "time x", "busbw x");
  fputc('\n', f);
  fprintf(f, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s", "(B)",
          "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  if (o->baseline)
    fprintf(f, " |  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s |", "(us)", "(GB/s)", "(GB/s)", "",
            "(us)", "(GB/s)", "(GB/s)", "");
  fputc('\n', f);
  fflush(f);
}

/* One column set: time (nccl-tests' precision by magnitude), algbw, busbw, #wrong ("N/A"
 * unchecked); all four "N/A" for a column set that did not run. */
static void result_cols(FILE *f, const bench_result_t *r, int ran) {
  if (!ran) {
    fprintf(f, "  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A");
    return;
  }
  if (!r->ok) {
    fprintf(f, "  %7s  %6s  %6s  %5s", "failed", "N/A", "N/A", "N/A");
    return;
  }
  char t[32], w[24];
  if (r->time_us >= 10000.0) snprintf(t, sizeof t, "%7.0f", r->time_us);
  else if (r->time_us >= 100.0) snprintf(t, sizeof t, "%7.1f", r->time_us);
  else snprintf(t, sizeof t, "%7.2f", r->time_us);
  if (r->wrong < 0) snprintf(w, sizeof w, "N/A");
  else snprintf(w, sizeof w, "%lld", r->wrong);
  fprintf(f, "  %7s  %6.2f  %6.2f  %5s", t, r->algbw, r->busbw, w);
}

void bench_report_row(FILE *f, const bench_opts_t *o, const bench_row_t *r) {
  fprintf(f, "%12zu  %12zu  %8s  %6s  %6d", r->bytes, r->count, bench_dtype_nccl_name(r->dtype),
          bench_op_has_redop(o->op) && !o->memcpy_ref ? bench_redop_name(r->redop) : "none",
          bench_op_has_root(o->op) && !o->memcpy_ref ? o->root : -1);
  for (int ip = 0; ip < 2; ip++) result_cols(f, &r->d[ip], r->ran[ip] && !o->no_dlpg);
  if (o->baseline) {
    fputs(" |", f);
    for (int ip = 0; ip < 2; ip++) result_cols(f, &r->b[ip], r->ran[ip]);
    const bench_result_t *d = &r->d[0], *b = &r->b[0];
    if (r->ran[0] && !o->no_dlpg && d->ok && b->ok && b->time_us > 0 && b->busbw > 0)
      fprintf(f, " | %8.3f %8.3f", d->time_us / b->time_us, d->busbw / b->busbw);
    else
      fprintf(f, " | %8s %8s", "N/A", "N/A");
  }
  fputc('\n', f);
  fflush(f);
}

void bench_report_trailer(FILE *f, const bench_opts_t *o, const bench_row_t *rows, int nrows,
                          int failed) {
  long long wrong = 0;
  double bw = 0;
  int nbw = 0;
  for (int i = 0; i < nrows; i++) {
    for (int ip = 0; ip < 2; ip++) {
      const bench_result_t *d = &rows[i].d[ip];
      if (!rows[i].ran[ip] || o->no_dlpg) continue;
      if (d->wrong > 0) wrong += d->wrong;
      if (d->ok) { bw += d->busbw; nbw++; }
      if (o->baseline && rows[i].b[ip].wrong > 0) wrong += rows[i].b[ip].wrong;
    }
  }
  /* A run that stopped on a failed operation is not OK, whatever the rows before it held. */
  if (failed && !wrong)
    fprintf(f, "# Out of bounds values : %lld FAILED (the run stopped on an error, reported "
            "on stderr)\n", wrong);
  else
    fprintf(f, "# Out of bounds values : %lld %s\n", wrong,
            !o->check ? "(not checked)" : wrong ? "FAILED" : "OK");
  fprintf(f, "# Avg bus bandwidth    : %g \n", nbw ? bw / nbw : 0.0);
  fprintf(f, "#\n");
  fflush(f);
}

static void json_result(FILE *f, const char *name, const bench_result_t *r) {
  fprintf(f, ", \"%s\": {\"ok\": %s, \"time_us\": %.4f, \"algbw_GBps\": %.6f, "
             "\"busbw_GBps\": %.6f, \"wrong\": %lld}",
          name, r->ok ? "true" : "false", r->time_us, r->algbw, r->busbw, r->wrong);
}

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f);
    if ((unsigned char)*s >= 0x20) fputc(*s, f);
  }
  fputc('"', f);
}

int bench_report_json(const char *path, const bench_opts_t *o, const bench_ctx_t *x,
                      const bench_row_t *rows, int nrows, double first_us, double first_b_us) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "dlpg-bench: -J %s: cannot open for writing\n", path);
    return -1;
  }
  char date[64];
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
  fprintf(f, "{\"tool\": \"dlpg-bench\", \"date\": \"%s\", \"build\": ", date);
  json_string(f, build_info());
  fprintf(f, ",\n \"op\": \"%s\", \"dtype\": \"%s\", \"redop\": \"%s\", \"device\": \"%s\",\n",
          o->memcpy_ref ? "memcpy" : bench_op_name(o->op), o->ndtypes > 1 ? "all" : bench_dtype_name(o->dtypes[0]),
          !bench_op_has_redop(o->op) ? "none" : o->nredops > 1 ? "all" : bench_redop_name(o->redops[0]),
          o->cuda ? "cuda" : "cpu");
  fprintf(f, " \"ranks\": %d, \"gpus_per_rank\": %d, \"participants\": %d, \"busbw_factor\": %.6f,\n",
          x->world, o->gpus, x->nparts, bench_busbw_factor(o->op, x->nparts));
  fprintf(f, " \"launcher\": \"%s\", \"root\": %d, \"average\": %d, \"async\": %s, \"skew\": %d,",
          o->launched_by ? o->launched_by : "?", o->root, o->average, o->async ? "true" : "false",
          o->skew);
  fprintf(f, " \"warmup\": %d, \"iters\": %d, \"reps\": %d, \"check\": %s, \"baseline\": %s,\n",
          o->warmup, o->iters, o->reps, o->check ? "true" : "false",
          o->baseline ? "\"nccl\"" : "null");
  fprintf(f, " \"dlpg\": %s, \"first_op_us\": %.3f, \"baseline_first_op_us\": %.3f,\n",
          o->no_dlpg ? "false" : "true", first_us, first_b_us);
  fprintf(f, " \"rows\": [");
  for (int i = 0; i < nrows; i++) {
    const bench_row_t *r = &rows[i];
    fprintf(f, "%s\n  {\"size\": %zu, \"count\": %zu, \"warmup\": %d, \"iters\": %d, "
               "\"dtype\": \"%s\", \"redop\": \"%s\"",
            i ? "," : "", r->bytes, r->count, r->warmup, r->iters, bench_dtype_name(r->dtype),
            bench_op_has_redop(o->op) ? bench_redop_name(r->redop) : "none");
    /* "dlpg"/"baseline": out of place; "..._inplace": in place (when that ran). */
    if (!o->no_dlpg && r->ran[0]) json_result(f, o->memcpy_ref ? "memcpy" : "dlpg", &r->d[0]);
    if (!o->no_dlpg && r->ran[1]) json_result(f, "dlpg_inplace", &r->d[1]);
    if (o->baseline && r->ran[0]) json_result(f, "baseline", &r->b[0]);
    if (o->baseline && r->ran[1]) json_result(f, "baseline_inplace", &r->b[1]);
    fputc('}', f);
  }
  fprintf(f, "\n ]}\n");
  int bad = ferror(f);
  bad |= fclose(f) != 0;
  if (bad) fprintf(stderr, "dlpg-bench: -J %s: write failed\n", path);
  return bad ? -1 : 0;
}
