/* Enqueueing operations on NCCL: one ncclGroupStart/End around a whole dlpg_group_start/end
 * batch and around any multi-device or non-blocking call (a single op on a single device of
 * a blocking communicator is its own NCCL group), the caller's current CUDA device saved
 * and restored, NULL streams meaning each device's default stream. The communicators of
 * all ops are created first (comm_create.c). In split mode (DLPG_NCCL_COMM_MODE) ops go to
 * the blocking split children. Connections the children would otherwise make while
 * blocking on a peer are made first through the non-blocking parents, whose ncclGroupEnd
 * reports ncclInProgress until the peers have connected, polled against the deadline: a
 * point-to-point peer's first use is preceded by a 1-byte exchange there. User operations
 * themselves stay off the parents (a kernel of a non-blocking parent was seen not to stop
 * on ncclCommAbort, NCCL 2.28 on H200), except a collective's first use at a size when the
 * user made NCCL connect collectives lazily (NCCL_RUNTIME_CONNECT=1). Once enqueued, each
 * op whose caller asked for a work gets its events (events.c); work == NULL costs no event.
 *
 * Layout rules (dlpg.h): NCCL rank of local device i of group rank r is r * ndev + i, so
 * allgather and reduce_scatter blocks are rank-major then device, roots are root * ndev,
 * and point-to-point peers are peer * ndev (+ i). Sends and receives run on the pairwise
 * communicator of this rank and the peer (2 * ndev NCCL ranks, the lower group rank's
 * devices first; dlpg__nccl_peer_rank), or on this rank's own one for a peer that is this
 * rank. Movement operations move bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nccl/ipc_host.h"
#include "nccl/nccl_internal.h"

/* Enqueue one op on its communicator (inside the caller's ncclGroupStart/End, read lock
 * held). */
