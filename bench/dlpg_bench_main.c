/* dlpg-bench entry point: options, the collective, and how ranks come to be.
 *
 * The command line is nccl-tests': every short option it has means what it means there
 * (-b -e -i -f sizes and step, -g GPUs per rank, -n iterations, -w warmup, -c check, -o
 * reduce op, -d dtype, -r root, -a averaging, -z blocking, -T timeout, -G CUDA-graph
 * launches, -J JSON file); the ones dlpg has nothing behind are refused with a message, never
 * given another meaning. dlpg's own options are long ones (--nranks, --reps, --device, ...).
 * The collective is a subcommand (`dlpg-bench allreduce ...`) or the program's name, as
 * nccl-tests has one binary per collective (dlpg_allreduce_perf -> allreduce).
 *
 * With --nranks N, this process is a launcher: it hosts the dlpg TCP store on 127.0.0.1
 * (port 0, so the OS picks a free one) and starts N copies of itself (fork + exec of
 * /proc/self/exe, so every rank is a fresh process with no threads or CUDA state inherited),
 * telling each its rank and the store's address through the environment. Without it, the
 * process is one rank of a job a launcher started (dlpg_bench_launch.c says which). */

#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "dlpg_bench.h"

#define CHILD_STORE_ENV "DLPG_BENCH_STORE_URL"

static void usage(FILE *f) {
  fprintf(f,
          "usage: dlpg-bench COLLECTIVE [options]   or   dlpg_<collective>_perf [options]\n"
          "  COLLECTIVE: allreduce|all_gather|broadcast|reduce_scatter|reduce|alltoall|sendrecv|\n"
          "              gather|scatter|allgatherv|alltoallv\n"
          "nccl-tests' options (same letters, same meaning):\n"
          "  -b, --minbytes N       smallest size (K/M/G suffixes; default 8)\n"
          "  -e, --maxbytes N       largest size (default 32M)\n"
          "  -f, --stepfactor F     multiply the size by F each step when F > 1 (default 4,\n"
          "                         or 1 when -i is given)\n"
          "  -i, --stepbytes N      else add N bytes each step\n"
          "  -g, --ngpus G          CUDA tensors (GPUs) per rank (default 1)\n"
          "  -n, --iters N          operations per timed loop (default 20)\n"
          "  -w, --warmup_iters N   warmup operations per size (default 5)\n"
          "  -c, --check 0|1        check every result (default 1)\n"
          "  -o, --op OP            sum|prod|min|max|avg|all (default sum)\n"
          "  -d, --datatype T       float|half|bfloat16|double|int8|uint8|int32|uint32|int64|\n"
          "                         uint64|all (also float32, float16, float64; default float)\n"
          "  -r, --root R           root rank of broadcast and reduce (default 0)\n"
          "  -a, --average 0-3      time reported: 0 rank 0's, 1 mean over ranks (default),\n"
          "                         2 minimum, 3 maximum\n"
          "  -z, --blocking 0|1     1: wait for each operation before issuing the next\n"
          "  -T, --timeout S        group and store timeout in seconds (default 120)\n"
          "  -G, --cudagraph N      0 only: dlpg-bench does not capture CUDA graphs\n"
          "  -J, --output_file PATH write every row as JSON (rank 0; also --json)\n"
          "  -t, --nthreads 1       one thread per rank (more ranks: --nranks or a launcher)\n"
          "  -m, --agg_iters 1      one operation per issue\n"
          "  -p, --parallel_init 0|1  accepted; one thread per rank has nothing to parallelise\n"
          "  -y, --stream_null 0, -C, --report_cputime 0: only 0 is offered\n"
          "  -N and -R (run cycles, buffer registration) have no dlpg meaning and are refused\n"
          "dlpg's options:\n"
          "      --nranks N         start N local ranks here (else: one rank of a torchrun or\n"
          "                         mpirun job)\n"
          "      --reps N           timed loops per size; the median is reported (default 5)\n"
          "      --device D         cpu|cuda (default cpu)\n"
          "      --shared-gpu       cuda: every rank on GPU 0 (..G-1), which the CUDA IPC path\n"
          "                         serves (NCCL refuses ranks sharing a GPU)\n"
          "      --iters-bytes B    per size, -n and -w at most B / size (at least 1), so\n"
          "                         one run spans small and large sizes\n"
          "      --memcpy           no ranks: memcpy of each size on one core (the memory-speed\n"
          "                         reference), in the same table\n"
          "      --async            issue every operation with a work handle and\n"
          "                         dlpg_work_wait it before the next\n"
          "      --inplace          in-place columns only (outputs == NULL)\n"
          "      --outofplace       out-of-place columns only\n"
          "      --baseline nccl    also run the loop on NCCL directly (CUDA only)\n"
          "      --no-dlpg          run the baseline only\n"
          "      --skew K           allgatherv, alltoallv: the first half of the ranks (rank 0\n"
          "                         at least) K times the others' blocks (default 1: uniform);\n"
          "                         allgatherv: what they contribute, alltoallv: what every\n"
          "                         rank sends them (the receivers are skewed)\n"
          "sizes and busbw follow nccl-tests: a size counts allgather(v)'s and gather's\n"
          "output, scatter's input, alltoall(v)'s per-rank input (skewed: the mean buffer);\n"
          "busbw = algbw x (n-1)/n for all of these (nccl-tests' factor; OSU's 'size' is\n"
          "instead one block, the size here / n)\n"
          "  -h, --help\n");
}

