/* Operations on the CUDA IPC path (ipc.h): a collective as steps of three kernels (put, get,
 * done) through the two staging buffers, a send or receive as chunks through the pair's
 * mailboxes, all on the caller's stream and ordered against the group's earlier operations
 * through one event per channel (the collectives' buffers, each peer's mailboxes), so ops
 * issued on different streams never share a buffer at once. A send or receive with a work
 * handle runs on an internal stream of its pair, as on NCCL, so a receive posted before a
 * send does not hold the send behind it; in a batch, sends and receives advance chunk by
 * chunk in turn, so a ring of them never waits on itself. Work handles get one pooled event
 * each; the poller reads the status block once it completed.
 *
 * Under graph capture an op goes to the captured channel (ipc.h): its kernels number the
 * steps and chunks themselves and wait for the peers themselves, so every replay is the next
 * operation; captured ops of one capture are ordered by one event, and their work handles
 * complete as enqueued, as on NCCL. The group's memory must exist and be mapped before the
 * capture (allocating, exporting and mapping are not capturable): one eager operation of the
 * group, or of the pair for sends and receives, does it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl/ipc_host.h"

static dlpg_status_t dlpg__ipc_unsupported(const char *fn, const char *what) {
  return dlpg__error(DLPG_ERR_UNSUPPORTED, "%s: %s on the CUDA IPC path (ranks sharing a GPU); "
                     "it serves the collectives, send and recv of one tensor per rank", fn, what);
}

/* The kernels' element type and reduce op of a reducing op. */
static dlpg_status_t dlpg__ipc_types(const char *fn, const dlpg__be_op_t *op, int *type, int *rop) {
  char what[160];
  switch (op->in[0].dtype) {
    case DLPG__DT_FLOAT32: *type = DLPG__IPC_F32; break;
    case DLPG__DT_FLOAT16: *type = DLPG__IPC_F16; break;
    case DLPG__DT_BFLOAT16: *type = DLPG__IPC_BF16; break;
    case DLPG__DT_FLOAT64: *type = DLPG__IPC_F64; break;
    case DLPG__DT_INT32: *type = DLPG__IPC_I32; break;
    case DLPG__DT_INT64: *type = DLPG__IPC_I64; break;
    case DLPG__DT_UINT8: *type = DLPG__IPC_U8; break;
    case DLPG__DT_INT8: *type = DLPG__IPC_I8; break;
    case DLPG__DT_BOOL: *type = DLPG__IPC_BOOL; break;
    case DLPG__DT_UINT32: *type = DLPG__IPC_U32; break;
    case DLPG__DT_UINT64: *type = DLPG__IPC_U64; break;
    case DLPG__DT_FLOAT8_E4M3FN: *type = DLPG__IPC_F8E4M3; break;
    case DLPG__DT_FLOAT8_E5M2: *type = DLPG__IPC_F8E5M2; break;
    default:
      snprintf(what, sizeof what, "dtype %s is not reduced", dlpg__dtype_name(op->in[0].dtype));
      return dlpg__ipc_unsupported(fn, what);
  }
  switch (op->rop) {
    case DLPG_SUM: *rop = DLPG__IPC_SUM; break;
    case DLPG_PROD: *rop = DLPG__IPC_PROD; break;
    case DLPG_MAX: *rop = DLPG__IPC_MAX; break;
    case DLPG_MIN: *rop = DLPG__IPC_MIN; break;
    case DLPG_AVG: *rop = DLPG__IPC_AVG; break;
    case DLPG_PREMUL_SUM: *rop = DLPG__IPC_PREMUL; break;
    default:
      snprintf(what, sizeof what, "reduce op %s is not available", dlpg__reduce_op_name(op->rop));
      return dlpg__ipc_unsupported(fn, what);
  }
  return DLPG_OK;
}

static int dlpg__ipc_is_p2p(const dlpg__be_op_t *op) {
  return op->kind == DLPG__OP_SEND || op->kind == DLPG__OP_RECV;
}

/* Order stream s after channel ev's previous use, run the launches, then mark ev. */
static dlpg_status_t dlpg__ipc_enter(const char *fn, cudaEvent_t ev, cudaStream_t s) {
  return dlpg__cuda_result(cudaStreamWaitEvent(s, ev, 0), fn, "cudaStreamWaitEvent");
}
static dlpg_status_t dlpg__ipc_leave(const char *fn, cudaEvent_t ev, cudaStream_t s) {
  return dlpg__cuda_result(cudaEventRecord(ev, s), fn, "cudaEventRecord");
}

