/* The stream-wait mode's watchdog (ipc_host.h): a stream memory wait has no deadline of its
 * own, so a thread per group follows the ops in flight and, when the oldest is past its
 * deadline, names the peer whose counter lags, marks the group failed in the status block
 * (kernels then skip their work) and ends every wait of this rank by writing its own
 * counters far ahead, on a stream of its own. All waits read this rank's own memory, so
 * ending them needs nothing from a peer that may be gone. */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "nccl/ipc_host.h"

/* Far ahead of any step or chunk number, and still "ahead" for the cyclic comparison. */
#define DLPG__IPC_RELEASE (1ull << 62)

/* Both wait modes call it (ipc_state.c's abort and destroy too): the stream waits read these
 * counters, the kernels the stop word. */
void dlpg__ipc_release(dlpg__ipc_t *ipc) {
  /* in_ready, in_done, in_sent, in_taken and stop, adjacent: every wait ends, every later
   * kernel skips its work. */
  unsigned long long far[4 * DLPG__IPC_MAX_RANKS + 1];
  for (int i = 0; i < 4 * DLPG__IPC_MAX_RANKS + 1; i++) far[i] = DLPG__IPC_RELEASE;
  if (!ipc || !ipc->base || !ipc->rescue) return;
  dlpg__ipc_flags_t *mine = (dlpg__ipc_flags_t *)(void *)ipc->base;
  int cur = -1;
  cudaGetDevice(&cur);
  if (cur != ipc->dev) cudaSetDevice(ipc->dev);
  if (cudaMemcpyAsync(mine->in_ready, far, sizeof far, cudaMemcpyHostToDevice, ipc->rescue) ==
      cudaSuccess)
    cudaStreamSynchronize(ipc->rescue);
  cudaGetLastError();
  if (cur >= 0 && cur != ipc->dev) cudaSetDevice(cur);
}

/* The peer whose counter keeps op e waiting, from this rank's own block; -1 if none lags
 * (then which peer is missing is not known). */