/* "256M" -> 268435456 (binary suffixes, as nccl-tests). */
static int parse_size(const char *s, size_t *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || v < 0) return -1;
  double mul = 1;
  switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    default: break;
  }
  if (*end == 'B' || *end == 'b') end++;
  if (*end) return -1;
  *out = (size_t)(v * mul);
  return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

static int bad(const char *opt, const char *val, const char *want) {
  fprintf(stderr, "dlpg-bench: bad value for %s: '%s' (%s)\n", opt, val, want);
  return -1;
}

/* An nccl-tests option whose only value dlpg-bench offers is `only`. */
static int only(const char *opt, const char *val, int lo, int hi, const char *why) {
  int v;
  if (parse_int(val, 0, 1000000000, &v) != 0) return bad(opt, val, "an integer");
  if (v < lo || v > hi) {
    fprintf(stderr, "dlpg-bench: %s %s is not supported: %s\n", opt, val, why);
    return -1;
  }
  return 0;
}

static int parse_dtypes(const char *s, bench_opts_t *o) {
  if (!strcmp(s, "all")) {
    o->ndtypes = BENCH_DTYPE_COUNT;
    for (int i = 0; i < BENCH_DTYPE_COUNT; i++) o->dtypes[i] = (bench_dtype_t)i;
    return 0;
  }
  o->ndtypes = 1;
  return bench_dtype_parse(s, &o->dtypes[0]);
}

static int parse_redops(const char *s, bench_opts_t *o) {
  if (!strcmp(s, "all")) {
    /* nccl-tests' order. */
    static const dlpg_reduce_op_t all[BENCH_REDOP_COUNT] = {DLPG_SUM, DLPG_PROD, DLPG_MAX,
                                                            DLPG_MIN, DLPG_AVG};
    o->nredops = BENCH_REDOP_COUNT;
    memcpy(o->redops, all, sizeof all);
    return 0;
  }
  o->nredops = 1;
  return bench_redop_parse(s, &o->redops[0]);
}

/* The collective a program name stands for: dlpg_allreduce_perf, dlpg_all_gather_perf, ...
 * (nccl-tests' binary names with a dlpg_ prefix). Returns 0 when argv0 is one of them. */
static int op_from_program(const char *argv0, bench_op_t *op) {
  char buf[128];
  snprintf(buf, sizeof buf, "%s", argv0);
  const char *base = basename(buf);
  size_t n = strlen(base);
  const char *pre = "dlpg_", *suf = "_perf";
  if (n <= strlen(pre) + strlen(suf) || strncmp(base, pre, strlen(pre)) != 0 ||
      strcmp(base + n - strlen(suf), suf) != 0)
    return -1;
  char name[128];
  snprintf(name, sizeof name, "%.*s", (int)(n - strlen(pre) - strlen(suf)), base + strlen(pre));
  return bench_op_parse(name, op);
}

enum {
  OPT_NRANKS = 256, OPT_REPS, OPT_DEVICE, OPT_ASYNC, OPT_INPLACE, OPT_OUTOFPLACE, OPT_BASELINE,
  OPT_NO_DLPG, OPT_ITERS_BYTES, OPT_MEMCPY, OPT_SKEW, OPT_SHARED_GPU
};