/* One collective step in stream-wait mode: the stream waits on this rank's own counters,
 * which the peers write (ipc.h's in_* fields), and the kernels never wait. */
static dlpg_status_t dlpg__ipc_step_streamed(const char *fn, dlpg__ipc_t *ipc,
                                             dlpg__ipc_step_t *p, cudaStream_t s, int parts) {
  /* A small step's kernels publish it themselves: two launches in place of 2 x (size - 1)
   * stream writes, each a queued operation the GPU's front end runs in turn. */
  long long widest = p->kind == DLPG__IPC_ALLGATHER ? ipc->size : parts; /* parts a kernel moves */
  p->tell = p->len * p->esize * widest <= DLPG__IPC_STEP_ONE_BLOCK;
  if (p->seq > 2 && dlpg__ipc_writes(p)) DLPG_CHECK(dlpg__ipc_await(fn, ipc, p, s, 1, p->seq - 2, 1));
  DLPG_CHECK(dlpg__cuda_result(dlpg__ipc_launch_put(p, s), fn, "CUDA IPC put kernel"));
  if (!p->tell) DLPG_CHECK(dlpg__ipc_tell(fn, ipc, p, s, 0, p->seq));
  DLPG_CHECK(dlpg__ipc_await(fn, ipc, p, s, 0, p->seq, 0));
  DLPG_CHECK(dlpg__cuda_result(dlpg__ipc_launch_get(p, s), fn, "CUDA IPC get kernel"));
  return p->tell ? DLPG_OK : dlpg__ipc_tell(fn, ipc, p, s, 1, p->seq);
}

