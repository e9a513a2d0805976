/* The shared-memory backend's table (core/group/backend_abi.h): host memory (cpu, cuda_host) of
 * groups whose ranks all run on one host, one tensor per call, collectives on the group's
 * worker thread (the engine takes one operation at a time per handle, and the worker runs a
 * blocking call inline on the caller's thread when nothing is queued before it). Sends and
 * receives are issued on the caller's thread with a state of their own and decided per
 * pair (backend_p2p.c): shm when both ranks share the host, else the next line. A thin adapter:
 * the engine (shm.h) does the work and names ranks, operations and causes in its messages,
 * which reach core as the operation's status (failure propagation, flight recorder). */
#include <dlpack/dlpack.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/status.h"
#include "core/group/backend_abi.h"
#include "core/group/group.h"
#include "core/group/names.h"
#include "core/group/op.h"
#include "shm/backend.h"
#include "shm/backend_p2p.h"
#include "shm/params.h"
#include "shm/reduce.h"
#include "shm/shm.h"

static int dlpg__shm_be_reduces(dlpg__op_kind_t kind) {
  return kind == DLPG__OP_ALLREDUCE || kind == DLPG__OP_REDUCE || kind == DLPG__OP_REDUCE_SCATTER;
}

static dlpg_status_t dlpg__shm_be_check(const char *fn, const dlpg__be_op_t *op) {
  if (op->kind == DLPG__OP_ALLREDUCE || op->kind == DLPG__OP_REDUCE ||
      op->kind == DLPG__OP_REDUCE_SCATTER || op->kind == DLPG__OP_REDUCE_SCATTER_V)
    return dlpg__shm_check_reduce(fn, op->in[0].dtype, op->rop);
  return DLPG_OK;
}

/* A positive integer setting, else 0 (the engine's default). */
static long dlpg__shm_setting(const dlpg__param_decl_t *p, long fallback) {
  long v = 0;
  return dlpg__param_get(p) && dlpg__param_get_long(p, &v) ? v : fallback;
}

/* The engine's settings for g from the backend's variables. */
static void dlpg__shm_be_config(const dlpg__be_group_t *g, dlpg__shm_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  long slot = dlpg__shm_setting(DLPG__SHM_PARAM(SLOT_BYTES), 0);
  cfg->slot_bytes = slot > 0 ? (size_t)slot : 0;
  cfg->timeout_s = g->timeout_s;
  long spin = dlpg__shm_setting(DLPG__SHM_PARAM(SPIN), -1);
  cfg->spin = spin >= 0 && spin < 0x7fffffffL ? (int)spin : -1;
  long yield = dlpg__shm_setting(DLPG__SHM_PARAM(YIELD_US), -1);
  cfg->yield_us = yield == 0 ? -1 : yield > 0 ? yield : 0;
  long threads = dlpg__shm_setting(DLPG__SHM_PARAM(THREADS), 0);
  cfg->threads = threads > 0 && threads <= 256 ? (int)threads : 0;
  cfg->abort_flag = g->aborted; /* an abort of the group ends the creation too */
  long stream = dlpg__shm_setting(DLPG__SHM_PARAM(STREAM_BYTES), -1);
  cfg->stream_bytes = stream == 0 ? SIZE_MAX : stream > 0 ? (size_t)stream : 0;
  long eager = 0;
  if (dlpg__param_get(DLPG__SHM_PARAM(EAGER_BYTES)) &&
      dlpg__param_get_long(DLPG__SHM_PARAM(EAGER_BYTES), &eager))
    cfg->eager_bytes = eager > 0 ? eager : -1;
  long areas = dlpg__shm_setting(DLPG__SHM_PARAM(POOL_AREAS), -1);
  cfg->pool_areas = areas == 0 ? -1 : areas > 0 && areas <= 1 << 20 ? (int)areas : 0;
}

/* g's segment through the store and a socket (shm.h); an abort that came while it was
 * being set up finds no state to cut: honoured now, so the peers see this rank as
 * aborted. */
static dlpg_status_t dlpg__shm_be_make(const dlpg__be_group_t *g, const dlpg__shm_config_t *cfg,
                                       void **state) {
  dlpg__shm_t *sh = NULL;
  dlpg_status_t st = dlpg__shm_create(g->store, dlpg__be_group_keys(g), g->rank, g->size, cfg, &sh);
  if (st != DLPG_OK) return st;
  if (dlpg__be_group_aborted(g)) dlpg__shm_abort(sh);
  *state = sh;
  return DLPG_OK;
}

