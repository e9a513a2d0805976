/* dlpg-bench entry point: options, and how ranks come to be.
 *
 * With -n N, this process is a launcher: it hosts the dlpg TCP store on 127.0.0.1 (port 0,
 * so the OS picks a free one) and starts N copies of itself (fork + exec of /proc/self/exe,
 * so every rank is a fresh process with no threads or CUDA state inherited), telling each
 * its rank and the store's address through the environment. Without -n, the process is one
 * rank of a job started elsewhere (torchrun, mpirun, a script) and reads RANK, WORLD_SIZE,
 * MASTER_ADDR and MASTER_PORT; it opens the env:// store itself (as
 * dlpg_group_create_from_env would) so the NCCL baseline and the result exchange can use it. */

#include <errno.h>
#include <getopt.h>
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
          "usage: dlpg-bench [options]\n"
          "  -b, --minbytes N     smallest size (K/M/G suffixes; default 8)\n"
          "  -e, --maxbytes N     largest size (default 32M)\n"
          "  -f, --stepfactor F   size multiplier per step (default 4)\n"
          "  -o, --op OP          allreduce|broadcast|reduce|allgather|reduce_scatter|alltoall|sendrecv\n"
          "  -d, --datatype T     float32|float16|bfloat16|int32|int64|float64|int8|uint8\n"
          "  -r, --redop R        sum|prod|min|max|avg (default sum)\n"
          "  -n, --nranks N       start N local ranks (else RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT)\n"
          "  -D, --device D       cpu|cuda (default cpu)\n"
          "  -g, --ngpus G        CUDA tensors (GPUs) per process (default 1)\n"
          "  -w, --warmup_iters N warmup operations per size (default 5)\n"
          "  -i, --iters N        operations per timed loop (default 20)\n"
          "  -R, --reps N         timed loops per size; the median is reported (default 5)\n"
          "  -c, --check 0|1      check results (default 1)\n"
          "  -J, --json PATH      write every row as JSON (rank 0)\n"
          "      --root R         root rank of broadcast and reduce (default 0)\n"
          "      --inplace        outputs == NULL (allreduce, broadcast, reduce)\n"
          "  -T, --timeout S      group and store timeout in seconds (default 120)\n"
          "      --baseline nccl  also run the loop on NCCL directly (CUDA only)\n"
          "      --no-dlpg        run the baseline only\n"
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

static int parse_int(const char *s, int lo, int *out) {
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (end == s || *end || v < lo || v > 1000000000L) return -1;
  *out = (int)v;
  return 0;
}

static int bad(const char *opt, const char *val) {
  fprintf(stderr, "dlpg-bench: bad value for %s: '%s'\n", opt, val);
  usage(stderr);
  return -1;
}

