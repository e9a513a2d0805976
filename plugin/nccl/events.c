/* Completion of CUDA work: after an operation is enqueued, one CUDA event per device is
 * recorded on the caller's stream, and the work gets a poller that queries those events and
 * the communicator's asynchronous error. The host never synchronises on the fast path.
 * Events come from a per-group, per-device pool (event_pool.c), so a steady stream of
 * operations creates no new CUDA objects. While a stream is being captured
 * into a CUDA graph no event is recorded: the work completes as soon as the operation is
 * enqueued (captured), and the graph's replays are ordered by the caller's stream. */
#include <stdlib.h>

#include "nccl/nccl_internal.h"

typedef struct dlpg__nccl_poll {
  dlpg__nccl_comm_t *c; /* retained */
  const char *fn;       /* static string */
  int n, ndone;
  dlpg__nccl_event_t *ev[DLPG__MAX_LOCAL_DEVICES];
  int done[DLPG__MAX_LOCAL_DEVICES];
} dlpg__nccl_poll_t;

static dlpg_status_t dlpg__nccl_poll(void *data, int *done) {
  dlpg__nccl_poll_t *p = data;
  *done = 0;
  for (int i = 0; i < p->n; i++) {
    if (p->done[i]) continue;
    cudaError_t e = dlpg__nccl_event_query(p->ev[i]->ev);
    if (e == cudaSuccess) {
      p->done[i] = 1;
      p->ndone++;
    } else if (e != cudaErrorNotReady) {
      *done = 1;
      return dlpg__cuda_result(e, p->fn, "cudaEventQuery");
    }
  }
  if (p->ndone == p->n) {
    *done = 1;
    return DLPG_OK;
  }
  /* Still running: a peer failure shows as the communicator's asynchronous error. */
  dlpg__nccl_comm_t *c = p->c;
  dlpg_status_t s = DLPG_OK;
  dlpg__nccl_rdlock();
  if (c->state == DLPG__COMM_ABORTED) {
    s = dlpg__error(DLPG_ERR_ABORTED, "%s: group '%s' was aborted", p->fn, c->st->name);
  } else {
    for (int i = 0; i < c->ndev && s == DLPG_OK; i++) {
      if (!c->comms[i]) continue;
      ncclResult_t a = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(c->comms[i], &a);
      if (r != ncclSuccess) a = r;
      if (a != ncclSuccess && a != ncclInProgress)
        s = dlpg__nccl_result(a, c->comms[i], p->fn, "NCCL operation (asynchronous error)");
    }
  }
  dlpg__nccl_unlock();
  if (s != DLPG_OK) *done = 1;
  return s;
}

static void dlpg__nccl_poll_release(void *data) {
  dlpg__nccl_poll_t *p = data;
  struct dlpg__nccl *st = p->c->st;
  /* An event whose work never finished may still be pending on a stream: destroying it is
   * safe (CUDA defers the release), but it must not go back to the pool. */
  for (int i = 0; i < p->n; i++) {
    if (p->done[i] || dlpg__nccl_event_query(p->ev[i]->ev) == cudaSuccess) {
      dlpg__nccl_event_put(st, p->ev[i]);
    } else {
      cudaEventDestroy(p->ev[i]->ev);
      free(p->ev[i]);
    }
  }
  dlpg__nccl_comm_release(p->c);
  free(p);
}

static const dlpg__work_backend_t dlpg__nccl_work_backend = {dlpg__nccl_poll,
                                                             dlpg__nccl_poll_release};

dlpg_status_t dlpg__nccl_attach_work(const char *fn, dlpg__be_op_t *op, dlpg__nccl_comm_t *c,
                                     cudaStream_t *streams) {
  int capturing = 0;
  for (int i = 0; i < op->ntensors; i++) {
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(streams[i], &cs);
    if (e != cudaSuccess) return dlpg__cuda_result(e, fn, "cudaStreamIsCapturing");
    if (cs == cudaStreamCaptureStatusActive) capturing = 1;
  }
  if (capturing) {
    /* Captured, not run: complete as enqueued (documented in nccl.h). */
    dlpg__nccl_work_complete(op->work, DLPG_OK, NULL);
    return DLPG_OK;
  }
  dlpg__nccl_poll_t *p = calloc(1, sizeof(*p));
  if (!p) return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
  p->fn = fn;
  dlpg_status_t s = DLPG_OK;
  int cur = -1;
  cudaGetDevice(&cur);
  for (int i = 0; i < op->ntensors && s == DLPG_OK; i++) {
    int dev = op->in[i].device_id;
    if (dev != cur) s = dlpg__cuda_result(cudaSetDevice(dev), fn, "cudaSetDevice");
    cur = dev;
    if (s == DLPG_OK) s = dlpg__nccl_event_get(fn, c->st, dev, &p->ev[i]);
    if (s != DLPG_OK) break;
    p->n++;
    s = dlpg__cuda_result(cudaEventRecord(p->ev[i]->ev, streams[i]), fn, "cudaEventRecord");
  }
  if (s != DLPG_OK) {
    for (int i = 0; i < p->n; i++) dlpg__nccl_event_put(c->st, p->ev[i]);
    free(p);
    return s;
  }
  dlpg__nccl_comm_retain(c);
  p->c = c;
  dlpg__nccl_work_set_backend(op->work, &dlpg__nccl_work_backend, p);
  return DLPG_OK;
}