/* One collective, in steps. Caller holds ipc->mu. */
static dlpg_status_t dlpg__ipc_collective(const char *fn, dlpg__ipc_t *ipc, const dlpg__be_op_t *op,
                                          cudaStream_t s, int ch) {
  dlpg__ipc_step_t p;
  memset(&p, 0, sizeof p);
  p.rank = ipc->rank;
  p.size = ipc->size;
  p.root = op->root;
  p.status = ipc->status_d;
  p.stop = &dlpg__ipc_flags(ipc, DLPG__IPC_EAGER, ipc->rank)->stop;
  p.timeout_ns = (unsigned long long)(op->gview->timeout_s * 1e9);
  p.devseq = ch == DLPG__IPC_GRAPH;
  int streamed = ipc->stream_wait && !p.devseq;
  p.nowait = streamed;
  p.esize = 1;
  long long total = 0;
  int parts = 1;
  const dlpg__tensor_t *in = &op->in[0], *out = &op->out[0];
  switch (op->kind) {
    case DLPG__OP_ALLREDUCE:
    case DLPG__OP_REDUCE:
      p.kind = op->kind == DLPG__OP_ALLREDUCE ? DLPG__IPC_ALLREDUCE : DLPG__IPC_REDUCE;
      DLPG_CHECK(dlpg__ipc_types(fn, op, &p.type, &p.rop));
      p.scalar = dlpg__be_op_scalar(op);
      p.esize = (int)(in->nbytes / (size_t)(in->numel ? in->numel : 1));
      total = in->numel;
      break;
    case DLPG__OP_REDUCE_SCATTER:
      p.kind = DLPG__IPC_REDUCE_SCATTER;
      DLPG_CHECK(dlpg__ipc_types(fn, op, &p.type, &p.rop));
      p.scalar = dlpg__be_op_scalar(op);
      p.esize = (int)(out->nbytes / (size_t)(out->numel ? out->numel : 1));
      total = out->numel;
      p.src_stride = total;
      parts = ipc->size;
      break;
    case DLPG__OP_BROADCAST:
      p.kind = DLPG__IPC_BROADCAST;
      total = (long long)in->nbytes;
      break;
    case DLPG__OP_ALLGATHER:
      p.kind = DLPG__IPC_ALLGATHER;
      total = (long long)in->nbytes;
      p.dst_stride = total;
      break;
    case DLPG__OP_ALLTOALL:
      p.kind = DLPG__IPC_ALLTOALL;
      total = (long long)in->nbytes / ipc->size;
      p.src_stride = p.dst_stride = total;
      parts = ipc->size;
      break;
    default:
      return dlpg__ipc_unsupported(fn, dlpg__op_name(op->kind));
  }
  if (p.esize < 1 || 16 % p.esize != 0) p.esize = 1; /* complex and the like: not reduced here */
  if (total == 0) return DLPG_OK; /* every rank has the same sizes: nothing to exchange */
  /* Elements per step: each rank part a multiple of 16 bytes, so vector copies apply. */
  long long maxlen = (long long)(ipc->chunk[ch] / (size_t)parts / 16) * 16 / p.esize;
  if (maxlen < 1) return dlpg__ipc_unsupported(fn, "a group this large for the staging size");
  const char *src = in->ptr;
  char *dst = out->ptr;
  for (int q = 0; q < ipc->size; q++) {
    p.flags[q] = dlpg__ipc_flags(ipc, ch, q);
    p.buf[0][q] = dlpg__ipc_buf(ipc, ch, q, 0);
    p.buf[1][q] = dlpg__ipc_buf(ipc, ch, q, 1);
  }
  if (streamed) {
    int ran = 0;
    DLPG_CHECK(dlpg__ipc_direct(fn, ipc, op, &p, total, s, &ran));
    if (ran) return DLPG_OK;
  }
  if (!p.devseq) DLPG_CHECK(dlpg__ipc_enter(fn, ipc->coll_last, s));
  for (long long off = 0; off < total; off += maxlen) {
    p.len = total - off < maxlen ? total - off : maxlen;
    if (!p.devseq) p.seq = ++ipc->coll_seq;
    p.src = src + off * p.esize;
    p.dst = dst + off * p.esize;
    if (streamed) {
      DLPG_CHECK(dlpg__ipc_step_streamed(fn, ipc, &p, s, parts));
      continue;
    }
    if (p.len * p.esize * parts <= DLPG__IPC_STEP_ONE_BLOCK) {
      DLPG_CHECK(dlpg__cuda_result(dlpg__ipc_launch_step(&p, s), fn, "CUDA IPC step kernel"));
      continue;
    }
    DLPG_CHECK(dlpg__cuda_result(dlpg__ipc_launch_put(&p, s), fn, "CUDA IPC put kernel"));
    DLPG_CHECK(dlpg__cuda_result(dlpg__ipc_launch_get(&p, s), fn, "CUDA IPC get kernel"));
    DLPG_CHECK(dlpg__cuda_result(dlpg__ipc_launch_flag(&p.flags[ipc->rank]->done, p.seq, p.stop, s),
                              fn, "CUDA IPC flag kernel"));
  }
  if (p.devseq) return DLPG_OK;
  if (streamed)
    dlpg__ipc_watch_add(ipc, s, DLPG__IPC_PEND_COLL, -1, ipc->coll_seq, op->gview->timeout_s);
  return dlpg__ipc_leave(fn, ipc->coll_last, s);
}

/* Chunk c (from 0) of a send or receive in channel ch, if it has one; 1 when launched.
 * Caller holds ipc->mu. */
