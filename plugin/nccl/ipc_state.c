/* The IPC path's memory (ipc.h): one device allocation per rank and group, exported once
 * with cudaIpcGetMemHandle and published under the group's keys; each peer maps it once, at
 * the first operation that reads it; destroy waits until the peers have read this rank's
 * buffers (bounded by the group's timeout), closes every mapping and frees the allocation.
 * A status block in mapped host memory carries the kernels' failures and the host's abort. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl/ipc_host.h"

/* What a rank publishes: its allocation's handle, and what a peer must agree with. */
typedef struct dlpg__ipc_rec {
  cudaIpcMemHandle_t handle;
  int32_t pid, size;
  int32_t stream_wait, pad;
  uint64_t ptr;   /* this process's address: a peer in the same process uses it directly */
  uint64_t chunk, mbox, bytes;
  uint64_t direct_bytes; /* in-place collectives from this size (0: none) */
  char board[64];        /* the name of its board (ipc_board.c) while no peer has mapped it */
} dlpg__ipc_rec_t;

static void dlpg__ipc_key(const dlpg__ipc_t *ipc, int q, char *key, size_t cap) {
  snprintf(key, cap, "%s/cudaipc/mem/%d", ipc->st->keys, q);
}

static dlpg_status_t dlpg__ipc_create(const char *fn, struct dlpg__nccl *st, int dev,
                                      dlpg__ipc_t **out) {
#ifdef DLPG_NO_IPC_KERNELS
  (void)dev;
  (void)out;
  return dlpg__error(DLPG_ERR_UNSUPPORTED, "%s: group '%s' needs the CUDA IPC path (ranks "
                     "sharing a GPU), and this libdlpg_nccl.so was built without nvcc, so "
                     "without its kernels", fn, st->name);
#endif
  if (st->size > DLPG__IPC_MAX_RANKS)
    return dlpg__error(DLPG_ERR_UNSUPPORTED, "%s: group '%s' has %d ranks; the CUDA IPC path "
                       "serves at most %d", fn, st->name, st->size, DLPG__IPC_MAX_RANKS);
  dlpg__ipc_t *ipc = calloc(1, sizeof *ipc);
  if (!ipc) return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
  ipc->st = st;
  ipc->rank = st->rank;
  ipc->size = st->size;
  ipc->dev = dev;
  /* Without MPS the ranks' contexts take turns on the GPU, and every wait for a peer is a
   * switch between them: the biggest cost of this path, and the user's to change. */
  int mps = -1;
  if (cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, dev) != cudaSuccess) {
    cudaGetLastError();
    mps = -1;
  }
  ipc->stream_wait = dlpg__ipc_wait_stream();
  if (ipc->stream_wait && !dlpg__ipc_memops_loaded()) {
    free(ipc);
    return dlpg__error(DLPG_ERR_UNSUPPORTED, "%s: group '%s': DLPG_NCCL_IPC_WAIT=stream needs "
                       "the driver's stream memory operations (cuStreamWaitValue64), which this "
                       "CUDA driver does not offer; use DLPG_NCCL_IPC_WAIT=kernel", fn, st->name);
  }
  /* Each channel's mailboxes (per peer and direction) are a quarter of its chunk: sends
   * move in pieces of them. Captured operations get a quarter of the eager channel's room
   * (larger ones take more steps), since most captures replay small collectives. */
  ipc->chunk[DLPG__IPC_EAGER] = dlpg__ipc_chunk_bytes();
  ipc->chunk[DLPG__IPC_GRAPH] = (ipc->chunk[DLPG__IPC_EAGER] / 4) & ~(size_t)15;
  ipc->bytes = 0;
  for (int ch = 0; ch < DLPG__IPC_NCHAN; ch++) {
    ipc->mbox[ch] = (ipc->chunk[ch] / 4) & ~(size_t)15;
    ipc->off[ch] = ipc->bytes;
    ipc->bytes += DLPG__IPC_FLAGS_BYTES + 2 * ipc->chunk[ch] + 2 * (size_t)st->size * ipc->mbox[ch];
  }
  pthread_mutex_init(&ipc->mu, NULL);
  dlpg_status_t s = DLPG_OK;
  char what[96];
  snprintf(what, sizeof what, "cudaMalloc (%zu bytes of CUDA IPC staging)", ipc->bytes);
  s = dlpg__cuda_result(cudaMalloc((void **)&ipc->base, ipc->bytes), fn, what);
  /* The counters start at 0 before any peer can read them: set on a stream of this path's
   * own (later: the stop word and the waits' release, dlpg__ipc_release), so this waits for
   * no other work of the device (a kernel of another group waiting for a peer). */
  if (s == DLPG_OK)
    s = dlpg__cuda_result(cudaStreamCreateWithFlags(&ipc->rescue, cudaStreamNonBlocking), fn,
                          "cudaStreamCreateWithFlags");
  for (int ch = 0; ch < DLPG__IPC_NCHAN && s == DLPG_OK; ch++)
    s = dlpg__cuda_result(cudaMemsetAsync(ipc->base + ipc->off[ch], 0, DLPG__IPC_FLAGS_BYTES,
                                          ipc->rescue), fn, "cudaMemsetAsync");
  if (s == DLPG_OK)
    s = dlpg__cuda_result(cudaStreamSynchronize(ipc->rescue), fn, "cudaStreamSynchronize");
  if (s == DLPG_OK)
    s = dlpg__cuda_result(cudaHostAlloc((void **)&ipc->status_h, sizeof *ipc->status_h,
                                        cudaHostAllocMapped), fn, "cudaHostAlloc (status)");
  if (s == DLPG_OK) {
    memset((void *)ipc->status_h, 0, sizeof *ipc->status_h);
    s = dlpg__cuda_result(cudaHostGetDevicePointer((void **)&ipc->status_d, (void *)ipc->status_h, 0),
                          fn, "cudaHostGetDevicePointer");
  }
  if (s == DLPG_OK)
    s = dlpg__cuda_result(cudaEventCreateWithFlags(&ipc->coll_last, cudaEventDisableTiming), fn,
                          "cudaEventCreateWithFlags");
  if (s == DLPG_OK)
    s = dlpg__cuda_result(cudaEventCreateWithFlags(&ipc->graph_last, cudaEventDisableTiming), fn,
                          "cudaEventCreateWithFlags");
  /* Every kernel loaded before any of them can wait for a peer (ipc.h). */
  if (s == DLPG_OK) s = dlpg__cuda_result(dlpg__ipc_preload(), fn, "loading the CUDA IPC kernels");
  for (int q = 0; q < st->size && s == DLPG_OK; q++) {
    s = dlpg__cuda_result(cudaEventCreateWithFlags(&ipc->send_last[q], cudaEventDisableTiming), fn,
                          "cudaEventCreateWithFlags");
    if (s == DLPG_OK)
      s = dlpg__cuda_result(cudaEventCreateWithFlags(&ipc->recv_last[q], cudaEventDisableTiming),
                            fn, "cudaEventCreateWithFlags");
  }
  if (s == DLPG_OK && ipc->stream_wait) s = dlpg__ipc_watch_start(fn, ipc);
  dlpg__ipc_rec_t rec;
  memset(&rec, 0, sizeof rec);
  /* In-place collectives wait for their peers on the stream only (ipc_direct.c). */
  ipc->direct_bytes = ipc->stream_wait ? dlpg__ipc_direct_bytes() : 0;
  ipc->boards.rank = ipc->rank;
  ipc->boards.size = ipc->size;
  ipc->boards.group = st->name;
  ipc->boards.timeout_s = st->g ? st->g->timeout_s : 10.0;
  if (s == DLPG_OK) ipc->boards.abort = &ipc->status_h->abort;
  if (s == DLPG_OK && ipc->direct_bytes) {
    s = dlpg__ipc_board_create(fn, &ipc->boards);
    snprintf(rec.board, sizeof rec.board, "%s", ipc->boards.name);
  }
  if (s == DLPG_OK)
    s = dlpg__cuda_result(cudaIpcGetMemHandle(&rec.handle, ipc->base), fn, "cudaIpcGetMemHandle");
  if (s == DLPG_OK) {
    rec.pid = (int32_t)getpid();
    rec.size = st->size;
    rec.stream_wait = ipc->stream_wait;
    rec.ptr = (uint64_t)(uintptr_t)ipc->base;
    rec.chunk = ipc->chunk[DLPG__IPC_EAGER];
    rec.mbox = ipc->mbox[DLPG__IPC_EAGER];
    rec.bytes = ipc->bytes;
    rec.direct_bytes = ipc->direct_bytes;
    char key[700];
    dlpg__ipc_key(ipc, ipc->rank, key, sizeof key);
    s = dlpg__nccl_store_set(st->g->store, key, &rec, sizeof rec);
  }
  if (s != DLPG_OK) {
    ipc->destroyed = 1;
    dlpg__ipc_destroy(ipc);
    dlpg__ipc_free(ipc);
    return s;
  }
  ipc->peer[ipc->rank] = ipc->base;
  DLPG_NCCL_INFO(st->rank, "group '%s': CUDA IPC staging of %zu bytes on cuda:%d exported, %s "
                 "waits; %s", st->name, ipc->bytes, dev, ipc->stream_wait ? "stream" : "kernel",
                 mps == 1 ? "MPS is on: the ranks' kernels run side by side"
                 : mps == 0 ? "MPS is off: the ranks' processes take turns on the GPU and each "
                              "wait for a peer costs a switch between them (about 150 us per "
                              "collective step measured on an H100, against about 15 us under "
                              "MPS: nvidia-cuda-mps-control -d)"
                            : "whether MPS is on is not known");
  *out = ipc;
  return DLPG_OK;
}

