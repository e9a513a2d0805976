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
    case BENCH_ALLTOALL: return (double)(n - 1) / n;
    default: return 1.0;
  }
}

static int has_redop(bench_op_t op) {
  return op == BENCH_ALLREDUCE || op == BENCH_REDUCE || op == BENCH_REDUCE_SCATTER;
}

static const char *build_info(void) {
  const char *info = NULL;
  return dlpg_get_build_info(&info) == DLPG_OK && info ? info : "?";
}

void bench_report_header(FILE *f, const bench_opts_t *o, const bench_ctx_t *x) {
  fprintf(f, "# dlpg-bench: %s, %s, %d rank(s) x %d %s tensor(s) = %d participants\n",
          bench_op_name(o->op), bench_dtype_name(o->dtype), x->world, o->gpus,
          o->cuda ? "cuda" : "cpu", x->nparts);
  fprintf(f, "# %s, warmup %d, iters %d, median of %d repetitions, check %s, %s\n",
          o->inplace ? "in place" : "out of place", o->warmup, o->iters, o->reps,
          o->check ? "on" : "off", build_info());
  fprintf(f, "# time = host time of iters back-to-back ops + one completion wait, / iters\n");
  fprintf(f, "#%13s %12s %9s %6s", "size(B)", "count", "type", "redop");
  fprintf(f, " %10s %11s %11s %7s", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  if (o->baseline)
    fprintf(f, " | %10s %11s %11s %7s | %8s %8s", "nccl(us)", "algbw(GB/s)", "busbw(GB/s)",
            "#wrong", "time x", "busbw x");
  fputc('\n', f);
  fflush(f);
}

static void result_cols(FILE *f, const bench_result_t *r, int on) {
  if (!on) {
    fprintf(f, " %10s %11s %11s %7s", "-", "-", "-", "-");
  } else if (!r->ok) {
    fprintf(f, " %10s %11s %11s %7s", "failed", "-", "-", "-");
  } else {
    char w[24];
    if (r->wrong < 0) snprintf(w, sizeof w, "N/A");
    else snprintf(w, sizeof w, "%lld", r->wrong);
    fprintf(f, " %10.2f %11.3f %11.3f %7s", r->time_us, r->algbw, r->busbw, w);
  }
}

void bench_report_row(FILE *f, const bench_opts_t *o, const bench_row_t *r) {
  fprintf(f, " %13zu %12zu %9s %6s", r->bytes, r->count, bench_dtype_name(o->dtype),
          has_redop(o->op) ? bench_redop_name(o->redop) : "none");
  result_cols(f, &r->d, !o->no_dlpg);
  if (o->baseline) {
    fputs(" |", f);
    result_cols(f, &r->b, 1);
    if (!o->no_dlpg && r->d.ok && r->b.ok && r->b.time_us > 0 && r->b.busbw > 0)
      fprintf(f, " | %8.3f %8.3f", r->d.time_us / r->b.time_us, r->d.busbw / r->b.busbw);
    else
      fprintf(f, " | %8s %8s", "-", "-");
  }
  fputc('\n', f);
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
          bench_op_name(o->op), bench_dtype_name(o->dtype),
          has_redop(o->op) ? bench_redop_name(o->redop) : "none", o->cuda ? "cuda" : "cpu");
  fprintf(f, " \"ranks\": %d, \"gpus_per_rank\": %d, \"participants\": %d, \"busbw_factor\": %.6f,\n",
          x->world, o->gpus, x->nparts, bench_busbw_factor(o->op, x->nparts));
  fprintf(f, " \"inplace\": %s,", o->inplace ? "true" : "false");
  fprintf(f, " \"warmup\": %d, \"iters\": %d, \"reps\": %d, \"check\": %s, \"baseline\": %s,\n",
          o->warmup, o->iters, o->reps, o->check ? "true" : "false",
          o->baseline ? "\"nccl\"" : "null");
  fprintf(f, " \"dlpg\": %s, \"first_op_us\": %.3f, \"baseline_first_op_us\": %.3f,\n",
          o->no_dlpg ? "false" : "true", first_us, first_b_us);
  fprintf(f, " \"rows\": [");
  for (int i = 0; i < nrows; i++) {
    fprintf(f, "%s\n  {\"size\": %zu, \"count\": %zu", i ? "," : "", rows[i].bytes, rows[i].count);
    if (!o->no_dlpg) json_result(f, "dlpg", &rows[i].d);
    if (o->baseline) json_result(f, "baseline", &rows[i].b);
    fputc('}', f);
  }
  fprintf(f, "\n ]}\n");
  int bad = ferror(f);
  bad |= fclose(f) != 0;
  if (bad) fprintf(stderr, "dlpg-bench: -J %s: write failed\n", path);
  return bad ? -1 : 0;
}