static int parse_opts(int argc, char **argv, bench_opts_t *o) {
  static const struct option longs[] = {
      {"minbytes", 1, 0, 'b'}, {"maxbytes", 1, 0, 'e'}, {"stepfactor", 1, 0, 'f'},
      {"op", 1, 0, 'o'}, {"datatype", 1, 0, 'd'}, {"redop", 1, 0, 'r'}, {"nranks", 1, 0, 'n'},
      {"device", 1, 0, 'D'}, {"ngpus", 1, 0, 'g'}, {"warmup_iters", 1, 0, 'w'},
      {"iters", 1, 0, 'i'}, {"reps", 1, 0, 'R'}, {"check", 1, 0, 'c'}, {"json", 1, 0, 'J'},
      {"timeout", 1, 0, 'T'}, {"root", 1, 0, 1}, {"baseline", 1, 0, 2}, {"no-dlpg", 0, 0, 3}, {"inplace", 0, 0, 4},
      {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
  memset(o, 0, sizeof *o);
  o->min_bytes = 8;
  o->max_bytes = 32u << 20;
  o->factor = 4;
  o->op = BENCH_ALLREDUCE;
  o->dtype = BENCH_F32;
  o->redop = DLPG_SUM;
  o->gpus = 1;
  o->warmup = 5;
  o->iters = 20;
  o->reps = 5;
  o->check = 1;
  o->timeout_s = 120;
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "b:e:f:o:d:r:n:D:g:w:i:R:c:J:T:h", longs, NULL)) != -1) {
    switch (c) {
      case 'b': if (parse_size(optarg, &o->min_bytes)) return bad("-b", optarg); break;
      case 'e': if (parse_size(optarg, &o->max_bytes)) return bad("-e", optarg); break;
      case 'f': {
        char *end = NULL;
        o->factor = strtod(optarg, &end);
        if (end == optarg || *end || o->factor < 1.0) return bad("-f", optarg);
        break;
      }
      case 'o': if (bench_op_parse(optarg, &o->op)) return bad("-o", optarg); break;
      case 'd': if (bench_dtype_parse(optarg, &o->dtype)) return bad("-d", optarg); break;
      case 'r': if (bench_redop_parse(optarg, &o->redop)) return bad("-r", optarg); break;
      case 'n': if (parse_int(optarg, 1, &o->nlocal)) return bad("-n", optarg); break;
      case 'D':
        if (!strcmp(optarg, "cpu")) o->cuda = 0;
        else if (!strcmp(optarg, "cuda") || !strcmp(optarg, "gpu")) o->cuda = 1;
        else return bad("-D", optarg);
        break;
      case 'g':
        if (parse_int(optarg, 1, &o->gpus) || o->gpus > BENCH_MAX_GPUS) return bad("-g", optarg);
        break;
      case 'w': if (parse_int(optarg, 0, &o->warmup)) return bad("-w", optarg); break;
      case 'i': if (parse_int(optarg, 1, &o->iters)) return bad("-i", optarg); break;
      case 'R': if (parse_int(optarg, 1, &o->reps)) return bad("-R", optarg); break;
      case 'c': if (parse_int(optarg, 0, &o->check) || o->check > 1) return bad("-c", optarg); break;
      case 'J': o->json_path = optarg; break;
      case 'T': {
        char *end = NULL;
        o->timeout_s = strtod(optarg, &end);
        if (end == optarg || *end || o->timeout_s <= 0) return bad("-T", optarg);
        break;
      }
      case 1: if (parse_int(optarg, 0, &o->root)) return bad("--root", optarg); break;
      case 2:
        if (strcmp(optarg, "nccl")) return bad("--baseline", optarg);
        o->baseline = 1;
        break;
      case 3: o->no_dlpg = 1; break;
      case 4: o->inplace = 1; break;
      case 'h': usage(stdout); exit(0);
      default: usage(stderr); return -1;
    }
  }
  if (optind < argc) return bad("argument", argv[optind]);
  if (o->min_bytes > o->max_bytes) {
    fprintf(stderr, "dlpg-bench: -b %zu is larger than -e %zu\n", o->min_bytes, o->max_bytes);
    return -1;
  }
  if (o->min_bytes == 0) o->min_bytes = 1;
  if ((o->baseline || o->gpus > 1) && !o->cuda) {
    fprintf(stderr, "dlpg-bench: --baseline nccl and -g > 1 need -D cuda\n");
    return -1;
  }
  if (o->no_dlpg && !o->baseline) {
    fprintf(stderr, "dlpg-bench: --no-dlpg needs --baseline nccl\n");
    return -1;
  }
  return 0;
}

static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  int out;
  return v && parse_int(v, 0, &out) == 0 ? out : dflt;
}

/* One rank of a job: open the store, run the sweep. */
static int run_rank(const bench_opts_t *o, const char *url) {
  int rank = env_int("RANK", -1), world = env_int("WORLD_SIZE", -1);
  if (rank < 0 || world < 1 || rank >= world) {
    fprintf(stderr, "dlpg-bench: without -n, RANK and WORLD_SIZE must be set (RANK=%s "
                    "WORLD_SIZE=%s)\n", getenv("RANK") ? getenv("RANK") : "unset",
            getenv("WORLD_SIZE") ? getenv("WORLD_SIZE") : "unset");
    return 1;
  }
  int local = env_int("LOCAL_RANK", rank);
  dlpg_store_t *store = NULL;
  dlpg_status_t st = dlpg_store_open(url, o->timeout_s, &store);
  if (st != DLPG_OK) {
    fprintf(stderr, "dlpg-bench: rank %d: dlpg_store_open(%s): %s: %s\n", rank, url,
            dlpg_status_name(st), dlpg_last_error());
    return 1;
  }
  int rc = bench_rank_main(o, store, rank, world, local);
  dlpg_store_close(store);
  return rc;
}

/* The launcher of -n N: host the store, start the ranks, wait for them. When one fails,
 * the others get a grace period to report, then are killed (by pid: only our children). */
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
  const char *child_url = getenv(CHILD_STORE_ENV);
  if (child_url && *child_url) return run_rank(&o, child_url);
  if (o.nlocal > 0) return launch(&o, argv);
  return run_rank(&o, "env://");
}