/* At the group's first collective, on its worker: every rank maps one segment, or all fail
 * alike (UNSUPPORTED when they are not on one host as the engine needs it; core then falls
 * back to the next line). */
static dlpg_status_t dlpg__shm_be_state_create(const dlpg__be_group_t *g, void **state) {
  dlpg__shm_config_t cfg;
  dlpg__shm_be_config(g, &cfg);
  /* A child with no seed (its parent had no segment when it was made, or no pool): a small
   * pool, for its own children (a built-in backend may read the group behind its view). */
  if (dlpg__group_of_view(g)->parent_ranks) {
    DLPG_INFO(SHM, g->rank, "shm: group \"%s\" is a child with no area of its parent's "
              "segment (the parent had no segment when it was made, having run no collective "
              "on host memory yet, or no pool): it makes a segment of its own", g->name);
    if (cfg.pool_areas >= 0) cfg.pool_areas = DLPG__SHM_CHILD_POOL_AREAS;
  }
  return dlpg__shm_be_make(g, &cfg, state);
}

/* A child made while its parent has a segment: a reference to it, for the child's area. */
static void *dlpg__shm_be_child_seed(void *parent, const dlpg__be_group_t *child,
                                     const int *parent_ranks) {
  void *seed = dlpg__shm_seed_new((dlpg__shm_t *)parent, child->rank, child->size, parent_ranks);
  if (!seed)
    DLPG_INFO(SHM, child->rank, "shm: group \"%s\" gets no area of its parent's segment (the "
              "parent's has no pool: DLPG_SHM_POOL_AREAS=0, or out of memory): it makes a "
              "segment of its own", child->name);
  return seed;
}

/* The child's first collective: its area of the parent's segment, else a segment of its
 * own (every member learns which alike), with a small pool for its own children. */
static dlpg_status_t dlpg__shm_be_state_create_seeded(const dlpg__be_group_t *g, void *seed,
                                                      void **state) {
  dlpg__shm_config_t cfg;
  dlpg__shm_be_config(g, &cfg);
  dlpg__shm_t *sh = NULL;
  DLPG_CHECK(dlpg__shm_create_sub((dlpg__shm_seed_t *)seed, dlpg__be_group_keys(g), &cfg, &sh));
  if (!sh) {
    if (cfg.pool_areas >= 0) cfg.pool_areas = DLPG__SHM_CHILD_POOL_AREAS;
    return dlpg__shm_be_make(g, &cfg, state);
  }
  if (dlpg__be_group_aborted(g)) dlpg__shm_abort(sh);
  *state = sh;
  return DLPG_OK;
}

static void dlpg__shm_be_seed_free(void *seed) { dlpg__shm_seed_free((dlpg__shm_seed_t *)seed); }

/* The blocking engine functions, over the call dlpg__shm_be_call makes. */
static dlpg_status_t dlpg__shm_be_allreduce(dlpg__shm_t *sh, const dlpg__shm_call_t *c) {
  return dlpg__shm_allreduce(sh, c->in, c->out, c->count, c->dtype, c->rop);
}
static dlpg_status_t dlpg__shm_be_reduce(dlpg__shm_t *sh, const dlpg__shm_call_t *c) {
  return dlpg__shm_reduce(sh, c->in, c->out, c->count, c->dtype, c->rop, c->root);
}
static dlpg_status_t dlpg__shm_be_broadcast(dlpg__shm_t *sh, const dlpg__shm_call_t *c) {
  /* The root's output is the source: its input is copied there first (out of place). */
  if (dlpg__shm_rank(sh) == c->root && c->out != c->in && c->count)
    memcpy(c->out, c->in, c->count);
  return dlpg__shm_broadcast(sh, c->out, c->count, c->root);
}
static dlpg_status_t dlpg__shm_be_allgather(dlpg__shm_t *sh, const dlpg__shm_call_t *c) {
  return dlpg__shm_allgather(sh, c->in, c->out, c->count);
}
static dlpg_status_t dlpg__shm_be_reduce_scatter(dlpg__shm_t *sh, const dlpg__shm_call_t *c) {
  return dlpg__shm_reduce_scatter(sh, c->in, c->out, c->count, c->dtype, c->rop);
}
static dlpg_status_t dlpg__shm_be_alltoall(dlpg__shm_t *sh, const dlpg__shm_call_t *c) {
  return dlpg__shm_alltoall(sh, c->in, c->out, c->count);
}
static dlpg_status_t dlpg__shm_be_barrier(dlpg__shm_t *sh, const dlpg__shm_call_t *c) {
  (void)c;
  return dlpg__shm_barrier(sh);
}