static dlpg_status_t dlpg__enqueue(const char *fn, const dlpg__be_op_t *op, dlpg__nccl_comm_t *c,
                                   int parents, cudaStream_t *streams, int *curdev) {
  const int nd = c->ndev;
  ncclResult_t r = ncclSuccess;
  for (int i = 0; i < op->ntensors; i++) {
    const dlpg__tensor_t *in = &op->in[i], *out = &op->out[i];
    ncclComm_t comm = parents ? c->parents[i] : c->comms[i];
    cudaStream_t s = streams[i];
    if (!comm)
      return dlpg__error(DLPG_ERR_ABORTED, "%s: communicator '%s' of group '%s' was aborted", fn,
                         c->key, c->st->name);
    if (*curdev != in->device_id) {
      DLPG_CHECK(dlpg__cuda_result(cudaSetDevice(in->device_id), fn, "cudaSetDevice"));
      *curdev = in->device_id;
    }
    ncclDataType_t type = ncclUint8;
    ncclRedOp_t rop = ncclSum;
    size_t mult = 1;
    const char *what = "";
    switch (op->kind) {
      case DLPG__OP_ALLREDUCE:
        DLPG_CHECK(dlpg__nccl_reduce_args(fn, op, c, i, comm, &type, &rop, &mult));
        what = "ncclAllReduce";
        r = ncclAllReduce(in->ptr, out->ptr, (size_t)in->numel * mult, type, rop, comm, s);
        break;
      case DLPG__OP_BROADCAST:
        what = "ncclBroadcast";
        r = ncclBroadcast(in->ptr, out->ptr, in->nbytes, ncclUint8, op->root * nd, comm, s);
        break;
      case DLPG__OP_REDUCE:
        DLPG_CHECK(dlpg__nccl_reduce_args(fn, op, c, i, comm, &type, &rop, &mult));
        what = "ncclReduce";
        r = ncclReduce(in->ptr, out->ptr, (size_t)in->numel * mult, type, rop, op->root * nd, comm, s);
        break;
      case DLPG__OP_ALLGATHER:
        what = "ncclAllGather";
        r = ncclAllGather(in->ptr, out->ptr, in->nbytes, ncclUint8, comm, s);
        break;
      case DLPG__OP_REDUCE_SCATTER:
        DLPG_CHECK(dlpg__nccl_reduce_args(fn, op, c, i, comm, &type, &rop, &mult));
        what = "ncclReduceScatter";
        r = ncclReduceScatter(in->ptr, out->ptr, (size_t)out->numel * mult, type, rop, comm, s);
        break;
      case DLPG__OP_ALLTOALL: {
        if (in->ptr == out->ptr && in->nbytes > 0)
          return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                             "%s: input and output are the same memory (%p); NCCL's alltoall "
                             "needs distinct buffers", fn, in->ptr);
        size_t blk = in->nbytes / (size_t)c->nranks;
        for (int p = 0; p < c->nranks && r == ncclSuccess; p++) {
          what = "ncclSend (alltoall)";
          r = ncclSend((const char *)in->ptr + (size_t)p * blk, blk, ncclUint8, p, comm, s);
          if (r != ncclSuccess && r != ncclInProgress) break;
          what = "ncclRecv (alltoall)";
          r = ncclRecv((char *)out->ptr + (size_t)p * blk, blk, ncclUint8, p, comm, s);
          if (r == ncclInProgress) r = ncclSuccess;
        }
        break;
      }
      case DLPG__OP_GATHER:
      case DLPG__OP_SCATTER:
      case DLPG__OP_ALLGATHERV:
      case DLPG__OP_ALLTOALLV:
      case DLPG__OP_REDUCE_SCATTER_V:
        DLPG_CHECK(dlpg__nccl_enqueue_v(fn, op, c, i, comm, s));
        continue;
      case DLPG__OP_SEND:
        what = "ncclSend";
        r = ncclSend(in->ptr, in->nbytes, ncclUint8, dlpg__nccl_peer_rank(c, op, i), comm, s);
        break;
      case DLPG__OP_RECV:
        what = "ncclRecv";
        r = ncclRecv(in->ptr, in->nbytes, ncclUint8, dlpg__nccl_peer_rank(c, op, i), comm, s);
        break;
      default:
        /* Unreachable: the table's kinds list only the cases above, and validation refuses
         * any other kind (naming this backend) before issue. Kept against a caller that
         * skips validation. */
        return dlpg__error(DLPG_ERR_INTERNAL, "%s: operation kind %d is not an NCCL operation",
                           fn, (int)op->kind);
    }
    DLPG_CHECK(dlpg__nccl_result(r, comm, fn, what));
  }
  return DLPG_OK;
}

/* Checks before any communicator exists, so an unsupported request costs no rendezvous. */
static dlpg_status_t dlpg__precheck(const char *fn, const dlpg__be_op_t *op) {
  if (!op || !op->gview)
    return dlpg__error(DLPG_ERR_INTERNAL, "%s: op without group", fn);
  if (!op->state)
    return dlpg__error(DLPG_ERR_INTERNAL, "%s: group has no NCCL state", fn);
  /* Never true after validation (the table's kinds leave barriers out): a caller that
   * skipped it. */
  if (op->kind == DLPG__OP_BARRIER)
    return dlpg__error(DLPG_ERR_INTERNAL, "%s: not an NCCL operation (kind %d)", fn,
                       (int)op->kind);
  if (op->ntensors < 1 || op->ntensors > DLPG__MAX_LOCAL_DEVICES)
    return dlpg__error(DLPG_ERR_INTERNAL, "%s: ntensors %d", fn, op->ntensors);
  if (dlpg__be_group_aborted(op->gview))
    return dlpg__error(DLPG_ERR_ABORTED, "%s: group '%s' was aborted", fn, op->gview->name);
  return DLPG_OK;
}

static int dlpg__ptr_cmp(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)*(void *const *)a, y = (uintptr_t)*(void *const *)b;
  return x < y ? -1 : x > y;
}

