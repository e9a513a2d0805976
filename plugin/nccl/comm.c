/* The NCCL path's per-group state: its lifetime (create, abort, destroy), the process-wide
 * lock that keeps NCCL handles alive while another thread uses them, error translation and
 * the build string. Creation of the communicators themselves lives in comm_create.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nccl/nccl_internal.h"
#include "core/log.h"

/* ------------------------------------------------------------------ process-wide lock */

static pthread_rwlock_t dlpg__nccl_lock;
static pthread_once_t dlpg__nccl_lock_once = PTHREAD_ONCE_INIT;

/* Writers (abort, destroy) must not starve behind a stream of pollers. */
static void dlpg__nccl_lock_init(void) {
  pthread_rwlockattr_t a;
  pthread_rwlockattr_init(&a);
#ifdef PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP
  pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
#endif
  pthread_rwlock_init(&dlpg__nccl_lock, &a);
  pthread_rwlockattr_destroy(&a);
}

void dlpg__nccl_rdlock(void) {
  pthread_once(&dlpg__nccl_lock_once, dlpg__nccl_lock_init);
  pthread_rwlock_rdlock(&dlpg__nccl_lock);
}
void dlpg__nccl_wrlock(void) {
  pthread_once(&dlpg__nccl_lock_once, dlpg__nccl_lock_init);
  pthread_rwlock_wrlock(&dlpg__nccl_lock);
}
void dlpg__nccl_unlock(void) { pthread_rwlock_unlock(&dlpg__nccl_lock); }

/* ------------------------------------------------------------------ errors */

dlpg_status_t dlpg__nccl_result(ncclResult_t r, ncclComm_t comm, const char *fn, const char *what) {
  if (r == ncclSuccess || r == ncclInProgress) return DLPG_OK;
  const char *last = ncclGetLastError(comm);
  dlpg_status_t st = r == ncclRemoteError ? DLPG_ERR_REMOTE : DLPG_ERR_SYSTEM;
  return dlpg__error(st, "%s: %s failed: %s (%d)%s%s", fn, what, ncclGetErrorString(r), (int)r,
                     last && *last ? ": " : "", last ? last : "");
}

dlpg_status_t dlpg__cuda_result(cudaError_t e, const char *fn, const char *what) {
  if (e == cudaSuccess) return DLPG_OK;
  return dlpg__error(DLPG_ERR_SYSTEM, "%s: %s failed: %s (%s)", fn, what, cudaGetErrorString(e),
                     cudaGetErrorName(e));
}

/* ------------------------------------------------------------------ references */

void dlpg__nccl_state_retain(struct dlpg__nccl *st) { atomic_fetch_add(&st->refs, 1); }

void dlpg__nccl_state_release(struct dlpg__nccl *st) {
  if (atomic_fetch_sub(&st->refs, 1) != 1) return;
  dlpg__nccl_free_events(st);
  pthread_cond_destroy(&st->cv);
  pthread_mutex_destroy(&st->mu);
  free(st);
}

void dlpg__nccl_comm_retain(dlpg__nccl_comm_t *c) { atomic_fetch_add(&c->refs, 1); }

void dlpg__nccl_comm_release(dlpg__nccl_comm_t *c) {
  if (atomic_fetch_sub(&c->refs, 1) != 1) return;
  struct dlpg__nccl *st = c->st;
  pthread_mutex_destroy(&c->issue_mu);
  free(c->p2p_warm);
  free(c);
  dlpg__nccl_state_release(st); /* each entry holds a reference to its state */
}

/* ------------------------------------------------------------------ lifecycle */

dlpg_status_t dlpg__nccl_create(struct dlpg_group *g, dlpg__nccl_t **out) {
  if (!g || !out) return dlpg__error(DLPG_ERR_INTERNAL, "dlpg__nccl_create: NULL argument");
  struct dlpg__nccl *st = calloc(1, sizeof(*st));
  if (!st) return dlpg__error(DLPG_ERR_SYSTEM, "dlpg__nccl_create: out of memory");
  st->g = g;
  st->rank = g->rank;
  st->size = g->size;
  snprintf(st->name, sizeof(st->name), "%s", g->name ? g->name : "dlpg");
  pthread_mutex_init(&st->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&st->cv, &ca);
  pthread_condattr_destroy(&ca);
  atomic_init(&st->aborted, 0);
  atomic_init(&st->destroyed, 0);
  atomic_init(&st->refs, 1);
  *out = st;
  return DLPG_OK;
}