/* What the engine's count of a call is (shm.h's dlpg__shm_call_t). */
typedef enum {
  DLPG__SHM_COUNT_IN_ELEMS,   /* the input's elements */
  DLPG__SHM_COUNT_OUT_ELEMS,  /* the output's elements */
  DLPG__SHM_COUNT_IN_BYTES,   /* the input's bytes */
  DLPG__SHM_COUNT_BLOCK_BYTES, /* the bytes of one rank's block of the input */
  DLPG__SHM_COUNT_NONE        /* no buffers */
} dlpg__shm_count_t;

/* The one mapping of the collective kinds this backend serves to the engine: how a call's
 * count is read from the tensors, and the blocking function that runs it (the eager path
 * runs the same call in halves: dlpg__shm_start). Sends and receives take the pair path
 * (backend_p2p.c). */
static const struct {
  dlpg__shm_count_t count;
  dlpg_status_t (*run)(dlpg__shm_t *sh, const dlpg__shm_call_t *c);
} dlpg__shm_be_kinds[] = {
    [DLPG__OP_ALLREDUCE] = {DLPG__SHM_COUNT_IN_ELEMS, dlpg__shm_be_allreduce},
    [DLPG__OP_REDUCE] = {DLPG__SHM_COUNT_IN_ELEMS, dlpg__shm_be_reduce},
    [DLPG__OP_BROADCAST] = {DLPG__SHM_COUNT_IN_BYTES, dlpg__shm_be_broadcast},
    [DLPG__OP_ALLGATHER] = {DLPG__SHM_COUNT_IN_BYTES, dlpg__shm_be_allgather},
    [DLPG__OP_REDUCE_SCATTER] = {DLPG__SHM_COUNT_OUT_ELEMS, dlpg__shm_be_reduce_scatter},
    [DLPG__OP_ALLTOALL] = {DLPG__SHM_COUNT_BLOCK_BYTES, dlpg__shm_be_alltoall},
    [DLPG__OP_BARRIER] = {DLPG__SHM_COUNT_NONE, dlpg__shm_be_barrier},
};

static int dlpg__shm_be_serves(dlpg__op_kind_t kind) {
  return (unsigned)kind < sizeof dlpg__shm_be_kinds / sizeof dlpg__shm_be_kinds[0] &&
         dlpg__shm_be_kinds[kind].run;
}

/* The op as the engine's call (shm.h); kind is one the table serves. */
static dlpg__shm_call_t dlpg__shm_be_call(const dlpg__shm_t *sh, const dlpg__be_op_t *op) {
  const dlpg__tensor_t *in = &op->in[0], *out = &op->out[0];
  dlpg__shm_call_t c = {op->kind, in->ptr, out->ptr, (size_t)in->numel, in->dtype, op->rop,
                        op->root};
  switch (dlpg__shm_be_kinds[op->kind].count) {
    case DLPG__SHM_COUNT_IN_ELEMS: break;
    case DLPG__SHM_COUNT_OUT_ELEMS: c.count = (size_t)out->numel; break;
    case DLPG__SHM_COUNT_IN_BYTES: c.count = in->nbytes; break;
    case DLPG__SHM_COUNT_BLOCK_BYTES: c.count = in->nbytes / (size_t)dlpg__shm_size(sh); break;
    case DLPG__SHM_COUNT_NONE:
      c.in = c.out = NULL;
      c.count = 0;
      break;
  }
  /* A reduce's output is the root's alone. */
  if (op->kind == DLPG__OP_REDUCE && dlpg__shm_rank(sh) != op->root) c.out = NULL;
  /* A complex tensor reduces as the pairs of reals it is: sum, avg and premul_sum act on
   * each part alone (the check refused the other ops). Every rank maps it alike, so the
   * descriptors peers compare still agree. */
  if (dlpg__shm_be_reduces(op->kind) && dlpg__dtype_is_complex(c.dtype)) {
    c.dtype = dlpg__dtype_real_part(c.dtype);
    c.count *= 2;
  }
  return c;
}

/* premul_sum: each rank's input multiplied by the factor into scratch (*buf, freed by the
 * caller), then summed; the input itself is never written. */
