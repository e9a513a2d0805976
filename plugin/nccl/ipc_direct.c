/* In-place collectives of the IPC path: a large collective reads its peers' tensors where
 * they are, mapped through CUDA IPC, instead of copying each rank's part into its staging
 * buffer first (the put of ipc.h). An allreduce of S bytes by two ranks then moves about
 * 5 S through the GPU's memory instead of 10 S (each rank reduces its half from both
 * inputs into its output, then copies the peer's reduced half), a broadcast 2 S instead of
 * 4 S.
 *
 * Which tensors are where is known only on the hosts, at the operation: the ranks meet on
 * their boards (ipc_board.c), offer their tensors' allocations (exported once per buffer
 * id), map their peers' (once per allocation, kept for later operations) and agree; when
 * one cannot (a tensor the legacy IPC API cannot export, a peer busy elsewhere), the
 * operation runs staged on every rank. On the stream it is the staged path's counters
 * (stream-wait mode only): a step publishes ready, waits for the ready of the ranks it reads,
 * runs the get kernel on the peers' tensors, publishes done; the operation ends when every
 * rank that read this one's tensors published done, so the caller may reuse them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cuda.h>

#include "nccl/ipc_host.h"

_Static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(((dlpg__ipc_part_t *)0)->handle),
               "an offer carries a CUDA IPC handle's bytes");
_Static_assert(DLPG__IPC_BOARD_RANKS == DLPG__IPC_MAX_RANKS, "one limit of ranks");

typedef CUresult (*dlpg__ptr_attrs_fn)(unsigned int, CUpointer_attribute *, void **, CUdeviceptr);
static pthread_once_t dlpg__attrs_once = PTHREAD_ONCE_INIT;
static dlpg__ptr_attrs_fn dlpg__ptr_attrs;

static void dlpg__attrs_load(void) {
  void *f = NULL;
  enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &f, 12000, cudaEnableDefault, &q) !=
          cudaSuccess || q != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return;
  }
  dlpg__ptr_attrs = (dlpg__ptr_attrs_fn)f;
}

/* The part describing this rank's tensor at ptr (nbytes): 1 when its allocation can be
 * exported through the legacy IPC API (cudaMalloc'd; not the VMM API's or a pool's). */