static int dlpg__watch_laggard(dlpg__ipc_t *ipc, const struct dlpg__ipc_pending *e) {
  dlpg__ipc_flags_t f;
  if (cudaMemcpyAsync(&f, ipc->base, sizeof f, cudaMemcpyDeviceToHost, ipc->rescue) != cudaSuccess ||
      cudaStreamSynchronize(ipc->rescue) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  switch (e->kind) {
    case DLPG__IPC_PEND_SEND:
      return f.in_taken[e->peer] + 2 < e->want ? e->peer : -1;
    case DLPG__IPC_PEND_RECV:
      return f.in_sent[e->peer] < e->want ? e->peer : -1;
    case DLPG__IPC_PEND_DIRECT:
      /* Every rank publishes ready and done of an in-place collective's last step to all. */
      for (int q = 0; q < ipc->size; q++)
        if (q != ipc->rank && (f.in_ready[q] < e->want || f.in_done[q] < e->want)) return q;
      return -1;
    default:
      for (int q = 0; q < ipc->size; q++)
        if (q != ipc->rank && (f.in_ready[q] < e->want || f.in_done[q] + 2 < e->want)) return q;
      return -1;
  }
}

/* One look: drop completed ops; fail the group when the oldest is past its deadline; keep
 * a failed group's waits ended (a late peer's write could set a counter back). */
static void dlpg__watch_check(dlpg__ipc_t *ipc) {
  pthread_mutex_lock(&ipc->mu);
  while (ipc->pend_n > 0) {
    struct dlpg__ipc_pending *e = &ipc->pend[ipc->pend_head];
    cudaError_t r = dlpg__nccl_event_query(e->ev);
    if (r == cudaErrorNotReady) {
      if (!ipc->status_h->failed && !ipc->status_h->abort && dlpg__now() > e->deadline) {
        int q = dlpg__watch_laggard(ipc, e);
        ipc->status_h->peer = q;
        ipc->status_h->step = e->want;
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        ipc->status_h->failed = DLPG__IPC_FAIL_TIMEOUT;
      }
      break;
    }
    if (r != cudaSuccess) cudaGetLastError();
    ipc->pend_head = (ipc->pend_head + 1) % DLPG__IPC_PENDING;
    ipc->pend_n--;
  }
  int release = ipc->pend_n > 0 && (ipc->status_h->failed || ipc->status_h->abort);
  pthread_mutex_unlock(&ipc->mu);
  if (release) dlpg__ipc_release(ipc);
}

static void *dlpg__watch_main(void *arg) {
  dlpg__ipc_t *ipc = arg;
  cudaSetDevice(ipc->dev);
  for (;;) {
    pthread_mutex_lock(&ipc->mu);
    int idle = ipc->pend_n == 0;
    pthread_mutex_unlock(&ipc->mu);
    /* Idle: a long nap (an add wakes it); busy: every 2 ms, a small part of any timeout. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long ns = idle ? 100000000L : 2000000L;
    ts.tv_nsec += ns;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&ipc->watch_mu);
    if (!ipc->watch_stop) pthread_cond_timedwait(&ipc->watch_cv, &ipc->watch_mu, &ts);
    int stop = ipc->watch_stop;
    pthread_mutex_unlock(&ipc->watch_mu);
    if (stop) break;
    dlpg__watch_check(ipc);
  }
  return NULL;
}

dlpg_status_t dlpg__ipc_watch_start(const char *fn, dlpg__ipc_t *ipc) {
  pthread_mutex_init(&ipc->watch_mu, NULL);
  pthread_cond_init(&ipc->watch_cv, NULL);
  int e = pthread_create(&ipc->watch, NULL, dlpg__watch_main, ipc);
  if (e != 0)
    return dlpg__error(DLPG_ERR_SYSTEM, "%s: group '%s': cannot start the CUDA IPC watchdog "
                       "thread: %s", fn, ipc->st->name, strerror(e));
  ipc->watch_started = 1;
  return DLPG_OK;
}

void dlpg__ipc_watch_add(dlpg__ipc_t *ipc, cudaStream_t s, int kind, int peer,
                         unsigned long long want, double timeout_s) {
  if (ipc->pend_n == DLPG__IPC_PENDING) return;
  struct dlpg__ipc_pending *e = &ipc->pend[(ipc->pend_head + ipc->pend_n) % DLPG__IPC_PENDING];
  if (!e->ev && cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming) != cudaSuccess) {
    cudaGetLastError();
    e->ev = NULL;
    return;
  }
  if (cudaEventRecord(e->ev, s) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  e->deadline = dlpg__now() + timeout_s;
  e->kind = kind;
  e->peer = peer;
  e->want = want;
  if (ipc->pend_n++ == 0) {
    pthread_mutex_lock(&ipc->watch_mu);
    pthread_cond_signal(&ipc->watch_cv);
    pthread_mutex_unlock(&ipc->watch_mu);
  }
}

int dlpg__ipc_watch_idle(dlpg__ipc_t *ipc) {
  pthread_mutex_lock(&ipc->mu);
  int idle = 1;
  for (int i = 0; i < ipc->pend_n && idle; i++) {
    cudaEvent_t ev = ipc->pend[(ipc->pend_head + i) % DLPG__IPC_PENDING].ev;
    idle = dlpg__nccl_event_query(ev) != cudaErrorNotReady;
  }
  cudaGetLastError();
  pthread_mutex_unlock(&ipc->mu);
  return idle;
}

void dlpg__ipc_watch_stop(dlpg__ipc_t *ipc) {
  if (!ipc->watch_started) return;
  pthread_mutex_lock(&ipc->watch_mu);
  ipc->watch_stop = 1;
  pthread_cond_signal(&ipc->watch_cv);
  pthread_mutex_unlock(&ipc->watch_mu);
  pthread_join(ipc->watch, NULL);
  ipc->watch_started = 0;
  for (int i = 0; i < DLPG__IPC_PENDING; i++)
    if (ipc->pend[i].ev) cudaEventDestroy(ipc->pend[i].ev), ipc->pend[i].ev = NULL;
  pthread_cond_destroy(&ipc->watch_cv);
  pthread_mutex_destroy(&ipc->watch_mu);
}
