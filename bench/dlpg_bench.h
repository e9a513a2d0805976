/* dlpg-bench: an nccl-tests-style sweep over dlpg operations, with an optional NCCL
 * baseline that runs the same loop on NCCL directly. This header is shared by the bench's
 * files only; the bench reaches the plugin through the public header alone.
 *
 * Files: dlpg_bench_main.c (options, the collective from a subcommand or the program name,
 * starting --nranks local ranks), dlpg_bench_launch.c (one rank of a launcher's job:
 * torchrun or mpirun), dlpg_bench_run.c (the sweep and the timing), dlpg_bench_data.c (dtypes, fill and check), dlpg_bench_mem.c (host and CUDA
 * buffers), dlpg_bench_ops.c (issuing dlpg operations), dlpg_bench_nccl.c (the baseline),
 * dlpg_bench_report.c (table and JSON). */
#ifndef DLPG_BENCH_H_
#define DLPG_BENCH_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "dlpg/dlpg.h"

#define BENCH_MAX_GPUS 16
/* Most ranks of allgatherv and alltoallv (their per-rank arrays live on the stack). */
#define BENCH_MAX_RANKS 4096

typedef enum bench_op {
  BENCH_ALLREDUCE, BENCH_BROADCAST, BENCH_REDUCE, BENCH_ALLGATHER,
  BENCH_REDUCE_SCATTER, BENCH_ALLTOALL, BENCH_SENDRECV,
  /* The rooted and uneven collectives (one tensor per rank). */
  BENCH_GATHER, BENCH_SCATTER, BENCH_ALLGATHERV, BENCH_ALLTOALLV, BENCH_OP_COUNT
} bench_op_t;

typedef enum bench_dtype {
  BENCH_F32, BENCH_F16, BENCH_BF16, BENCH_I32, BENCH_I64, BENCH_F64, BENCH_I8, BENCH_U8,
  BENCH_U32, BENCH_U64, BENCH_DTYPE_COUNT
} bench_dtype_t;

#define BENCH_REDOP_COUNT 5 /* sum, prod, min, max, avg: the ones nccl-tests' -o names */

/* Everything the command line says (nccl-tests' short options, dlpg's long ones). */
typedef struct bench_opts {
  size_t min_bytes, max_bytes;
  double factor;          /* -f: multiply the size by this each step when > 1 */
  size_t step_bytes;      /* -i: else add this (nccl-tests' rule) */
  bench_op_t op;          /* the subcommand or the program name (dlpg_<op>_perf) */
  /* -d and -o: one or, with "all", several; the sweep runs every pair. */
  int ndtypes, nredops;
  bench_dtype_t dtypes[BENCH_DTYPE_COUNT];
  dlpg_reduce_op_t redops[BENCH_REDOP_COUNT];
  bench_dtype_t dtype;    /* the pair being measured (set by the sweep) */
  dlpg_reduce_op_t redop;
  int nlocal;             /* --nranks: ranks to start here (0: one rank of a launcher's job) */
  int cuda;               /* --device cuda */
  int gpus;               /* -g: GPUs (tensors) per process */
  int warmup, iters, reps;
  size_t iters_bytes;     /* --iters-bytes B: per size, iters = clamp(B / size, 1, -n) */
  int memcpy_ref;         /* --memcpy: one process's single-core memcpy instead of dlpg */
  int shared_gpu;         /* --shared-gpu: every local rank drives GPUs 0..gpus-1 (the CUDA
                             IPC path; NCCL refuses ranks that share a GPU) */
  int check;              /* -c */
  int average;            /* -a: 0 rank 0's time, 1 mean over ranks, 2 min, 3 max */
  int blocking;           /* -z 1: wait for each operation before issuing the next */
  int async;              /* --async: every operation returns a work, waited before the next */
  int run_oop, run_ip;    /* which columns run: out of place, in place (--outofplace/--inplace) */
  int inplace;            /* the measurement being run is in place (outputs == NULL) */
  const char *json_path;  /* -J */
  int baseline;           /* --baseline nccl */
  int no_dlpg;            /* --no-dlpg */
  double timeout_s;       /* -T */
  int root;               /* -r */
  int skew;               /* --skew K: allgatherv/alltoallv blocks of the first half of the
                             ranks K times the others' (1: uniform; bench_weight) */
  const char *launched_by; /* "--nranks", "torchrun", "mpirun": printed in the header */
} bench_opts_t;

/* One process's view of the run. */
typedef struct bench_ctx {
  const bench_opts_t *o;
  int rank, world;          /* dlpg ranks */
  int local_rank;           /* selects the CUDA devices: local_rank * gpus + i */
  int nparts;               /* participants: world * gpus */
  dlpg_store_t *store;
  dlpg_group_t *group;
  int dev[BENCH_MAX_GPUS];  /* CUDA device ordinals */
  void *stream[BENCH_MAX_GPUS];
  void *in[BENCH_MAX_GPUS], *out[BENCH_MAX_GPUS]; /* device (or host) buffers of max_bytes */
  void *host;               /* host staging buffer for check (max_bytes) */
  void *nccl;               /* baseline state (dlpg_bench_nccl.c), NULL when off */
} bench_ctx_t;

/* One measured row, as rank 0 reports it. */
typedef struct bench_result {
  double time_us;   /* median over repetitions of the per-op time, max over ranks */
  double algbw, busbw;
  long long wrong;  /* summed over ranks; -1 when not checked */
  int ok;           /* 0 when the operation failed */
} bench_result_t;

/* One size of one (dtype, redop) pair: [0] out of place, [1] in place. */
typedef struct bench_row {
  size_t bytes, count;
  int warmup, iters;       /* as run at this size (--iters-bytes scales them) */
  bench_dtype_t dtype;
  dlpg_reduce_op_t redop;
  int ran[2];              /* the columns measured (in place: allreduce, broadcast, reduce) */
  bench_result_t d[2], b[2]; /* dlpg, baseline */
} bench_row_t;