static int parse_opts(int argc, char **argv, bench_opts_t *o) {
  static const struct option longs[] = {
      /* nccl-tests' long names */
      {"nthreads", 1, 0, 't'}, {"ngpus", 1, 0, 'g'}, {"minbytes", 1, 0, 'b'},
      {"maxbytes", 1, 0, 'e'}, {"stepbytes", 1, 0, 'i'}, {"stepfactor", 1, 0, 'f'},
      {"iters", 1, 0, 'n'}, {"agg_iters", 1, 0, 'm'}, {"warmup_iters", 1, 0, 'w'},
      {"run_cycles", 1, 0, 'N'}, {"parallel_init", 1, 0, 'p'}, {"check", 1, 0, 'c'},
      {"op", 1, 0, 'o'}, {"datatype", 1, 0, 'd'}, {"root", 1, 0, 'r'},
      {"blocking", 1, 0, 'z'}, {"stream_null", 1, 0, 'y'}, {"timeout", 1, 0, 'T'},
      {"cudagraph", 1, 0, 'G'}, {"report_cputime", 1, 0, 'C'}, {"average", 1, 0, 'a'},
      {"local_register", 1, 0, 'R'}, {"output_file", 1, 0, 'J'}, {"json", 1, 0, 'J'},
      {"help", 0, 0, 'h'},
      /* dlpg's */
      {"nranks", 1, 0, OPT_NRANKS}, {"reps", 1, 0, OPT_REPS}, {"device", 1, 0, OPT_DEVICE},
      {"async", 0, 0, OPT_ASYNC}, {"inplace", 0, 0, OPT_INPLACE},
      {"outofplace", 0, 0, OPT_OUTOFPLACE}, {"baseline", 1, 0, OPT_BASELINE},
      {"no-dlpg", 0, 0, OPT_NO_DLPG}, {"iters-bytes", 1, 0, OPT_ITERS_BYTES},
      {"memcpy", 0, 0, OPT_MEMCPY}, {"skew", 1, 0, OPT_SKEW},
      {"shared-gpu", 0, 0, OPT_SHARED_GPU}, {0, 0, 0, 0}};
  memset(o, 0, sizeof *o);
  o->min_bytes = 8;
  o->max_bytes = 32u << 20;
  o->factor = -1; /* not given */
  o->op = BENCH_ALLREDUCE;
  o->ndtypes = 1;
  o->dtypes[0] = BENCH_F32;
  o->nredops = 1;
  o->redops[0] = DLPG_SUM;
  o->gpus = 1;
  o->warmup = 5;
  o->iters = 20;
  o->reps = 5;
  o->check = 1;
  o->average = 1;
  o->run_oop = o->run_ip = 1;
  o->timeout_s = 120;
  o->skew = 1;
  int have_op = op_from_program(argv[0], &o->op) == 0, step_given = 0;
  /* The subcommand: a first argument that is not an option. */
  int first = 1;
  if (argc > 1 && argv[1][0] != '-') {
    bench_op_t op;
    if (bench_op_parse(argv[1], &op) != 0) {
      fprintf(stderr, "dlpg-bench: unknown collective '%s' (allreduce, all_gather, broadcast, "
                      "reduce_scatter, reduce, alltoall, sendrecv, gather, scatter, "
                      "allgatherv, alltoallv)\n", argv[1]);
      return -1;
    }
    if (have_op && op != o->op) {
      fprintf(stderr, "dlpg-bench: %s measures %s, not the subcommand's %s\n", argv[0],
              bench_op_name(o->op), argv[1]);
      return -1;
    }
    o->op = op;
    first = 2;
  }
  int c;
  optind = first;
  opterr = 1;
  /* "+": stop at the first non-option, so a stray word is reported below, not permuted. */
  const char *shorts = "+t:g:b:e:i:f:n:m:w:N:p:c:o:d:r:z:y:T:G:C:a:R:J:h";
  while ((c = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
    switch (c) {
      case 'b': if (parse_size(optarg, &o->min_bytes)) return bad("-b", optarg, "a size"); break;
      case 'e': if (parse_size(optarg, &o->max_bytes)) return bad("-e", optarg, "a size"); break;
      case 'i':
        if (parse_size(optarg, &o->step_bytes)) return bad("-i", optarg, "a size");
        step_given = 1;
        break;
      case 'f': {
        char *end = NULL;
        o->factor = strtod(optarg, &end);
        if (end == optarg || *end || o->factor < 1.0) return bad("-f", optarg, "a number >= 1");
        break;
      }
      case 'g':
        if (parse_int(optarg, 1, BENCH_MAX_GPUS, &o->gpus)) return bad("-g", optarg, "1..16");
        break;
      case 'n': if (parse_int(optarg, 1, 1000000000, &o->iters)) return bad("-n", optarg, ">= 1"); break;
      case 'w': if (parse_int(optarg, 0, 1000000000, &o->warmup)) return bad("-w", optarg, ">= 0"); break;
      case 'c': if (parse_int(optarg, 0, 1, &o->check)) return bad("-c", optarg, "0 or 1"); break;
      case 'o':
        if (parse_redops(optarg, o)) return bad("-o", optarg, "sum, prod, min, max, avg or all");
        break;
      case 'd':
        if (parse_dtypes(optarg, o)) return bad("-d", optarg, "a type name or all; see --help");
        break;
      case 'r': if (parse_int(optarg, 0, 1 << 30, &o->root)) return bad("-r", optarg, ">= 0"); break;
      case 'a': if (parse_int(optarg, 0, 3, &o->average)) return bad("-a", optarg, "0, 1, 2 or 3"); break;
      case 'z': if (parse_int(optarg, 0, 1, &o->blocking)) return bad("-z", optarg, "0 or 1"); break;
      case 'T': {
        char *end = NULL;
        o->timeout_s = strtod(optarg, &end);
        if (end == optarg || *end || o->timeout_s <= 0) return bad("-T", optarg, "seconds > 0");
        break;
      }
      case 'G':
        if (only("-G", optarg, 0, 0, "dlpg-bench issues every operation directly and does "
                                     "not capture CUDA graphs; use -G 0"))
          return -1;
        break;
      case 'J': o->json_path = optarg; break;
      case 't':
        if (only("-t", optarg, 1, 1, "dlpg-bench runs one thread per rank; start more ranks "
                                     "with --nranks or a launcher"))
          return -1;
        break;
      case 'm':
        if (only("-m", optarg, 1, 1, "dlpg-bench issues one operation at a time")) return -1;
        break;
      case 'p': if (only("-p", optarg, 0, 1, "0 or 1")) return -1; break;
      case 'y':
        if (only("-y", optarg, 0, 0, "dlpg-bench always uses its own streams")) return -1;
        break;
      case 'C':
        if (only("-C", optarg, 0, 0, "dlpg-bench reports host (wall-clock) time only")) return -1;
        break;
      case 'N':
        fprintf(stderr, "dlpg-bench: -N (nccl-tests' run cycles) has no dlpg-bench meaning; "
                        "for more timed loops per size use --reps\n");
        return -1;
      case 'R':
        fprintf(stderr, "dlpg-bench: -R (nccl-tests' buffer registration) has no dlpg-bench "
                        "meaning; for repetitions use --reps\n");
        return -1;
      case OPT_NRANKS:
        if (parse_int(optarg, 1, 4096, &o->nlocal)) return bad("--nranks", optarg, "1..4096");
        break;
      case OPT_REPS: if (parse_int(optarg, 1, 1000000, &o->reps)) return bad("--reps", optarg, ">= 1"); break;
      case OPT_DEVICE:
        if (!strcmp(optarg, "cpu")) o->cuda = 0;
        else if (!strcmp(optarg, "cuda") || !strcmp(optarg, "gpu")) o->cuda = 1;
        else return bad("--device", optarg, "cpu or cuda");
        break;
      case OPT_ASYNC: o->async = 1; break;
      case OPT_INPLACE: o->run_oop = 0; break;
      case OPT_OUTOFPLACE: o->run_ip = 0; break;
      case OPT_BASELINE:
        if (strcmp(optarg, "nccl")) return bad("--baseline", optarg, "nccl");
        o->baseline = 1;
        break;
      case OPT_NO_DLPG: o->no_dlpg = 1; break;
      case OPT_ITERS_BYTES:
        if (parse_size(optarg, &o->iters_bytes) || o->iters_bytes == 0)
          return bad("--iters-bytes", optarg, "a size > 0");
        break;
      case OPT_MEMCPY: o->memcpy_ref = 1; break;
      case OPT_SHARED_GPU: o->shared_gpu = 1; break;
      case OPT_SKEW: if (parse_int(optarg, 1, 1024, &o->skew)) return bad("--skew", optarg, "1..1024"); break;
      case 'h': usage(stdout); exit(0);
      default:
        fprintf(stderr, "dlpg-bench: see --help\n");
        return -1;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "dlpg-bench: unexpected argument '%s' (the collective comes first: "
                    "dlpg-bench %s [options])\n", argv[optind], argv[optind]);
    return -1;
  }
  if (!o->run_oop && !o->run_ip) {
    fprintf(stderr, "dlpg-bench: --inplace and --outofplace together leave nothing to run\n");
    return -1;
  }
  if (!o->run_oop && !bench_op_has_inplace(o->op)) {
    fprintf(stderr, "dlpg-bench: --inplace: dlpg runs allreduce, broadcast and reduce in "
                    "place, not %s\n", bench_op_name(o->op));
    return -1;
  }
  /* nccl-tests' rule: a factor above 1 multiplies, else -i adds. */
  if (o->factor < 0) o->factor = step_given ? 1.0 : 4.0;
  if (o->factor <= 1.0 && o->step_bytes == 0 && o->min_bytes != o->max_bytes) {
    fprintf(stderr, "dlpg-bench: -f %g with -i 0 never reaches -e; give -f > 1 or -i > 0\n",
            o->factor);
    return -1;
  }
  if (o->min_bytes > o->max_bytes) {
    fprintf(stderr, "dlpg-bench: -b %zu is larger than -e %zu\n", o->min_bytes, o->max_bytes);
    return -1;
  }
  if (o->min_bytes == 0) o->min_bytes = 1;
  if (o->shared_gpu && (!o->cuda || o->baseline)) {
    fprintf(stderr, "dlpg-bench: --shared-gpu needs --device cuda and no --baseline (NCCL "
            "refuses ranks that share a GPU)\n");
    return -1;
  }
  if ((o->baseline || o->gpus > 1) && !o->cuda) {
    fprintf(stderr, "dlpg-bench: --baseline nccl and -g > 1 need --device cuda\n");
    return -1;
  }
  if (o->no_dlpg && !o->baseline) {
    fprintf(stderr, "dlpg-bench: --no-dlpg needs --baseline nccl\n");
    return -1;
  }
  if (o->memcpy_ref && (o->cuda || o->baseline || o->nlocal > 0)) {
    fprintf(stderr, "dlpg-bench: --memcpy runs in this process on the CPU: no --device cuda, "
                    "--baseline or --nranks\n");
    return -1;
  }
  if (o->skew != 1 && o->op != BENCH_ALLGATHERV && o->op != BENCH_ALLTOALLV) {
    fprintf(stderr, "dlpg-bench: --skew %d: only allgatherv and alltoallv have uneven blocks, "
                    "not %s\n", o->skew, bench_op_name(o->op));
    return -1;
  }
  if (o->baseline && o->op >= BENCH_GATHER) {
    fprintf(stderr, "dlpg-bench: --baseline nccl: no NCCL loop for %s yet (allreduce, "
                    "broadcast, reduce, all_gather, reduce_scatter, alltoall, sendrecv)\n",
            bench_op_name(o->op));
    return -1;
  }
  if (o->no_dlpg && o->async) {
    fprintf(stderr, "dlpg-bench: --async applies to dlpg operations, and --no-dlpg runs none\n");
    return -1;
  }
  o->dtype = o->dtypes[0];
  o->redop = o->redops[0];
  return 0;
}

/* One rank of a job: open the store, run the sweep. */
static int run_rank(bench_opts_t *o, bench_job_t *j) {
  dlpg_store_t *store = NULL;
  if (bench_job_open_store(j, o->timeout_s, &store) != 0) return 1;
  o->launched_by = j->via;
  int rc = bench_rank_main(o, store, j->rank, j->world, j->local_rank);
  dlpg_store_close(store);
  bench_job_done(j);
  return rc;
}

/* A rank --nranks started: its rank and the store come from the launcher below. */
static int run_child(bench_opts_t *o, const char *url) {
  bench_job_t j;
  memset(&j, 0, sizeof j);
  const char *r = getenv("RANK"), *w = getenv("WORLD_SIZE");
  if (!r || !w || parse_int(r, 0, 1 << 30, &j.rank) || parse_int(w, 1, 1 << 30, &j.world)) {
    fprintf(stderr, "dlpg-bench: a rank started by --nranks lacks RANK or WORLD_SIZE\n");
    return 1;
  }
  j.local_rank = j.rank;
  j.via = "--nranks";
  snprintf(j.url, sizeof j.url, "%s", url);
  return run_rank(o, &j);
}

/* The launcher of --nranks N: host the store, start the ranks, wait for them. When one
 * fails, the others get a grace period to report, then are killed (by pid: only our
 * children). */
static int launch(const bench_opts_t *o, char **argv) {
  dlpg_store_t *store = NULL;
  int port = 0, n = o->nlocal;
  dlpg_status_t st = dlpg_store_open("tcp://127.0.0.1:0?serve=1", o->timeout_s, &store);
  if (st == DLPG_OK) st = dlpg_store_port(store, &port);
  if (st != DLPG_OK) {
    fprintf(stderr, "dlpg-bench: hosting the store: %s: %s\n", dlpg_status_name(st),
            dlpg_last_error());
    dlpg_store_close(store);
    return 1;
  }
  pid_t *pids = calloc((size_t)n, sizeof(pid_t));
  int *done = calloc((size_t)n, sizeof(int));
  int rc = 0, left = 0;
  char url[64];
  snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
  fflush(NULL);
  for (int r = 0; pids && done && r < n; r++) {
    pid_t p = fork();
    if (p == 0) {
      char buf[16];
      setenv(CHILD_STORE_ENV, url, 1);
      snprintf(buf, sizeof buf, "%d", r);
      setenv("RANK", buf, 1);
      setenv("LOCAL_RANK", buf, 1);
      snprintf(buf, sizeof buf, "%d", n);
      setenv("WORLD_SIZE", buf, 1);
      /* argv[0] travels unchanged, so a dlpg_<op>_perf name still picks the collective. */
      execv("/proc/self/exe", argv);
      fprintf(stderr, "dlpg-bench: exec of rank %d failed: %s\n", r, strerror(errno));
      _exit(127);
    }
    if (p < 0) {
      fprintf(stderr, "dlpg-bench: fork of rank %d failed: %s\n", r, strerror(errno));
      rc = 1;
      break;
    }
    pids[r] = p;
    left++;
  }
  double kill_at = -1;
  while (left > 0) {
    int status;
    pid_t p = waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      for (int r = 0; r < n; r++) {
        if (pids[r] != p || done[r]) continue;
        done[r] = 1;
        left--;
        int failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
        if (failed) {
          if (WIFSIGNALED(status)) fprintf(stderr, "dlpg-bench: rank %d died of signal %d\n", r, WTERMSIG(status));
          else fprintf(stderr, "dlpg-bench: rank %d exited with %d\n", r, WEXITSTATUS(status));
          rc = 1;
          if (kill_at < 0) kill_at = bench_now() + 10.0;
        }
      }
      continue;
    }
    if (p < 0 && errno != EINTR) break;
    if (kill_at >= 0 && bench_now() > kill_at) {
      for (int r = 0; r < n; r++)
        if (pids[r] > 0 && !done[r]) kill(pids[r], SIGKILL);
      kill_at = bench_now() + 1e9;
    }
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  if (!pids || !done) rc = 1;
  free(pids);
  free(done);
  dlpg_store_close(store);
  return rc;
}

int main(int argc, char **argv) {
  bench_opts_t o;
  if (parse_opts(argc, argv, &o) != 0) return 2;
  if (o.memcpy_ref) return bench_memcpy_main(&o);
  const char *child_url = getenv(CHILD_STORE_ENV);
  if (child_url && *child_url) return run_child(&o, child_url);
  if (o.nlocal > 0) return launch(&o, argv);
  bench_job_t j;
  int found = bench_job_detect(&j);
  if (found < 0) return 2;
  if (found == 0) {
    fprintf(stderr, "dlpg-bench: no ranks: give --nranks N, or start it under torchrun "
                    "(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or mpirun\n");
    return 2;
  }
  return run_rank(&o, &j);
}