/* The distinct communicators of a batch, in address order (the lock order). */
static int dlpg__unique_comms(dlpg__nccl_comm_t **comms, int n, dlpg__nccl_comm_t **uniq) {
  memcpy(uniq, comms, (size_t)n * sizeof(*uniq));
  qsort(uniq, (size_t)n, sizeof(*uniq), dlpg__ptr_cmp);
  int m = 0;
  for (int k = 0; k < n; k++)
    if (m == 0 || uniq[m - 1] != uniq[k]) uniq[m++] = uniq[k];
  return m;
}

/* The size bucket of op for coll_warm: the bit length of its largest per-device byte
 * count (inputs or outputs), so 0 B is bucket 0 and 1 GiB bucket 31. */
static unsigned dlpg__size_bucket(const dlpg__be_op_t *op) {
  size_t nb = 0;
  for (int i = 0; i < op->ntensors; i++) {
    if (op->in[i].nbytes > nb) nb = op->in[i].nbytes;
    if (op->out[i].nbytes > nb) nb = op->out[i].nbytes;
  }
  unsigned b = 0;
  while (nb && b < 63) nb >>= 1, b++;
  return b;
}

/* The kind op runs as on NCCL: its own, or for a rooted or uneven collective the verb
 * issue_v.c picks (ALLTOALL for its sends and receives with any peer). */
static dlpg__op_kind_t dlpg__runs_as(const dlpg__be_op_t *op) {
  return dlpg__nccl_is_v(op->kind) ? dlpg__nccl_v_runs_as(op, op->gview->size) : op->kind;
}

static int dlpg__is_p2p(const dlpg__be_op_t *op) {
  dlpg__op_kind_t k = dlpg__runs_as(op);
  return k == DLPG__OP_SEND || k == DLPG__OP_RECV || k == DLPG__OP_ALLTOALL;
}

/* Split mode: whether the point-to-point connections op needs exist (alltoall: with every
 * NCCL rank, both ways). Caller holds c->issue_mu. */
static int dlpg__p2p_warm(const dlpg__be_op_t *op, const dlpg__nccl_comm_t *c) {
  if (!c->parents[0]) return 1;
  if (dlpg__runs_as(op) == DLPG__OP_ALLTOALL) {
    for (int p = 0; p < c->nranks; p++)
      if (c->p2p_warm[p] != 3) return 0;
    return 1;
  }
  int bit = op->kind == DLPG__OP_SEND ? 1 : 2;
  for (int i = 0; i < op->ntensors; i++) {
    int peer = dlpg__nccl_peer_rank(c, op, i);
    if (peer < 0 || peer >= c->nranks || !(c->p2p_warm[peer] & bit)) return 0;
  }
  return 1;
}

/* Split mode with lazily connected collectives (NCCL_RUNTIME_CONNECT=1 by the user): whether
 * op's kind ran at op's size bucket before. NCCL picks algorithm, protocol and channels by
 * size, so a larger size can need connections a smaller one did not; such a first op runs
 * on the parents. */
static int dlpg__coll_warm(const dlpg__be_op_t *op, const dlpg__nccl_comm_t *c) {
  if (!c->parents[0] || !c->lazy_colls || dlpg__is_p2p(op)) return 1;
  return (c->coll_warm[dlpg__runs_as(op)] >> dlpg__size_bucket(op)) & 1u;
}

static void dlpg__mark_p2p_warm(const dlpg__be_op_t *op, dlpg__nccl_comm_t *c) {
  if (dlpg__runs_as(op) == DLPG__OP_ALLTOALL) {
    memset(c->p2p_warm, 3, (size_t)c->nranks);
    return;
  }
  int bit = op->kind == DLPG__OP_SEND ? 1 : 2;
  for (int i = 0; i < op->ntensors; i++) {
    int peer = dlpg__nccl_peer_rank(c, op, i);
    if (peer >= 0 && peer < c->nranks) c->p2p_warm[peer] |= (unsigned char)bit;
  }
}