dlpg_status_t dlpg__ipc_get(const char *fn, struct dlpg__nccl *st, int dev, dlpg__ipc_t **out) {
  pthread_mutex_lock(&st->mu);
  dlpg_status_t s = DLPG_OK;
  if (!st->ipc) {
    dlpg__ipc_t *ipc = NULL;
    s = dlpg__ipc_create(fn, st, dev, &ipc);
    if (s == DLPG_OK) st->ipc = ipc;
  }
  if (s == DLPG_OK && st->ipc->dev != dev)
    s = dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: group '%s': rank %d's CUDA IPC path runs on "
                    "cuda:%d (its first operation's device); this tensor is on cuda:%d", fn,
                    st->name, st->rank, st->ipc->dev, dev);
  if (s == DLPG_OK && st->ipc->destroyed)
    s = dlpg__error(DLPG_ERR_ABORTED, "%s: group '%s' was destroyed", fn, st->name);
  *out = s == DLPG_OK ? st->ipc : NULL;
  pthread_mutex_unlock(&st->mu);
  return s;
}

dlpg_status_t dlpg__ipc_map(const char *fn, dlpg__ipc_t *ipc, int q, double deadline) {
  if (ipc->peer[q]) return DLPG_OK;
  struct dlpg__nccl *st = ipc->st;
  char key[700], what[64];
  dlpg__ipc_key(ipc, q, key, sizeof key);
  snprintf(what, sizeof what, "rank %d's CUDA IPC memory handle", q);
  dlpg__ipc_rec_t rec;
  size_t len = 0;
  DLPG_CHECK(dlpg__store_get_slices(fn, st, key, &rec, sizeof rec, &len, deadline, what));
  if (len != sizeof rec)
    return dlpg__error(DLPG_ERR_INTERNAL, "%s: group '%s': rank %d's CUDA IPC record has %zu "
                       "bytes, expected %zu (another dlpg version?)", fn, st->name, q, len,
                       sizeof rec);
  if (rec.chunk != ipc->chunk[DLPG__IPC_EAGER] || rec.size != ipc->size)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: group '%s': rank %d stages CUDA IPC "
                       "collectives in %llu-byte buffers, rank %d in %zu-byte ones (set "
                       "DLPG_NCCL_IPC_CHUNK_BYTES alike on every rank)", fn, st->name, q,
                       (unsigned long long)rec.chunk, ipc->rank, ipc->chunk[DLPG__IPC_EAGER]);
  if (rec.stream_wait != ipc->stream_wait)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: group '%s': rank %d waits for its peers "
                       "with %s, rank %d with %s (set DLPG_NCCL_IPC_WAIT alike on every rank)",
                       fn, st->name, q, rec.stream_wait ? "stream" : "kernel", ipc->rank,
                       ipc->stream_wait ? "stream" : "kernel");
  if (rec.direct_bytes != ipc->direct_bytes)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: group '%s': rank %d reads its peers' "
                       "tensors in place from %llu bytes, rank %d from %zu (0: never; set "
                       "DLPG_NCCL_IPC_DIRECT_BYTES alike on every rank)", fn, st->name, q,
                       (unsigned long long)rec.direct_bytes, ipc->rank, ipc->direct_bytes);
  pthread_mutex_lock(&ipc->mu);
  dlpg_status_t s = DLPG_OK;
  if (!ipc->peer[q] && ipc->direct_bytes && !ipc->boards.board[q]) {
    rec.board[sizeof rec.board - 1] = 0;
    s = dlpg__ipc_board_join(fn, &ipc->boards, q, rec.board);
  }
  ipc->same_proc[q] = rec.pid == (int32_t)getpid();
  if (!ipc->peer[q] && s == DLPG_OK) {
    if (rec.pid == (int32_t)getpid()) {
      /* Another rank of this process: its allocation is addressable as it is. */
      ipc->peer[q] = (char *)(uintptr_t)rec.ptr;
    } else {
      void *p = NULL;
      cudaError_t e = cudaIpcOpenMemHandle(&p, rec.handle, cudaIpcMemLazyEnablePeerAccess);
      if (e != cudaSuccess) {
        cudaGetLastError();
        s = dlpg__error(DLPG_ERR_SYSTEM, "%s: group '%s': rank %d cannot map rank %d's CUDA IPC "
                        "memory on cuda:%d: cudaIpcOpenMemHandle: %s (are the two GPUs peers, "
                        "and the processes on one host?)", fn, st->name, ipc->rank, q, ipc->dev,
                        cudaGetErrorString(e));
      } else {
        ipc->peer[q] = p;
        ipc->opened[q] = 1;
      }
    }
  }
  pthread_mutex_unlock(&ipc->mu);
  return s;
}