static int dlpg__ipc_p2p_chunk(const char *fn, dlpg__ipc_t *ipc, const dlpg__be_op_t *op,
                               cudaStream_t s, int ch, long long c, dlpg_status_t *st) {
  long long mbox = (long long)ipc->mbox[ch];
  long long nbytes = (long long)op->in[0].nbytes, off = c * mbox;
  if (off >= nbytes) return 0;
  int q = op->peer, send = op->kind == DLPG__OP_SEND;
  dlpg__ipc_chunk_t k;
  memset(&k, 0, sizeof k);
  k.rank = ipc->rank;
  k.peer = q;
  k.bytes = nbytes - off < mbox ? nbytes - off : mbox;
  k.user = (char *)op->in[0].ptr + off;
  k.mine = dlpg__ipc_flags(ipc, ch, ipc->rank);
  k.theirs = dlpg__ipc_flags(ipc, ch, q);
  k.stop = &dlpg__ipc_flags(ipc, DLPG__IPC_EAGER, ipc->rank)->stop;
  k.status = ipc->status_d;
  k.timeout_ns = (unsigned long long)(op->gview->timeout_s * 1e9);
  k.devseq = ch == DLPG__IPC_GRAPH;
  k.nowait = ipc->stream_wait && !k.devseq;
  /* The pair's mailboxes are the sender's. */
  for (int b = 0; b < 2; b++)
    k.box[b] = send ? dlpg__ipc_mbox(ipc, ch, ipc->rank, q, b) : dlpg__ipc_mbox(ipc, ch, q, ipc->rank, b);
  if (!k.devseq) k.k = send ? ++ipc->sent[q] : ++ipc->recvd[q];
  const char *wait_what = "cuStreamWaitValue64 (CUDA IPC)";
  const char *write_what = "cuStreamWriteValue64 (CUDA IPC)";
  if (send) {
    /* Stream-wait mode: the mailbox of parity k%2 is free once q took chunk k-2. */
    if (k.nowait && k.k > 2)
      *st = dlpg__cuda_result(dlpg__ipc_wait_ge(s, &k.mine->in_taken[q], k.k - 2), fn, wait_what);
    if (*st == DLPG_OK)
      *st = dlpg__cuda_result(dlpg__ipc_launch_send(&k, s), fn, "CUDA IPC send kernel");
    if (*st == DLPG_OK && k.nowait)
      *st = dlpg__cuda_result(dlpg__ipc_write(s, &k.theirs->in_sent[ipc->rank], k.k), fn, write_what);
    else if (*st == DLPG_OK)
      *st = dlpg__cuda_result(dlpg__ipc_launch_flag(&k.mine->sent[q], k.k, k.stop, s), fn,
                           "CUDA IPC flag kernel");
  } else {
    if (k.nowait)
      *st = dlpg__cuda_result(dlpg__ipc_wait_ge(s, &k.mine->in_sent[q], k.k), fn, wait_what);
    if (*st == DLPG_OK)
      *st = dlpg__cuda_result(dlpg__ipc_launch_recv(&k, s), fn, "CUDA IPC recv kernel");
    if (*st == DLPG_OK && k.nowait)
      *st = dlpg__cuda_result(dlpg__ipc_write(s, &k.theirs->in_taken[ipc->rank], k.k), fn, write_what);
    else if (*st == DLPG_OK)
      *st = dlpg__cuda_result(dlpg__ipc_launch_flag(&k.mine->taken[q], k.k, k.stop, s), fn,
                           "CUDA IPC flag kernel");
  }
  return *st == DLPG_OK;
}

static cudaEvent_t dlpg__ipc_chan(dlpg__ipc_t *ipc, const dlpg__be_op_t *op) {
  if (op->kind == DLPG__OP_SEND) return ipc->send_last[op->peer];
  if (op->kind == DLPG__OP_RECV) return ipc->recv_last[op->peer];
  return ipc->coll_last;
}

/* ------------------------------------------------------------------ work pollers */

typedef struct dlpg__ipc_poll {
  struct dlpg__nccl *st;  /* retained: ipc lives until its last release */
  dlpg__ipc_t *ipc;
  const char *fn;
  dlpg__nccl_event_t *ev;
  int done;
} dlpg__ipc_poll_t;

static dlpg_status_t dlpg__ipc_poll(void *data, int *done) {
  dlpg__ipc_poll_t *p = data;
  *done = 0;
  cudaError_t e = dlpg__nccl_event_query(p->ev->ev);
  if (e == cudaErrorNotReady) return DLPG_OK;
  *done = 1;
  p->done = 1;
  if (e != cudaSuccess) return dlpg__cuda_result(e, p->fn, "cudaEventQuery");
  return dlpg__ipc_failure(p->fn, p->ipc);
}

static void dlpg__ipc_poll_release(void *data) {
  dlpg__ipc_poll_t *p = data;
  if (p->done || dlpg__nccl_event_query(p->ev->ev) == cudaSuccess) {
    dlpg__nccl_event_put(p->st, p->ev);
  } else {
    cudaEventDestroy(p->ev->ev);
    free(p->ev);
  }
  dlpg__nccl_state_release(p->st);
  free(p);
}

static const dlpg__work_backend_t dlpg__ipc_work_backend = {dlpg__ipc_poll, dlpg__ipc_poll_release};

static dlpg_status_t dlpg__ipc_attach(const char *fn, dlpg__ipc_t *ipc, dlpg__be_op_t *op,
                                      cudaStream_t s) {
  dlpg__ipc_poll_t *p = calloc(1, sizeof *p);
  if (!p) return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
  dlpg_status_t r = dlpg__nccl_event_get(fn, ipc->st, ipc->dev, &p->ev);
  if (r == DLPG_OK) {
    r = dlpg__cuda_result(cudaEventRecord(p->ev->ev, s), fn, "cudaEventRecord");
    if (r != DLPG_OK) dlpg__nccl_event_put(ipc->st, p->ev);
  }
  if (r != DLPG_OK) {
    free(p);
    return r;
  }
  p->st = ipc->st;
  p->ipc = ipc;
  p->fn = fn;
  dlpg__nccl_state_retain(p->st);
  dlpg__nccl_work_set_backend(op->work, &dlpg__ipc_work_backend, p);
  return DLPG_OK;
}