static dlpg_status_t dlpg__shm_be_premul(const dlpg__be_op_t *op, dlpg__shm_call_t *c,
                                         void **buf) {
  *buf = NULL;
  if (!dlpg__shm_be_reduces(op->kind) || op->rop != DLPG_PREMUL_SUM) return DLPG_OK;
  size_t bytes = op->in[0].nbytes, n = bytes / dlpg__shm_elem_size(c->dtype); /* whole input */
  if (bytes == 0) return DLPG_OK;
  *buf = malloc(bytes);
  if (!*buf)
    return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory for premul_sum's scaled input (%zu bytes)",
                       dlpg__op_name(op->kind), bytes);
  dlpg__shm_premul(c->dtype, *buf, c->in, n, op->scalar);
  c->in = *buf;
  return DLPG_OK;
}

/* The rooted and uneven kinds (coll_v.c), which carry more than a dlpg__shm_call_t. */
static int dlpg__shm_be_vkind(dlpg__op_kind_t kind) {
  return kind == DLPG__OP_GATHER || kind == DLPG__OP_SCATTER || kind == DLPG__OP_ALLGATHERV ||
         kind == DLPG__OP_ALLTOALLV || kind == DLPG__OP_REDUCE_SCATTER_V;
}

static dlpg_status_t dlpg__shm_be_vrun(dlpg__shm_t *sh, const dlpg__be_op_t *op) {
  const dlpg__tensor_t *in = &op->in[0], *out = &op->out[0];
  dlpg__shm_vcall_t c = {.kind = op->kind, .in = in->ptr, .out = out->ptr,
                         .out_bytes = out->nbytes, .elem = dlpg__dtype_size(in->dtype),
                         .dtype = in->dtype, .rop = op->rop, .root = op->root};
  int64_t numel = -1; /* what the peers compare: the v-forms' counts differ by rank */
  if (op->kind == DLPG__OP_GATHER) numel = c.block = in->numel;
  if (op->kind == DLPG__OP_SCATTER) numel = c.block = out->numel;
  if (dlpg__be_op_counts(op)) {
    c.counts = op->counts, c.displs = op->displs;
    c.recv_counts = op->recv_counts, c.recv_displs = op->recv_displs;
  } else if (op->kind != DLPG__OP_GATHER && op->kind != DLPG__OP_SCATTER) {
    return dlpg__error(DLPG_ERR_INTERNAL, "the shm backend was handed a %s without its counts",
                       dlpg__op_name(op->kind));
  }
  void *scaled = NULL;
  if (op->kind == DLPG__OP_REDUCE_SCATTER_V) {
    /* Complex reduces as its real parts (the check allowed only ops that act on each). */
    c.dtype = dlpg__dtype_real_part(in->dtype);
    if (op->rop == DLPG_PREMUL_SUM && in->nbytes) {
      /* Each rank's input times the factor into scratch, then summed; the input stays. */
      scaled = malloc(in->nbytes);
      if (!scaled)
        return dlpg__error(DLPG_ERR_SYSTEM,
                           "%s: out of memory for premul_sum's scaled input (%zu bytes)",
                           dlpg__op_name(op->kind), in->nbytes);
      dlpg__shm_premul(c.dtype, scaled, in->ptr, in->nbytes / dlpg__shm_elem_size(c.dtype),
                       op->scalar);
      c.in = scaled;
    }
  }
  dlpg__shm_describe_next(sh, op->kind, in->dtype, numel, numel);
  dlpg_status_t st = dlpg__shm_vcoll(sh, &c);
  free(scaled);
  return st;
}

static dlpg_status_t dlpg__shm_be_run(dlpg__shm_t *sh, const dlpg__be_op_t *op) {
  if (dlpg__shm_be_vkind(op->kind)) return dlpg__shm_be_vrun(sh, op);
  if (!dlpg__shm_be_serves(op->kind))
    return dlpg__error(DLPG_ERR_INTERNAL, "the shm backend was handed a %s",
                       dlpg__op_name(op->kind));
  dlpg__shm_call_t c = dlpg__shm_be_call(sh, op);
  void *scaled = NULL;
  DLPG_CHECK(dlpg__shm_be_premul(op, &c, &scaled));
  /* Compared across ranks and named as the caller called it when they differ. */
  dlpg__shm_describe_next(sh, op->kind, op->in[0].dtype, op->in[0].numel, op->out[0].numel);
  dlpg_status_t st = dlpg__shm_be_kinds[op->kind].run(sh, &c);
  free(scaled);
  return st;
}