/* After a ncclGroupEnd that reported ncclInProgress on non-blocking communicators (the
 * parents when parents != 0): poll them against the group's deadline. A peer that never
 * connects leaves the communicators half set up: they are aborted, so nothing waits on
 * them later (the group is unusable for CUDA after a timeout, as after dlpg_work_wait's). */
static dlpg_status_t dlpg__poll_issued(const char *fn, dlpg__be_op_t *const *ops, int n,
                                       dlpg__nccl_comm_t **comms, dlpg__nccl_comm_t **uniq,
                                       int nu, int parents) {
  double deadline = dlpg__now() + ops[0]->gview->timeout_s;
  dlpg_status_t s = dlpg__nccl_wait_ready(fn, uniq, nu, parents, deadline);
  if (s == DLPG_ERR_TIMEOUT)
    for (int k = 0; k < n; k++) dlpg__nccl_abort(comms[k]->st);
  return s;
}

/* Connect the point-to-point peers the batch needs and has not used yet: one NCCL group on
 * the non-blocking parents of 1-byte sends and receives (every rank does the same for the
 * matching operations, so they pair up), polled against the deadline. NCCL connects all of
 * a peer's point-to-point channels at the first transfer, whatever its size, so the real
 * operations then run on the blocking children without waiting for a connection. Only these
 * tiny transfers run on the parents. Caller holds the comms' issue_mu. */
static dlpg_status_t dlpg__warm_p2p(const char *fn, dlpg__be_op_t *const *ops, int n,
                                    dlpg__nccl_comm_t **comms, dlpg__nccl_comm_t **uniq, int nu,
                                    cudaStream_t *streams, int *curdev) {
  for (int k = 0; k < n; k++) {
    dlpg__nccl_comm_t *c = comms[k];
    if (!dlpg__is_p2p(ops[k]) || dlpg__p2p_warm(ops[k], c)) continue;
    for (int i = 0; i < ops[k]->ntensors; i++) {
      if (c->scratch[i]) continue;
      if (*curdev != c->devs[i]) {
        DLPG_CHECK(dlpg__cuda_result(cudaSetDevice(c->devs[i]), fn, "cudaSetDevice"));
        *curdev = c->devs[i];
      }
      DLPG_CHECK(dlpg__cuda_result(cudaMalloc(&c->scratch[i], 2), fn, "cudaMalloc (connection scratch)"));
    }
  }
  dlpg_status_t s = DLPG_OK;
  dlpg__nccl_rdlock();
  ncclResult_t r = ncclGroupStart();
  s = dlpg__nccl_result(r, NULL, fn, "ncclGroupStart (connect)");
  for (int k = 0; k < n && s == DLPG_OK; k++) {
    dlpg__nccl_comm_t *c = comms[k];
    const dlpg__be_op_t *op = ops[k];
    if (!dlpg__is_p2p(op) || dlpg__p2p_warm(op, c)) continue;
    for (int i = 0; i < op->ntensors && s == DLPG_OK; i++) {
      ncclComm_t comm = c->parents[i];
      cudaStream_t st = streams[k * DLPG__MAX_LOCAL_DEVICES + i];
      char *buf = c->scratch[i];
      if (!comm) {
        s = dlpg__error(DLPG_ERR_ABORTED, "%s: communicator '%s' of group '%s' was aborted", fn,
                        c->key, c->st->name);
        break;
      }
      if (*curdev != c->devs[i]) {
        s = dlpg__cuda_result(cudaSetDevice(c->devs[i]), fn, "cudaSetDevice");
        if (s != DLPG_OK) break;
        *curdev = c->devs[i];
      }
      int all = dlpg__runs_as(op) == DLPG__OP_ALLTOALL;
      int lo = all ? 0 : dlpg__nccl_peer_rank(c, op, i);
      int hi = all ? c->nranks : lo + 1;
      for (int p = lo; p < hi && s == DLPG_OK; p++) {
        if (op->kind != DLPG__OP_RECV) {
          r = ncclSend(buf, 1, ncclUint8, p, comm, st);
          s = dlpg__nccl_result(r, comm, fn, "ncclSend (connect)");
        }
        if (s == DLPG_OK && op->kind != DLPG__OP_SEND) {
          r = ncclRecv(buf + 1, 1, ncclUint8, p, comm, st);
          s = dlpg__nccl_result(r, comm, fn, "ncclRecv (connect)");
        }
      }
    }
  }
  r = ncclGroupEnd();
  if (s == DLPG_OK) s = dlpg__nccl_result(r, NULL, fn, "ncclGroupEnd (connect)");
  dlpg__nccl_unlock();
  if (s == DLPG_OK && r == ncclInProgress) s = dlpg__poll_issued(fn, ops, n, comms, uniq, nu, 1);
  if (s == DLPG_OK)
    for (int k = 0; k < n; k++)
      if (dlpg__is_p2p(ops[k])) dlpg__mark_p2p_warm(ops[k], comms[k]);
  return s;
}