void dlpg__ipc_abort(dlpg__ipc_t *ipc) {
  if (ipc && ipc->status_h) ipc->status_h->abort = 1;
  /* A waiting kernel sees the abort in the status block; the stream's waits need their
   * counters, and later kernels the stop word. */
  if (ipc) dlpg__ipc_release(ipc);
}

dlpg_status_t dlpg__ipc_failure(const char *fn, const dlpg__ipc_t *ipc) {
  const dlpg__ipc_status_t *s = ipc->status_h;
  if (!s || (!s->failed && !s->abort)) return DLPG_OK;
  if (!s->failed || s->failed == DLPG__IPC_FAIL_ABORTED)
    return dlpg__error(DLPG_ERR_ABORTED, "%s: group '%s' was aborted (CUDA IPC)", fn,
                       ipc->st->name);
  if (s->peer < 0)
    return dlpg__error(DLPG_ERR_TIMEOUT, "%s: group '%s': a CUDA IPC operation of rank %d did "
                       "not complete within %g s, and no peer's counter lags (which peer is "
                       "missing is not known); the group's CUDA operations fail from then on",
                       fn, ipc->st->name, ipc->rank, ipc->st->g ? ipc->st->g->timeout_s : 0.0);
  return dlpg__error(DLPG_ERR_TIMEOUT, "%s: group '%s': rank %d did not arrive within %g s "
                     "(rank %d's CUDA IPC kernel waited for it at step %llu); the group's CUDA "
                     "operations fail from then on", fn, ipc->st->name, s->peer,
                     ipc->st->g ? ipc->st->g->timeout_s : 0.0, ipc->rank,
                     (unsigned long long)s->step);
}