/* Abort one entry's handles. Caller holds the write lock and st->mu. */
static void dlpg__nccl_comm_abort_locked(dlpg__nccl_comm_t *c) {
  for (int i = 0; i < c->ndev; i++) {
    if (!c->comms[i]) continue;
    ncclResult_t r = ncclCommAbort(c->comms[i]);
    if (r != ncclSuccess)
      DLPG_WARN(NCCL, c->st->rank, "ncclCommAbort of communicator '%s' device %d: %s", c->key,
                c->devs[i], ncclGetErrorString(r));
    c->comms[i] = NULL;
    /* The split child first, then the parent it shares resources with. */
    if (c->parents[i]) {
      r = ncclCommAbort(c->parents[i]);
      if (r != ncclSuccess)
        DLPG_WARN(NCCL, c->st->rank, "ncclCommAbort of communicator '%s' (parent) device %d: %s",
                  c->key, c->devs[i], ncclGetErrorString(r));
      c->parents[i] = NULL;
    }
  }
  if (c->state != DLPG__COMM_DESTROYED) c->state = DLPG__COMM_ABORTED;
}

void dlpg__nccl_abort(dlpg__nccl_t *st) {
  if (!st) return;
  atomic_store(&st->aborted, 1);
  int cur = -1;
  cudaGetDevice(&cur);
  dlpg__nccl_wrlock();
  pthread_mutex_lock(&st->mu);
  for (dlpg__nccl_comm_t *c = st->comms; c; c = c->next) dlpg__nccl_comm_abort_locked(c);
  memset(st->by_dev, 0, sizeof(st->by_dev));
  pthread_cond_broadcast(&st->cv);
  pthread_mutex_unlock(&st->mu);
  dlpg__nccl_unlock();
  if (cur >= 0) cudaSetDevice(cur);
  DLPG_INFO(NCCL, st->rank, "group '%s': NCCL communicators aborted", st->name);
}

/* Finalize every ready communicator (non-blocking, polled until the deadline), then destroy
 * them; whatever does not finalize in time is aborted instead, so destroy never hangs. */