/* Whether op runs on its pairwise communicator's internal stream instead of the caller's:
 * a send or receive with another rank whose caller asked for a work handle, outside graph
 * capture. On the caller's stream a receive would hold every later kernel of that stream
 * until its sender sent, so a rank that posts recv(prev) before send(next) (a ring without a
 * batch) would never start its send. (A capture keeps the caller's stream: a fork onto
 * another stream would have to be joined before the capture ends.) */
static int dlpg__on_own_stream(const char *fn, const dlpg__be_op_t *op, const dlpg__nccl_comm_t *c,
                               const cudaStream_t *streams, dlpg_status_t *s) {
  if (!op->work || c->peer < 0 || (op->kind != DLPG__OP_SEND && op->kind != DLPG__OP_RECV))
    return 0;
  for (int i = 0; i < op->ntensors; i++) {
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    *s = dlpg__cuda_result(cudaStreamIsCapturing(streams[i], &cs), fn, "cudaStreamIsCapturing");
    if (*s != DLPG_OK || cs != cudaStreamCaptureStatusNone) return 0;
  }
  return 1;
}

/* Order c's internal streams after the work enqueued so far on the caller's streams (an
 * event recorded there, waited for there; an event may be recorded again once the wait is
 * enqueued) and put them in streams[] instead. Caller holds c->issue_mu. */
static dlpg_status_t dlpg__fork_streams(const char *fn, dlpg__nccl_comm_t *c, int ntensors,
                                        cudaStream_t *streams, int *curdev) {
  for (int i = 0; i < ntensors; i++) {
    if (*curdev != c->devs[i]) {
      DLPG_CHECK(dlpg__cuda_result(cudaSetDevice(c->devs[i]), fn, "cudaSetDevice"));
      *curdev = c->devs[i];
    }
    if (!c->own_streams[i])
      DLPG_CHECK(dlpg__cuda_result(cudaStreamCreateWithFlags(&c->own_streams[i], cudaStreamNonBlocking),
                                   fn, "cudaStreamCreateWithFlags (point-to-point stream)"));
    if (!c->fork_ev[i])
      DLPG_CHECK(dlpg__cuda_result(cudaEventCreateWithFlags(&c->fork_ev[i], cudaEventDisableTiming),
                                   fn, "cudaEventCreateWithFlags"));
    DLPG_CHECK(dlpg__cuda_result(cudaEventRecord(c->fork_ev[i], streams[i]), fn, "cudaEventRecord"));
    DLPG_CHECK(dlpg__cuda_result(cudaStreamWaitEvent(c->own_streams[i], c->fork_ev[i], 0), fn,
                                 "cudaStreamWaitEvent"));
    streams[i] = c->own_streams[i];
  }
  return DLPG_OK;
}