/* Read rank q's counters of channel ch through its mapping (a small copy on a stream of
 * its own, s, so it waits for no kernel of the legacy default stream). */
static int dlpg__peer_flags(const dlpg__ipc_t *ipc, int ch, int q, cudaStream_t s,
                            dlpg__ipc_flags_t *out) {
  return cudaMemcpyAsync(out, dlpg__ipc_flags(ipc, ch, q), sizeof *out, cudaMemcpyDefault, s) ==
             cudaSuccess &&
         cudaStreamSynchronize(s) == cudaSuccess;
}

/* Whether every peer has read what this rank staged for it: in the eager channel, against
 * the host's numbers; in the captured one, against this rank's own device counters. */
static int dlpg__peers_drained(const dlpg__ipc_t *ipc, cudaStream_t s) {
  dlpg__ipc_flags_t g;
  if (!dlpg__peer_flags(ipc, DLPG__IPC_GRAPH, ipc->rank, s, &g)) return 1;
  for (int q = 0; q < ipc->size; q++) {
    if (q == ipc->rank || !ipc->peer[q]) continue;
    dlpg__ipc_flags_t f;
    if (!dlpg__peer_flags(ipc, DLPG__IPC_GRAPH, q, s, &f)) return 1;
    if (f.done < g.done || f.taken[ipc->rank] < g.sent[q]) return 0;
    if (ipc->stream_wait) {
      /* The peers write what they read into this rank's own block. */
      if (!dlpg__peer_flags(ipc, DLPG__IPC_EAGER, ipc->rank, s, &f)) return 1;
      if (f.in_done[q] < ipc->coll_seq || f.in_taken[q] < ipc->sent[q]) return 0;
      continue;
    }
    if (!dlpg__peer_flags(ipc, DLPG__IPC_EAGER, q, s, &f)) return 1; /* unreadable: none to wait for */
    if (f.done < ipc->coll_seq || f.taken[ipc->rank] < ipc->sent[q]) return 0;
  }
  return 1;
}