/* dlpg_bench_data.c */
size_t bench_dtype_size(bench_dtype_t t);
const char *bench_dtype_name(bench_dtype_t t);
/* nccl-tests' spelling ("float", "half", "double", ...), as its table prints it. */
const char *bench_dtype_nccl_name(bench_dtype_t t);
int bench_dtype_parse(const char *s, bench_dtype_t *t);
DLDataType bench_dtype_dl(bench_dtype_t t);
const char *bench_op_name(bench_op_t op);
int bench_op_parse(const char *s, bench_op_t *op);
/* allreduce, reduce and reduce_scatter take a reduce op; the others print "none". */
int bench_op_has_redop(bench_op_t op);
/* The operations with a root (broadcast, reduce); the others print root -1. */
int bench_op_has_root(bench_op_t op);
/* dlpg runs these in place too (outputs == NULL): allreduce, broadcast, reduce. */
int bench_op_has_inplace(bench_op_t op);
const char *bench_redop_name(dlpg_reduce_op_t r);
int bench_redop_parse(const char *s, dlpg_reduce_op_t *r);
/* Write contribution c's value of element i for count elements into host buffer p. */
void bench_fill(bench_dtype_t t, dlpg_reduce_op_t r, int c, void *p, size_t count);
/* Compare count elements at p with the expected result of contribution me (ctx) for the
 * operation; returns the number of wrong elements. per = elements per block/tensor. */
long long bench_check(const bench_ctx_t *x, bench_op_t op, int me, const void *p, size_t per);

/* The uneven collectives' layout (--skew K): rank r's weight, K for the first half of the
 * ranks (rank 0 at least) and 1 for the rest, and their sum. allgatherv: rank r contributes
 * unit * weight(r) elements; alltoallv: every rank sends rank j unit * weight(j) elements
 * (the skew is on the receivers, as with popular experts), so every input holds unit *
 * weight_sum and rank j's output unit * weight(j) * world. A size counts unit *
 * weight_sum elements: allgatherv's output and each alltoallv input (the mean output),
 * nccl-tests' allgather and alltoall convention. */
int bench_weight(const bench_opts_t *o, int world, int r);
size_t bench_weight_sum(const bench_opts_t *o, int world);
/* Whether op takes one tensor per rank (-g 1): alltoall, sendrecv and the rooted and uneven
 * collectives. */
int bench_op_single(bench_op_t op);

/* dlpg_bench_mem.c */
int bench_mem_setup(bench_ctx_t *x);
void bench_mem_teardown(bench_ctx_t *x);
/* Zero the output buffers (first bytes). */
int bench_mem_clear_out(bench_ctx_t *x, size_t bytes);
/* Copy bytes of output g (in place: input g) into x->host. */
int bench_mem_fetch_out(bench_ctx_t *x, int g, size_t bytes);
/* Rewrite the first count elements of every input with its fill (in place runs change
 * their inputs). */
int bench_mem_restore_in(bench_ctx_t *x, size_t count);
int bench_sync(bench_ctx_t *x);
double bench_now(void);

/* dlpg_bench_ops.c: issue one dlpg operation on count elements (per-block count for
 * allgather/reduce_scatter/alltoall/gather/scatter, the unit of bench_weight for
 * allgatherv/alltoallv). Returns 0 on success, else prints the error. */
int bench_dlpg_issue(bench_ctx_t *x, size_t count);

/* dlpg_bench_nccl.c: the baseline. Each returns 0 on success. */
int bench_nccl_setup(bench_ctx_t *x);
int bench_nccl_issue(bench_ctx_t *x, size_t count);
void bench_nccl_teardown(bench_ctx_t *x);

/* dlpg_bench_launch.c: one rank of a job a launcher started. */
typedef struct bench_job {
  int rank, world, local_rank;
  const char *via;        /* "torchrun" (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or "mpirun" */
  char url[96];           /* the store to open; "" with a port file (below) */
  char port_file[192];    /* mpirun on one host without MASTER_ADDR: rank 0 publishes here */
} bench_job_t;
/* Which launcher started this process: 1 when one did (j filled), 0 when none did, -1 when
 * its variables are malformed (the message is printed). */
int bench_job_detect(bench_job_t *j);
/* Open the job's store (rank 0 serves it). */
int bench_job_open_store(bench_job_t *j, double timeout_s, dlpg_store_t **store);
/* Rank 0 removes its port file. */
void bench_job_done(bench_job_t *j);

/* dlpg_bench_memcpy.c: --memcpy, the memory-speed reference: memcpy of each size on one
 * core of this process, in nccl-tests' table (busbw = algbw = bytes / time). */
int bench_memcpy_main(bench_opts_t *o);

/* dlpg_bench_run.c */
int bench_rank_main(const bench_opts_t *o, dlpg_store_t *store, int rank, int world,
                    int local_rank);

/* dlpg_bench_report.c */
double bench_busbw_factor(bench_op_t op, int n);
void bench_report_header(FILE *f, const bench_opts_t *o, const bench_ctx_t *x);
void bench_report_row(FILE *f, const bench_opts_t *o, const bench_row_t *r);
/* nccl-tests' closing lines: wrong elements and the average bus bandwidth; failed: the run
 * stopped on an error, so it is not called OK. */
void bench_report_trailer(FILE *f, const bench_opts_t *o, const bench_row_t *rows, int nrows,
                          int failed);
int bench_report_json(const char *path, const bench_opts_t *o, const bench_ctx_t *x,
                      const bench_row_t *rows, int nrows, double first_us, double first_b_us);

#endif
