/* The per-group, per-device pool of CUDA events behind work pollers (events.c): events are
 * created with cudaEventDisableTiming once and reused, so a steady stream of operations
 * creates no new CUDA objects. Freed with the group's NCCL state (comm.c). */
#include <stdlib.h>

#include "nccl/nccl_internal.h"

/* Take an event of device dev (the current device) from the pool, or create one. */
dlpg_status_t dlpg__nccl_event_get(const char *fn, struct dlpg__nccl *st, int dev,
                                   dlpg__nccl_event_t **out) {
  dlpg__nccl_event_t *e = NULL;
  if (dev >= 0 && dev < DLPG__NCCL_MAX_DEVICE) {
    pthread_mutex_lock(&st->mu);
    e = st->free_events[dev];
    if (e) st->free_events[dev] = e->next;
    pthread_mutex_unlock(&st->mu);
  }
  if (!e) {
    if (!(e = calloc(1, sizeof(*e)))) return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
    cudaError_t ce = cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming);
    if (ce != cudaSuccess) {
      free(e);
      return dlpg__cuda_result(ce, fn, "cudaEventCreateWithFlags");
    }
    e->dev = dev;
  }
  e->next = NULL;
  *out = e;
  return DLPG_OK;
}

void dlpg__nccl_event_put(struct dlpg__nccl *st, dlpg__nccl_event_t *e) {
  if (e->dev < 0 || e->dev >= DLPG__NCCL_MAX_DEVICE) {
    cudaEventDestroy(e->ev);
    free(e);
    return;
  }
  pthread_mutex_lock(&st->mu);
  e->next = st->free_events[e->dev];
  st->free_events[e->dev] = e;
  pthread_mutex_unlock(&st->mu);
}

void dlpg__nccl_free_events(struct dlpg__nccl *st) {
  for (int d = 0; d < DLPG__NCCL_MAX_DEVICE; d++) {
    while (st->free_events[d]) {
      dlpg__nccl_event_t *e = st->free_events[d];
      st->free_events[d] = e->next;
      cudaEventDestroy(e->ev);
      free(e);
    }
  }
}

/* cudaEventQuery is a "potentially unsafe" call while a CUDA graph is being captured in the
 * default (global) mode, on this thread or any other: it would invalidate that capture (a
 * work handle tested or freed while a framework captures, e.g. a parked handle reaped during
 * torch.cuda.graph). The events queried here were recorded outside any capture, so querying
 * them in relaxed mode is safe, and other threads' captures are left alone (torch's NCCL
 * watchdog switches its capture mode for the same reason). */
cudaError_t dlpg__nccl_event_query(cudaEvent_t ev) {
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  cudaError_t e = cudaEventQuery(ev);
  cudaThreadExchangeStreamCaptureMode(&mode);
  return e;
}