/* Whether the event completed (or cannot say). */
static int dlpg__ev_done(cudaEvent_t ev) {
  if (!ev) return 1;
  cudaError_t e = dlpg__nccl_event_query(ev); /* as the pollers: safe beside a capture */
  if (e == cudaErrorNotReady) return 0;
  if (e != cudaSuccess) cudaGetLastError();
  return 1;
}

void dlpg__ipc_destroy(dlpg__ipc_t *ipc) {
  if (!ipc) return;
  struct dlpg__nccl *st = ipc->st;
  int cur = -1;
  cudaGetDevice(&cur);
  cudaSetDevice(ipc->dev);
  double timeout = st->g ? st->g->timeout_s : 10.0;
  double deadline = dlpg__now() + timeout;
  /* This rank's queued kernels end by themselves (each wait has the same deadline). */
  for (;;) {
    int busy = !dlpg__ev_done(ipc->coll_last);
    for (int q = 0; q < ipc->size && !busy; q++)
      busy = !dlpg__ev_done(ipc->send_last[q]) || !dlpg__ev_done(ipc->recv_last[q]);
    if (!busy || dlpg__now() > deadline) break;
    dlpg__sleep(200e-6);
  }
  /* Stream-wait mode: waits still blocked at the deadline would hold the streams for good. */
  if (ipc->stream_wait && !dlpg__ipc_watch_idle(ipc)) {
    if (ipc->status_h && !ipc->status_h->failed) ipc->status_h->abort = 1;
    dlpg__ipc_release(ipc);
    for (double end = dlpg__now() + 1.0; !dlpg__ipc_watch_idle(ipc) && dlpg__now() < end;)
      dlpg__sleep(1e-3);
  }
  dlpg__ipc_watch_stop(ipc);
  /* Peers still reading this rank's buffers would read freed memory: wait until they have
   * read every step, unless the group failed (they will not). */
  cudaStream_t s = NULL;
  if (ipc->base && ipc->status_h && !ipc->status_h->failed && !ipc->status_h->abort &&
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess) {
    while (!dlpg__peers_drained(ipc, s) && dlpg__now() < deadline) dlpg__sleep(500e-6);
    if (!dlpg__peers_drained(ipc, s))
      DLPG_NCCL_WARN(st->rank, "group '%s': a peer had not read this rank's CUDA IPC buffers "
                     "within %g s; freeing them", st->name, timeout);
    cudaStreamDestroy(s);
  }
  pthread_mutex_lock(&ipc->mu);
  ipc->destroyed = 1;
  dlpg__ipc_direct_close(ipc);
  dlpg__ipc_board_free(&ipc->boards);
  for (int q = 0; q < ipc->size; q++) {
    if (ipc->opened[q]) {
      cudaError_t e = cudaIpcCloseMemHandle(ipc->peer[q]);
      if (e != cudaSuccess)
        DLPG_NCCL_WARN(st->rank, "cudaIpcCloseMemHandle of rank %d's memory: %s", q,
                       cudaGetErrorString(e));
    }
    ipc->opened[q] = 0;
    ipc->peer[q] = NULL;
  }
  if (ipc->base) cudaFree(ipc->base);
  ipc->base = NULL;
  pthread_mutex_unlock(&ipc->mu);
  cudaGetLastError();
  if (cur >= 0) cudaSetDevice(cur);
}

void dlpg__ipc_free(dlpg__ipc_t *ipc) {
  if (!ipc) return;
  if (ipc->coll_last) cudaEventDestroy(ipc->coll_last);
  if (ipc->graph_last) cudaEventDestroy(ipc->graph_last);
  for (int q = 0; q < ipc->size; q++) {
    if (ipc->send_last[q]) cudaEventDestroy(ipc->send_last[q]);
    if (ipc->recv_last[q]) cudaEventDestroy(ipc->recv_last[q]);
  }
  for (int d = 0; d < 2; d++)
    for (int q = 0; q < ipc->size; q++)
      if (ipc->own[d][q]) cudaStreamDestroy(ipc->own[d][q]);
  if (ipc->fork_ev) cudaEventDestroy(ipc->fork_ev);
  if (ipc->rescue) cudaStreamDestroy(ipc->rescue);
  if (ipc->status_h) cudaFreeHost((void *)ipc->status_h);
  pthread_mutex_destroy(&ipc->mu);
  free(ipc);
}