/* ------------------------------------------------------------------ the batch */

/* The internal stream of a send or receive with a work (outside a batch), ordered after
 * the caller's stream. Caller holds ipc->mu. */
static dlpg_status_t dlpg__ipc_own_stream(const char *fn, dlpg__ipc_t *ipc, const dlpg__be_op_t *op,
                                          cudaStream_t *s) {
  static const int kSendSide = 0;
  cudaStream_t *own = op->kind == DLPG__OP_SEND ? &ipc->own[kSendSide][op->peer]
                                                : &ipc->own[1 - kSendSide][op->peer];
  if (!*own)
    DLPG_CHECK(dlpg__cuda_result(cudaStreamCreateWithFlags(own, cudaStreamNonBlocking), fn,
                                 "cudaStreamCreateWithFlags (CUDA IPC pair stream)"));
  if (!ipc->fork_ev)
    DLPG_CHECK(dlpg__cuda_result(cudaEventCreateWithFlags(&ipc->fork_ev, cudaEventDisableTiming),
                                 fn, "cudaEventCreateWithFlags"));
  DLPG_CHECK(dlpg__cuda_result(cudaEventRecord(ipc->fork_ev, *s), fn, "cudaEventRecord"));
  DLPG_CHECK(dlpg__cuda_result(cudaStreamWaitEvent(*own, ipc->fork_ev, 0), fn, "cudaStreamWaitEvent"));
  *s = *own;
  return DLPG_OK;
}

static dlpg_status_t dlpg__ipc_check_op(const char *fn, const dlpg__be_op_t *op,
                                        const dlpg__be_op_t *first, int *captured) {
  if (op->state != first->state)
    return dlpg__ipc_unsupported(fn, "a batch spanning several groups");
  if (op->ntensors != 1) return dlpg__ipc_unsupported(fn, "more than one tensor per rank");
  switch (op->kind) {
    case DLPG__OP_ALLREDUCE: case DLPG__OP_REDUCE: case DLPG__OP_BROADCAST:
    case DLPG__OP_ALLGATHER: case DLPG__OP_REDUCE_SCATTER: case DLPG__OP_ALLTOALL:
    case DLPG__OP_SEND: case DLPG__OP_RECV:
      break;
    default:
      if (!dlpg__ipc_expands(op)) return dlpg__ipc_unsupported(fn, dlpg__op_name(op->kind));
  }
  if (op->kind == DLPG__OP_ALLTOALL && op->in[0].ptr == op->out[0].ptr && op->in[0].nbytes)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: input and output are the same memory "
                       "(%p); alltoall needs distinct buffers", fn, op->in[0].ptr);
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  DLPG_CHECK(dlpg__cuda_result(cudaStreamIsCapturing((cudaStream_t)op->streams[0], &cs), fn,
                               "cudaStreamIsCapturing"));
  *captured = cs != cudaStreamCaptureStatusNone;
  return DLPG_OK;
}

/* A captured op waits for the captured ops before it in the same capture (on any stream),
 * then is the one later ones wait for. An event recorded in another capture is not waited
 * for: that graph's replays are ordered by whoever replays it. Caller holds ipc->mu. */
static dlpg_status_t dlpg__ipc_graph_order(const char *fn, dlpg__ipc_t *ipc, cudaStream_t s,
                                           int after) {
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
#if CUDART_VERSION >= 13000
  cudaError_t e = cudaStreamGetCaptureInfo(s, &cs, &id, NULL, NULL, NULL, NULL);
#else
  cudaError_t e = cudaStreamGetCaptureInfo(s, &cs, &id, NULL, NULL, NULL);
#endif
  DLPG_CHECK(dlpg__cuda_result(e, fn, "cudaStreamGetCaptureInfo"));
  if (after) {
    ipc->graph_capture = id;
    return dlpg__ipc_leave(fn, ipc->graph_last, s);
  }
  if (ipc->graph_capture != id) return DLPG_OK;
  return dlpg__ipc_enter(fn, ipc->graph_last, s);
}