/* The eager path (backend_abi.h): a small collective posted on the caller's thread. */
static int dlpg__shm_be_start(dlpg__be_op_t *op) {
  dlpg__shm_t *sh = (dlpg__shm_t *)op->state;
  if (!dlpg__shm_be_serves(op->kind)) return 0; /* sends, receives, rooted and uneven */
  /* premul_sum's scaled copy would have to live until the finish: run it whole instead. */
  if (dlpg__shm_be_reduces(op->kind) && op->rop == DLPG_PREMUL_SUM) return 0;
  dlpg__shm_call_t c = dlpg__shm_be_call(sh, op);
  dlpg__shm_describe_next(sh, op->kind, op->in[0].dtype, op->in[0].numel, op->out[0].numel);
  int started = 0;
  return dlpg__shm_start(sh, &c, &started) == DLPG_OK && started;
}

static dlpg_status_t dlpg__shm_be_progress(dlpg__be_op_t *op, double wait_s, int *done) {
  return dlpg__shm_finish((dlpg__shm_t *)op->state, wait_s, done);
}

/* A batch of one group's collectives, in order; the first failure is the batch's. */
static dlpg_status_t dlpg__shm_be_issue(dlpg__be_op_t *const *ops, int n) {
  /* Sends and receives come on the caller's thread (p2p_direct), with the p2p state. */
  if (n > 0 && (ops[0]->kind == DLPG__OP_SEND || ops[0]->kind == DLPG__OP_RECV))
    return dlpg__shm_p2p_issue(ops, n);
  for (int i = 0; i < n; i++) DLPG_CHECK(dlpg__shm_be_run((dlpg__shm_t *)ops[i]->state, ops[i]));
  return DLPG_OK;
}

static void dlpg__shm_be_abort(void *state) { dlpg__shm_abort((dlpg__shm_t *)state); }
static void dlpg__shm_be_destroy(void *state) { dlpg__shm_destroy((dlpg__shm_t *)state); }
static const char *dlpg__shm_be_build_info(void) { return "shm (memfd segments, futex waits)"; }

const dlpg__backend_vtbl_t dlpg__shm_backend = {
    .struct_size = sizeof(dlpg__backend_vtbl_t),
    .version = DLPG__BACKEND_ABI_VERSION,
    .host_size = sizeof(dlpg__host_t),
    .name = "shm",
    .devices = DLPG__DEV_BIT(kDLCPU) | DLPG__DEV_BIT(kDLCUDAHost),
    .max_tensors = 1,
    .on_worker = 1,
    .p2p_direct = 1,
    .check = dlpg__shm_be_check,
    .state_create = dlpg__shm_be_state_create,
    .issue = dlpg__shm_be_issue,
    .abort = dlpg__shm_be_abort,
    .destroy = dlpg__shm_be_destroy,
    .build_info = dlpg__shm_be_build_info,
    .params = (const dlpg__be_param_t *)(const void *)dlpg__shm_params,
    .nparams = DLPG__SHM_PARAM_COUNT,
    .log_subsys = "SHM",
    /* Serves a group only when every rank publishes the same host identity (and the
     * segment's creation confirms it). */
    .locality = dlpg__shm_host_id,
    .kinds = DLPG__KIND_BIT(DLPG__OP_ALLREDUCE) | DLPG__KIND_BIT(DLPG__OP_BROADCAST) |
             DLPG__KIND_BIT(DLPG__OP_REDUCE) | DLPG__KIND_BIT(DLPG__OP_ALLGATHER) |
             DLPG__KIND_BIT(DLPG__OP_REDUCE_SCATTER) | DLPG__KIND_BIT(DLPG__OP_ALLTOALL) |
             DLPG__KIND_BIT(DLPG__OP_BARRIER) | DLPG__KIND_BIT(DLPG__OP_SEND) |
             DLPG__KIND_BIT(DLPG__OP_RECV) | DLPG__KIND_BIT(DLPG__OP_GATHER) |
             DLPG__KIND_BIT(DLPG__OP_SCATTER) | DLPG__KIND_BIT(DLPG__OP_ALLGATHERV) |
             DLPG__KIND_BIT(DLPG__OP_ALLTOALLV) | DLPG__KIND_BIT(DLPG__OP_REDUCE_SCATTER_V),
    .p2p_state_create = dlpg__shm_p2p_state_create,
    .p2p_abort = dlpg__shm_p2p_abort,
    .p2p_destroy = dlpg__shm_p2p_destroy,
    .start = dlpg__shm_be_start,
    .progress = dlpg__shm_be_progress,
    .child_seed = dlpg__shm_be_child_seed,
    .state_create_seeded = dlpg__shm_be_state_create_seeded,
    .seed_free = dlpg__shm_be_seed_free,
};