static int dlpg__export(dlpg__ipc_t *ipc, const void *ptr, size_t nbytes, dlpg__ipc_part_t *part) {
  pthread_once(&dlpg__attrs_once, dlpg__attrs_load);
  if (!dlpg__ptr_attrs || !ptr) return 0;
  CUdeviceptr start = 0;
  size_t size = 0;
  unsigned long long id = 0;
  int legacy = 0, type = 0;
  CUpointer_attribute a[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                             CU_POINTER_ATTRIBUTE_BUFFER_ID, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                             CU_POINTER_ATTRIBUTE_MEMORY_TYPE};
  void *v[] = {&start, &size, &id, &legacy, &type};
  if (dlpg__ptr_attrs(5, a, v, (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS) {
    cudaGetLastError();
    return 0;
  }
  uint64_t off = (uint64_t)(uintptr_t)ptr - (uint64_t)start;
  if (!legacy || type != CU_MEMORYTYPE_DEVICE || !id || off + nbytes > size) return 0;
  memset(part, 0, sizeof *part);
  part->base = (uint64_t)start;
  part->size = size;
  part->id = id;
  part->off = off;
  for (int k = 0; k < ipc->nexports && k < DLPG__IPC_EXPORTS; k++)
    if (ipc->exports[k].id == id) {
      memcpy(part->handle, &ipc->exports[k].handle, sizeof part->handle);
      return 1;
    }
  cudaIpcMemHandle_t h;
  if (cudaIpcGetMemHandle(&h, (void *)(uintptr_t)start) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  memcpy(part->handle, &h, sizeof part->handle);
  dlpg__ipc_export_t *e = &ipc->exports[ipc->nexports++ % DLPG__IPC_EXPORTS];
  e->id = id;
  e->handle = h;
  return 1;
}

static void dlpg__import_close(dlpg__ipc_t *ipc, int k) {
  dlpg__ipc_import_t *m = &ipc->imports[k];
  /* An operation still reading it would fault: its end comes first (bounded, as every wait
   * of the group is). */
  if (m->used) {
    cudaEventSynchronize(m->used);
    cudaEventDestroy(m->used);
  }
  cudaError_t e = cudaIpcCloseMemHandle(m->ptr);
  if (e != cudaSuccess)
    DLPG_NCCL_WARN(ipc->rank, "cudaIpcCloseMemHandle of rank %d's tensor memory: %s", m->q,
                   cudaGetErrorString(e));
  cudaGetLastError();
  ipc->imports[k] = ipc->imports[--ipc->nimports];
}

/* Rank q's tensor of the part as this device sees it; NULL when it cannot be mapped. */
static char *dlpg__import(dlpg__ipc_t *ipc, int q, const dlpg__ipc_part_t *part) {
  if (q == ipc->rank || ipc->same_proc[q]) return (char *)(uintptr_t)(part->base + part->off);
  for (int k = 0; k < ipc->nimports; k++) {
    dlpg__ipc_import_t *m = &ipc->imports[k];
    if (m->q == q && m->id == part->id) {
      m->tick = ++ipc->tick;
      return m->ptr + part->off;
    }
  }
  /* A new buffer where a mapped one was: that one was freed; drop its mapping. */
  for (int k = 0; k < ipc->nimports;) {
    dlpg__ipc_import_t *m = &ipc->imports[k];
    if (m->q == q && m->base < part->base + part->size && part->base < m->base + m->size)
      dlpg__import_close(ipc, k);
    else
      k++;
  }
  if (ipc->nimports == DLPG__IPC_IMPORTS) {
    int old = 0;
    for (int k = 1; k < ipc->nimports; k++)
      if (ipc->imports[k].tick < ipc->imports[old].tick) old = k;
    dlpg__import_close(ipc, old);
  }
  dlpg__ipc_import_t m;
  memset(&m, 0, sizeof m);
  void *p = NULL;
  cudaIpcMemHandle_t h;
  memcpy(&h, part->handle, sizeof h);
  if (cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) {
    cudaGetLastError();
    return NULL;
  }
  if (cudaEventCreateWithFlags(&m.used, cudaEventDisableTiming) != cudaSuccess) {
    cudaGetLastError();
    cudaIpcCloseMemHandle(p);
    return NULL;
  }
  m.q = q;
  m.id = part->id;
  m.base = part->base;
  m.size = part->size;
  m.ptr = p;
  m.tick = ++ipc->tick;
  ipc->imports[ipc->nimports++] = m;
  return m.ptr + part->off;
}

void dlpg__ipc_direct_close(dlpg__ipc_t *ipc) {
  while (ipc->nimports > 0) dlpg__import_close(ipc, ipc->nimports - 1);
}

/* Whether rank q reads this rank's tensors (ipc.h's dlpg__ipc_reads is the other way
 * round): the ranks this one waits for before it may reuse them. */
static int dlpg__reads_mine(const dlpg__ipc_step_t *p, int q) {
  if (p->kind == DLPG__IPC_BROADCAST) return p->rank == p->root;
  if (p->kind == DLPG__IPC_REDUCE) return q == p->root;
  return 1;
}

static int dlpg__eligible(const dlpg__ipc_t *ipc, const dlpg__be_op_t *op, const dlpg__ipc_step_t *p) {
  if (!ipc->stream_wait || !ipc->direct_bytes || !ipc->boards.board[ipc->rank] || p->devseq) return 0;
  size_t bytes = op->in[0].nbytes > op->out[0].nbytes ? op->in[0].nbytes : op->out[0].nbytes;
  if (bytes < ipc->direct_bytes) return 0;
  /* premul_sum scales each rank's input by its own factor before the peers sum it: the
   * staged put does that. */
  return p->rop != DLPG__IPC_PREMUL;
}

/* Why a collective that could have read in place ran staged, once per group and reason. */
static void dlpg__say_staged(dlpg__ipc_t *ipc, const dlpg__be_op_t *op, int who, int why, double window) {
  if (ipc->staged_said & (1 << why)) return;
  ipc->staged_said |= 1 << why;
  char r[200];
  switch (why) {
    case DLPG__MEET_CANNOT:
      snprintf(r, sizeof r, "rank %d's tensor cannot be exported through CUDA IPC (not memory "
               "of cudaMalloc: the VMM API's, a stream-ordered pool's, managed or host memory)", who);
      break;
    case DLPG__MEET_LATE:
      snprintf(r, sizeof r, "rank %d's host did not reach it within %g us "
               "(DLPG_NCCL_IPC_DIRECT_WAIT_US)", who, window * 1e6);
      break;
    case DLPG__MEET_UNMAPPED:
      snprintf(r, sizeof r, "rank %d could not map rank %d's tensor (cudaIpcOpenMemHandle)",
               ipc->rank, who);
      break;
    default:
      if (who >= 0) snprintf(r, sizeof r, "rank %d ran it staged", who);
      else snprintf(r, sizeof r, "a peer ran it staged");
  }
  DLPG_NCCL_INFO(ipc->rank, "group '%s': %s of %zu bytes ran through the staging buffers: %s",
                 ipc->st->name, dlpg__op_name(op->kind), op->in[0].nbytes, r);
}

/* Step t's start: this rank's tensors are ready for the peers (everything before on s
 * wrote them); wait for those of the ranks it reads (all: of every rank). */
static dlpg_status_t dlpg__direct_ready(const char *fn, dlpg__ipc_t *ipc, const dlpg__ipc_step_t *p,
                                        cudaStream_t s, unsigned long long t, int all) {
  DLPG_CHECK(dlpg__ipc_tell(fn, ipc, p, s, 0, t));
  return dlpg__ipc_await(fn, ipc, p, s, 0, t, all);
}

static dlpg_status_t dlpg__get(const char *fn, const dlpg__ipc_step_t *p, cudaStream_t s) {
  return dlpg__cuda_result(dlpg__ipc_launch_get(p, s), fn, "CUDA IPC get kernel");
}

/* The allreduce: rank r reduces its segment of every input into its output, then copies
 * every peer's reduced segment from the peer's output. Segments are multiples of 16 bytes
 * (the last takes the rest). In place, a rank writes segment q of its tensor only after
 * rank q read it (step t + 1 starts when every rank finished step t). */
static dlpg_status_t dlpg__direct_allreduce(const char *fn, dlpg__ipc_t *ipc, dlpg__ipc_step_t *p,
                                            cudaStream_t s, long long total, char *const *src,
                                            char *const *dst) {
  const int me = ipc->rank, n = ipc->size, e = p->esize;
  long long seg = total / n / (16 / e) * (16 / e);
  unsigned long long t = ++ipc->coll_seq;
  ++ipc->coll_seq;
  DLPG_CHECK(dlpg__direct_ready(fn, ipc, p, s, t, 1));
  long long off = (long long)me * seg, len = me == n - 1 ? total - off : seg;
  dlpg__ipc_step_t r = *p;
  r.seq = t;
  r.len = len;
  for (int q = 0; q < n; q++) r.buf[0][q] = r.buf[1][q] = src[q] + off * e;
  r.dst = dst[me] + off * e;
  if (len > 0) DLPG_CHECK(dlpg__get(fn, &r, s));
  DLPG_CHECK(dlpg__ipc_tell(fn, ipc, p, s, 1, t));
  DLPG_CHECK(dlpg__direct_ready(fn, ipc, p, s, t + 1, 1));
  for (int q = 0; q < n; q++) {
    long long qoff = (long long)q * seg, qlen = q == n - 1 ? total - qoff : seg;
    if (q == me || qlen == 0) continue;
    dlpg__ipc_step_t c = *p;
    c.kind = DLPG__IPC_BROADCAST;
    c.root = q;
    c.seq = t + 1;
    c.esize = 1;
    c.len = qlen * e;
    c.buf[0][q] = c.buf[1][q] = dst[q] + qoff * e;
    c.dst = dst[me] + qoff * e;
    DLPG_CHECK(dlpg__get(fn, &c, s));
  }
  return dlpg__ipc_tell(fn, ipc, p, s, 1, t + 1);
}

dlpg_status_t dlpg__ipc_direct(const char *fn, dlpg__ipc_t *ipc, const dlpg__be_op_t *op,
                               const dlpg__ipc_step_t *tmpl, long long total, cudaStream_t s,
                               int *ran) {
  *ran = 0;
  if (!dlpg__eligible(ipc, op, tmpl)) return DLPG_OK;
  const int me = ipc->rank, n = ipc->size;
  int allreduce = tmpl->kind == DLPG__IPC_ALLREDUCE;
  dlpg__ipc_offer_t mine, theirs[DLPG__IPC_MAX_RANKS];
  memset(&mine, 0, sizeof mine);
  memset(theirs, 0, sizeof theirs);
  mine.cap = 1;
  int read = 0;
  for (int q = 0; q < n; q++) read |= q != me && dlpg__reads_mine(tmpl, q);
  if (read) mine.cap = dlpg__export(ipc, op->in[0].ptr, op->in[0].nbytes, &mine.part[0]);
  if (mine.cap && allreduce)
    mine.cap = dlpg__export(ipc, op->out[0].ptr, op->out[0].nbytes, &mine.part[1]);
  unsigned long long num = ++ipc->direct_n;
  int who = me, why = DLPG__MEET_OK;
  double window = dlpg__ipc_direct_wait_s();
  int commit = dlpg__ipc_board_meet(&ipc->boards, num, &mine, theirs, window, &who, &why);
  char *src[DLPG__IPC_MAX_RANKS] = {0}, *dst[DLPG__IPC_MAX_RANKS] = {0};
  for (int q = 0; q < n && commit; q++) {
    if (q == me) continue;
    if (dlpg__ipc_reads(tmpl, q)) commit = (src[q] = dlpg__import(ipc, q, &theirs[q].part[0])) != NULL;
    if (commit && allreduce) commit = (dst[q] = dlpg__import(ipc, q, &theirs[q].part[1])) != NULL;
    if (!commit) who = q, why = DLPG__MEET_UNMAPPED;
  }
  int direct = 0, silent = -1;
  dlpg_status_t st = dlpg__ipc_board_vote(fn, &ipc->boards, num, commit, &direct, &silent);
  if (st == DLPG_ERR_TIMEOUT) {
    /* A peer offered and then went silent: the group cannot agree any more. */
    ipc->status_h->peer = silent;
    ipc->status_h->step = ipc->coll_seq + 1;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    ipc->status_h->failed = DLPG__IPC_FAIL_TIMEOUT;
  }
  DLPG_CHECK(st);
  if (!direct) {
    if (why == DLPG__MEET_OK) who = -1, why = DLPG__MEET_STAGED;
    dlpg__say_staged(ipc, op, who, why, window);
    return DLPG_OK;
  }
  *ran = 1;
  if (!ipc->direct_said) {
    ipc->direct_said = 1;
    DLPG_NCCL_INFO(me, "group '%s': %s of %zu bytes read the peers' tensors in place (CUDA "
                   "IPC; collectives from %zu bytes do)", ipc->st->name, dlpg__op_name(op->kind),
                   op->in[0].nbytes, ipc->direct_bytes);
  }
  src[me] = (char *)op->in[0].ptr;
  dst[me] = op->out[0].ptr;
  dlpg__ipc_step_t p = *tmpl;
  p.nowait = 1;
  DLPG_CHECK(dlpg__cuda_result(cudaStreamWaitEvent(s, ipc->coll_last, 0), fn, "cudaStreamWaitEvent"));
  if (allreduce) {
    DLPG_CHECK(dlpg__direct_allreduce(fn, ipc, &p, s, total, src, dst));
  } else {
    p.seq = ++ipc->coll_seq;
    p.len = total;
    p.src = op->in[0].ptr;
    p.dst = op->out[0].ptr;
    for (int q = 0; q < n; q++) p.buf[0][q] = p.buf[1][q] = src[q];
    DLPG_CHECK(dlpg__direct_ready(fn, ipc, &p, s, p.seq, 0));
    DLPG_CHECK(dlpg__get(fn, &p, s));
    DLPG_CHECK(dlpg__ipc_tell(fn, ipc, &p, s, 1, p.seq));
  }
  /* The caller may reuse its tensors once every rank that reads them has. */
  for (int q = 0; q < n; q++)
    if (q != me && dlpg__reads_mine(&p, q))
      DLPG_CHECK(dlpg__cuda_result(dlpg__ipc_wait_ge(s, &p.flags[me]->in_done[q], ipc->coll_seq), fn,
                          "cuStreamWaitValue64 (CUDA IPC)"));
  for (int k = 0; k < ipc->nimports; k++) {
    dlpg__ipc_import_t *m = &ipc->imports[k];
    for (int q = 0; q < n; q++)
      if (m->q == q && ((src[q] && m->id == theirs[q].part[0].id) || (dst[q] && m->id == theirs[q].part[1].id)))
        DLPG_CHECK(dlpg__cuda_result(cudaEventRecord(m->used, s), fn, "cudaEventRecord"));
  }
  dlpg__ipc_watch_add(ipc, s, DLPG__IPC_PEND_DIRECT, -1, ipc->coll_seq, op->gview->timeout_s);
  return dlpg__cuda_result(cudaEventRecord(ipc->coll_last, s), fn, "cudaEventRecord");
}