void dlpg__nccl_destroy(dlpg__nccl_t *st) {
  if (!st) return;
  atomic_store(&st->destroyed, 1);
  double timeout = st->g && st->g->timeout_s > 0 ? st->g->timeout_s : 300.0;
  double deadline = dlpg__now() + timeout;
  int cur = -1;
  cudaGetDevice(&cur);

  /* Wake and wait out any thread still creating a communicator of this group. */
  pthread_mutex_lock(&st->mu);
  for (;;) {
    int creating = 0;
    for (dlpg__nccl_comm_t *c = st->comms; c; c = c->next)
      creating |= c->state == DLPG__COMM_CREATING;
    if (!creating || dlpg__now() > deadline) break;
    struct timespec ts = dlpg__abstime_in(0.01);
    pthread_cond_timedwait(&st->cv, &st->mu, &ts);
  }
  dlpg__nccl_comm_t *list = st->comms;
  st->comms = NULL;
  memset(st->by_dev, 0, sizeof(st->by_dev));
  pthread_mutex_unlock(&st->mu);

  /* Start finalizing every ready communicator. In split mode the non-blocking parents are
   * finalized (polled against the deadline); once they are quiescent every peer is known to
   * be tearing down too, and the blocking children are destroyed below without waiting on
   * anyone missing. */
  dlpg__nccl_rdlock();
  for (dlpg__nccl_comm_t *c = list; c; c = c->next) {
    if (c->state != DLPG__COMM_READY) continue;
    for (int i = 0; i < c->ndev; i++) {
      ncclComm_t h = c->parents[i] ? c->parents[i] : c->comms[i];
      if (!h) continue;
      cudaSetDevice(c->devs[i]);
      ncclResult_t r = ncclCommFinalize(h);
      if (r != ncclSuccess && r != ncclInProgress) {
        DLPG_WARN(NCCL, st->rank, "ncclCommFinalize of '%s' device %d: %s; aborting it", c->key,
                  c->devs[i], ncclGetErrorString(r));
        c->state = DLPG__COMM_FAILED;
      }
    }
  }
  /* Poll until every finalize completed or the deadline passed. */
  for (;;) {
    int pending = 0;
    for (dlpg__nccl_comm_t *c = list; c; c = c->next) {
      if (c->state != DLPG__COMM_READY) continue;
      for (int i = 0; i < c->ndev; i++) {
        ncclComm_t h = c->parents[i] ? c->parents[i] : c->comms[i];
        if (!h) continue;
        ncclResult_t a = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(h, &a);
        if (r != ncclSuccess || (a != ncclSuccess && a != ncclInProgress)) {
          c->state = DLPG__COMM_FAILED;
          break;
        }
        if (a == ncclInProgress) pending = 1;
      }
    }
    if (!pending) break;
    if (dlpg__now() > deadline) {
      DLPG_WARN(NCCL, st->rank, "group '%s': ncclCommFinalize still pending after %.1f s; aborting",
                st->name, timeout);
      for (dlpg__nccl_comm_t *c = list; c; c = c->next)
        if (c->state == DLPG__COMM_READY) c->state = DLPG__COMM_FAILED;
      break;
    }
    dlpg__nccl_unlock();
    dlpg__sleep(200e-6);
    dlpg__nccl_rdlock();
  }
  dlpg__nccl_unlock();

  /* Destroy (finalized) or abort (anything else), then drop the cache's references. */
  dlpg__nccl_wrlock();
  pthread_mutex_lock(&st->mu);
  for (dlpg__nccl_comm_t *c = list; c; c = c->next) {
    for (int i = 0; i < c->ndev; i++) {
      /* The split child before the parent whose resources it shares. */
      ncclComm_t hs[2] = {c->comms[i], c->parents[i]};
      for (int h = 0; h < 2; h++) {
        if (!hs[h]) continue;
        cudaSetDevice(c->devs[i]);
        /* A split child is blocking, so its ncclCommDestroy (which finalizes) could wait
         * on a peer with no deadline; its parent's polled finalize above already made the
         * shared resources quiescent, so the child is released locally with abort. */
        int destroy = c->state == DLPG__COMM_READY && !(h == 0 && c->parents[i]);
        ncclResult_t r = destroy ? ncclCommDestroy(hs[h]) : ncclCommAbort(hs[h]);
        if (r != ncclSuccess)
          DLPG_WARN(NCCL, st->rank, "releasing communicator '%s'%s device %d: %s", c->key,
                    h ? " (parent)" : "", c->devs[i], ncclGetErrorString(r));
      }
      c->comms[i] = NULL;
      c->parents[i] = NULL;
    }
    c->state = DLPG__COMM_DESTROYED;
  }
  pthread_mutex_unlock(&st->mu);
  dlpg__nccl_unlock();
  if (cur >= 0) cudaSetDevice(cur);

  while (list) {
    dlpg__nccl_comm_t *next = list->next;
    dlpg__nccl_comm_release(list);
    list = next;
  }
  dlpg__nccl_state_release(st);
}

/* ------------------------------------------------------------------ build string */

static char dlpg__nccl_info[64];
static pthread_once_t dlpg__nccl_info_once = PTHREAD_ONCE_INIT;

static void dlpg__nccl_info_init(void) {
  snprintf(dlpg__nccl_info, sizeof(dlpg__nccl_info), "nccl %d.%d.%d; cuda %d.%d", NCCL_MAJOR,
           NCCL_MINOR, NCCL_PATCH, CUDART_VERSION / 1000, (CUDART_VERSION % 1000) / 10);
}

/* The versions of the headers this library was compiled against (NCCL_VERSION_CODE,
 * CUDART_VERSION), not of the libraries found at run time. */
const char *dlpg__nccl_build_info(void) {
  pthread_once(&dlpg__nccl_info_once, dlpg__nccl_info_init);
  return dlpg__nccl_info;
}