/* A batch of both paths (a group on two GPUs with two ranks on each: its pairs on one GPU
 * are IPC's, the others NCCL's): the IPC part first, then the NCCL part, on every rank alike,
 * so on each stream every IPC kernel comes before every NCCL one and waits only for IPC
 * kernels of its peers, which come first on theirs too. */
static dlpg_status_t dlpg__nccl_issue_split(const char *fn, dlpg__be_op_t *const *ops, int n,
                                           const unsigned char *is_ipc, int nipc) {
  dlpg__be_op_t **part = malloc((size_t)n * sizeof *part);
  if (!part) return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
  int a = 0, b = nipc;
  for (int k = 0; k < n; k++) part[is_ipc[k] ? a++ : b++] = ops[k];
  dlpg_status_t s = dlpg__ipc_issue(fn, part, nipc);
  if (s == DLPG_OK) s = dlpg__nccl_issue(part + nipc, n - nipc);
  free(part);
  return s;
}

dlpg_status_t dlpg__nccl_issue(dlpg__be_op_t *const *ops, int n) {
  if (!ops || n < 1) return dlpg__error(DLPG_ERR_INTERNAL, "dlpg__nccl_issue: empty batch");
  const char *fn = n == 1 ? dlpg__op_name(ops[0]->kind) : "dlpg_group_end";
  for (int k = 0; k < n; k++) DLPG_CHECK(dlpg__precheck(fn, ops[k]));
  /* Ranks sharing a GPU, which NCCL refuses, run on the CUDA IPC path (route.c). */
  {
    unsigned char stack_ipc[8], *is_ipc = n <= 8 ? stack_ipc : malloc((size_t)n);
    if (!is_ipc) return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
    int nipc = 0;
    dlpg_status_t rs = dlpg__nccl_route(fn, ops, n, is_ipc, &nipc);
    if (rs == DLPG_OK && nipc == n) rs = dlpg__ipc_issue(fn, ops, n);
    else if (rs == DLPG_OK && nipc > 0) rs = dlpg__nccl_issue_split(fn, ops, n, is_ipc, nipc);
    if (is_ipc != stack_ipc) free(is_ipc);
    if (rs != DLPG_OK || nipc > 0) return rs;
  }

  /* Up to 4 ops (single ops, send/recv pairs, small coalesced batches) use the stack; a
   * larger batch allocates. */
  enum { kStackOps = 4 };
  dlpg__nccl_comm_t *stack_comms[2 * kStackOps], **comms = stack_comms;
  cudaStream_t stack_streams[kStackOps * DLPG__MAX_LOCAL_DEVICES], *streams = stack_streams;
  int heap = n > kStackOps;
  if (heap) {
    comms = calloc((size_t)n * 2, sizeof(*comms));
    streams = calloc((size_t)n * DLPG__MAX_LOCAL_DEVICES, sizeof(*streams));
    if (!comms || !streams) {
      free(comms);
      free(streams);
      return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
    }
  }
  int cur = -1;
  cudaGetDevice(&cur);
  int dev = cur; /* the device current now; restored at the end when changed */
  dlpg_status_t s = dlpg__nccl_get_comms(fn, ops, n, comms);
  if (s != DLPG_OK) goto out_free;
  for (int k = 0; k < n; k++)
    for (int i = 0; i < ops[k]->ntensors; i++)
      streams[k * DLPG__MAX_LOCAL_DEVICES + i] = (cudaStream_t)ops[k]->streams[i];

  /* Enqueue everything as one NCCL group, holding every communicator of the batch until
   * NCCL has put the work on the streams and the events are recorded behind it. */
  dlpg__nccl_comm_t **uniq = comms + n;
  int nu = 1;
  if (n == 1) uniq[0] = comms[0];
  else nu = dlpg__unique_comms(comms, n, uniq);
  for (int u = 0; u < nu; u++) pthread_mutex_lock(&uniq[u]->issue_mu);
  /* Sends and receives with a work handle move to their peer's internal stream. */
  for (int k = 0; k < n && s == DLPG_OK; k++)
    if (dlpg__on_own_stream(fn, ops[k], comms[k], &streams[k * DLPG__MAX_LOCAL_DEVICES], &s))
      s = dlpg__fork_streams(fn, comms[k], ops[k]->ntensors, &streams[k * DLPG__MAX_LOCAL_DEVICES],
                             &dev);
  /* Split mode: point-to-point peers used for the first time are connected through the
   * parents first; a batch with a collective's first use at its size goes to the parents
   * as a whole when NCCL connects collectives lazily (only if the user set
   * NCCL_RUNTIME_CONNECT=1). Every rank issues the same sequence, so every rank makes the
   * same choice. */
  int parents = 0, cold_p2p = 0;
  for (int k = 0; k < n; k++) {
    parents |= !dlpg__coll_warm(ops[k], comms[k]);
    cold_p2p |= !dlpg__p2p_warm(ops[k], comms[k]) && dlpg__is_p2p(ops[k]);
  }
  if (s == DLPG_OK && cold_p2p && !parents)
    s = dlpg__warm_p2p(fn, ops, n, comms, uniq, nu, streams, &dev);
  int nonblocking = parents || comms[0]->mode == DLPG__MODE_NONBLOCKING;
  /* One op on one device on a blocking communicator is its own NCCL group already, except
   * alltoall and the rooted and uneven collectives, which are many NCCL calls (sends and
   * receives, or one reduce per block) that must be one group. */
  int grouped = nonblocking || n > 1 || ops[0]->ntensors > 1 ||
                ops[0]->kind == DLPG__OP_ALLTOALL || dlpg__nccl_is_v(ops[0]->kind);
  ncclResult_t r = ncclSuccess;
  if (s == DLPG_OK) {
    dlpg__nccl_rdlock();
    if (grouped) {
      r = ncclGroupStart();
      s = dlpg__nccl_result(r, NULL, fn, "ncclGroupStart");
    }
    for (int k = 0; k < n && s == DLPG_OK; k++)
      s = dlpg__enqueue(fn, ops[k], comms[k], parents, &streams[k * DLPG__MAX_LOCAL_DEVICES], &dev);
    if (grouped) {
      r = ncclGroupEnd();
      if (s == DLPG_OK) s = dlpg__nccl_result(r, NULL, fn, "ncclGroupEnd");
    }
    dlpg__nccl_unlock();
  }

  /* Non-blocking communicators: the batch reaches the streams once none is in progress
   * (the first operation on a communicator connects its peers here). */
  if (s == DLPG_OK && nonblocking && r == ncclInProgress)
    s = dlpg__poll_issued(fn, ops, n, comms, uniq, nu, parents);
  if (s == DLPG_OK && parents)
    for (int k = 0; k < n; k++) {
      if (dlpg__is_p2p(ops[k])) dlpg__mark_p2p_warm(ops[k], comms[k]);
      else comms[k]->coll_warm[dlpg__runs_as(ops[k])] |= (uint64_t)1 << dlpg__size_bucket(ops[k]);
    }
  /* Completion: only ops whose caller asked for a work get events (work == NULL: nobody
   * can wait, and the caller's stream orders its later work). */
  for (int k = 0; k < n && s == DLPG_OK; k++)
    if (ops[k]->work)
      s = dlpg__nccl_attach_work(fn, ops[k], comms[k], &streams[k * DLPG__MAX_LOCAL_DEVICES]);
  for (int u = nu - 1; u >= 0; u--) pthread_mutex_unlock(&uniq[u]->issue_mu);
  for (int k = 0; k < n; k++) dlpg__nccl_comm_release(comms[k]);
out_free:
  /* attach_work may have switched devices too: restore unconditionally then. */
  if (cur >= 0) {
    int now = -1;
    if (cudaGetDevice(&now) == cudaSuccess && now != cur) cudaSetDevice(cur);
  }
  if (heap) {
    free(comms);
    free(streams);
  }
  return s;
}