static dlpg_status_t dlpg__ipc_run(const char *fn, dlpg__ipc_t *ipc, dlpg__be_op_t *const *ops,
                                   int n, cudaStream_t *streams, int captured) {
  double deadline = dlpg__now() + ops[0]->gview->timeout_s;
  for (int k = 0; k < n; k++) {
    int lo = dlpg__ipc_is_p2p(ops[k]) ? ops[k]->peer : 0;
    int hi = dlpg__ipc_is_p2p(ops[k]) ? ops[k]->peer + 1 : ipc->size;
    for (int q = lo; q < hi; q++) {
      if (captured && !ipc->peer[q])
        return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: group '%s': rank %d has not mapped "
                           "rank %d's CUDA IPC memory yet, which cannot happen under graph "
                           "capture; run one operation with rank %d (a collective of the group, "
                           "or a send or receive with it) before capturing", fn, ipc->st->name,
                           ipc->rank, q, q);
      DLPG_CHECK(dlpg__ipc_map(fn, ipc, q, deadline));
    }
  }
  int ch = captured ? DLPG__IPC_GRAPH : DLPG__IPC_EAGER;
  pthread_mutex_lock(&ipc->mu);
  dlpg_status_t s = DLPG_OK;
  for (int k = 0; k < n && s == DLPG_OK; k++) {
    streams[k] = (cudaStream_t)ops[k]->streams[0];
    /* A capture keeps the caller's stream (a fork would have to be joined before it ends). */
    if (n == 1 && !captured && ops[k]->work && dlpg__ipc_is_p2p(ops[k]))
      s = dlpg__ipc_own_stream(fn, ipc, ops[k], &streams[k]);
  }
  for (int k = 0; k < n && s == DLPG_OK && captured; k++)
    s = dlpg__ipc_graph_order(fn, ipc, streams[k], 0);
  /* Collectives in issue order (every rank issues the same sequence), then the sends and
   * receives a chunk each in turn. */
  for (int k = 0; k < n && s == DLPG_OK; k++)
    if (!dlpg__ipc_is_p2p(ops[k])) s = dlpg__ipc_collective(fn, ipc, ops[k], streams[k], ch);
  for (int k = 0; k < n && s == DLPG_OK && !captured; k++)
    if (dlpg__ipc_is_p2p(ops[k])) s = dlpg__ipc_enter(fn, dlpg__ipc_chan(ipc, ops[k]), streams[k]);
  for (long long c = 0, more = 1; more && s == DLPG_OK; c++) {
    more = 0;
    for (int k = 0; k < n && s == DLPG_OK; k++)
      if (dlpg__ipc_is_p2p(ops[k]))
        more |= dlpg__ipc_p2p_chunk(fn, ipc, ops[k], streams[k], ch, c, &s);
  }
  for (int k = 0; k < n && s == DLPG_OK && ipc->stream_wait && !captured; k++) {
    const dlpg__be_op_t *o = ops[k];
    if (o->kind == DLPG__OP_SEND)
      dlpg__ipc_watch_add(ipc, streams[k], DLPG__IPC_PEND_SEND, o->peer, ipc->sent[o->peer],
                          o->gview->timeout_s);
    else if (o->kind == DLPG__OP_RECV)
      dlpg__ipc_watch_add(ipc, streams[k], DLPG__IPC_PEND_RECV, o->peer, ipc->recvd[o->peer],
                          o->gview->timeout_s);
  }
  for (int k = 0; k < n && s == DLPG_OK && !captured; k++)
    if (dlpg__ipc_is_p2p(ops[k])) s = dlpg__ipc_leave(fn, dlpg__ipc_chan(ipc, ops[k]), streams[k]);
  for (int k = 0; k < n && s == DLPG_OK && captured; k++)
    s = dlpg__ipc_graph_order(fn, ipc, streams[k], 1);
  for (int k = 0; k < n && s == DLPG_OK; k++) {
    if (!ops[k]->work) continue;
    /* Captured, not run: complete as enqueued, as on NCCL. */
    if (captured) dlpg__nccl_work_complete(ops[k]->work, DLPG_OK, NULL);
    else s = dlpg__ipc_attach(fn, ipc, ops[k], streams[k]);
  }
  pthread_mutex_unlock(&ipc->mu);
  return s;
}

/* The device an op runs on: its input's, or its output's where it has no input (scatter
 * off the root). */
static int dlpg__ipc_op_dev(const dlpg__be_op_t *op) {
  return op->in[0].ptr || !op->out[0].ptr ? op->in[0].device_id : op->out[0].device_id;
}

/* Run the batch, the rooted and uneven kinds as their parts (ipc_expand.c), then give each
 * of those its work after its parts, on its stream. */
static dlpg_status_t dlpg__ipc_run_all(const char *fn, dlpg__ipc_t *ipc, dlpg__be_op_t *const *ops,
                                       int n, int captured) {
  int nexp = 0;
  for (int k = 0; k < n; k++) nexp += dlpg__ipc_expands(ops[k]);
  size_t cap = (size_t)n + (size_t)nexp * 2 * (size_t)ipc->size;
  dlpg__be_op_t *parts = nexp ? calloc((size_t)nexp * 2 * (size_t)ipc->size, sizeof *parts) : NULL;
  /* A batch of a few ops (most calls: one) needs no allocation on the issue path. */
  dlpg__be_op_t *run_stack[8];
  cudaStream_t streams_stack[8];
  dlpg__be_op_t **run = cap <= 8 ? run_stack : calloc(cap, sizeof *run);
  cudaStream_t *streams = cap <= 8 ? streams_stack : calloc(cap, sizeof *streams);
  dlpg_status_t s = DLPG_OK;
  if ((nexp && !parts) || !run || !streams) s = dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
  int nrun = 0, np = 0;
  for (int k = 0; k < n && s == DLPG_OK; k++) {
    if (!dlpg__ipc_expands(ops[k])) {
      run[nrun++] = ops[k];
      continue;
    }
    int from = np;
    s = dlpg__ipc_expand(fn, ops[k], ipc->rank, ipc->size, parts, &np);
    for (int i = from; i < np; i++) run[nrun++] = &parts[i];
  }
  if (s == DLPG_OK && nrun > 0) s = dlpg__ipc_run(fn, ipc, run, nrun, streams, captured);
  pthread_mutex_lock(&ipc->mu);
  for (int k = 0; k < n && s == DLPG_OK; k++) {
    if (!dlpg__ipc_expands(ops[k]) || !ops[k]->work) continue;
    if (captured) dlpg__nccl_work_complete(ops[k]->work, DLPG_OK, NULL);
    else s = dlpg__ipc_attach(fn, ipc, ops[k], (cudaStream_t)ops[k]->streams[0]);
  }
  pthread_mutex_unlock(&ipc->mu);
  free(parts);
  if (run != run_stack) free(run);
  if (streams != streams_stack) free(streams);
  return s;
}

dlpg_status_t dlpg__ipc_issue(const char *fn, dlpg__be_op_t *const *ops, int n) {
  int captured = 0;
  for (int k = 0; k < n; k++) {
    int cap = 0;
    DLPG_CHECK(dlpg__ipc_check_op(fn, ops[k], ops[0], &cap));
    if (k > 0 && cap != captured)
      return dlpg__ipc_unsupported(fn, "a batch of captured and uncaptured operations");
    captured = cap;
  }
  struct dlpg__nccl *st = ops[0]->state;
  if (atomic_load(&st->aborted))
    return dlpg__error(DLPG_ERR_ABORTED, "%s: group '%s' was aborted", fn, st->name);
  if (captured) {
    pthread_mutex_lock(&st->mu);
    int made = st->ipc != NULL;
    pthread_mutex_unlock(&st->mu);
    if (!made)
      return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: group '%s': the first CUDA operation "
                         "of ranks sharing a GPU makes and exports their CUDA IPC memory, "
                         "which cannot happen under graph capture; run one operation of the "
                         "group before capturing", fn, st->name);
  }
  int dev = dlpg__ipc_op_dev(ops[0]), cur = -1;
  cudaGetDevice(&cur);
  if (cur != dev)
    DLPG_CHECK(dlpg__cuda_result(cudaSetDevice(dev), fn, "cudaSetDevice"));
  dlpg__ipc_t *ipc = NULL;
  dlpg_status_t s = dlpg__ipc_get(fn, st, dev, &ipc);
  /* A group whose kernels failed (a peer that never came, an abort) stays failed. */
  if (s == DLPG_OK) s = dlpg__ipc_failure(fn, ipc);
  if (s == DLPG_OK) s = dlpg__ipc_run_all(fn, ipc, ops, n, captured);
  if (cur >= 0 && cur != dev) cudaSetDevice(cur);
  return s;
}
