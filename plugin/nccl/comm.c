/* The NCCL path's per-group state: its lifetime (create, abort, destroy), the process-wide
 * lock that keeps NCCL handles alive while another thread uses them, and the build string.
 * Creation of the communicators themselves lives in comm_create.c, error translation in
 * errors.c, the event pool in event_pool.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nccl/ipc_host.h"
#include "nccl/nccl_internal.h"

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

/* ------------------------------------------------------------------ references */

void dlpg__nccl_state_retain(struct dlpg__nccl *st) { atomic_fetch_add(&st->refs, 1); }

void dlpg__nccl_state_release(struct dlpg__nccl *st) {
  if (atomic_fetch_sub(&st->refs, 1) != 1) return;
  dlpg__ipc_free(st->ipc); /* after the last poller that reads its status */
  dlpg__nccl_route_free(st);
  dlpg__nccl_free_events(st);
  free(st->pair_created);
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

dlpg_status_t dlpg__nccl_create(const dlpg__be_group_t *g, dlpg__nccl_t **out) {
  if (!g || !out) return dlpg__error(DLPG_ERR_INTERNAL, "dlpg__nccl_create: NULL argument");
  struct dlpg__nccl *st = calloc(1, sizeof(*st));
  int *pairs = calloc((size_t)g->size, sizeof(int));
  if (!st || !pairs) {
    free(st);
    free(pairs);
    return dlpg__error(DLPG_ERR_SYSTEM, "dlpg__nccl_create: out of memory");
  }
  st->pair_created = pairs;
  st->g = g;
  st->rank = g->rank;
  st->size = g->size;
  snprintf(st->name, sizeof(st->name), "%s", g->name ? g->name : "dlpg");
  snprintf(st->keys, sizeof(st->keys), "%s", g->name ? dlpg__be_group_keys(g) : "dlpg");
  pthread_mutex_init(&st->mu, NULL);
  dlpg__cond_init_monotonic(&st->cv);
  atomic_init(&st->aborted, 0);
  atomic_init(&st->destroyed, 0);
  atomic_init(&st->refs, 1);
  *out = st;
  return DLPG_OK;
}

/* ncclCommAbort of one entry's handles on one device: the split child, then the parent it
 * shares resources (and, with splitShare, the abort flag) with. */
static void dlpg__nccl_abort_pair(struct dlpg__nccl *st, const char *key, int dev, ncclComm_t child,
                                  ncclComm_t parent) {
  ncclComm_t hs[2] = {child, parent};
  cudaSetDevice(dev);
  for (int h = 0; h < 2; h++) {
    if (!hs[h]) continue;
    ncclResult_t r = ncclCommAbort(hs[h]);
    if (r != ncclSuccess)
      DLPG_NCCL_WARN(st->rank, "ncclCommAbort of communicator '%s'%s device %d: %s", key,
                h ? " (parent)" : "", dev, ncclGetErrorString(r));
  }
}

typedef struct dlpg__abort_job {
  struct dlpg__nccl *st;
  const char *key;
  int dev;
  ncclComm_t child, parent;
} dlpg__abort_job_t;

static void *dlpg__abort_thread(void *arg) {
  dlpg__abort_job_t *j = arg;
  dlpg__nccl_abort_pair(j->st, j->key, j->dev, j->child, j->parent);
  return NULL;
}

/* Abort every handle of list, each entry-device pair on its own thread. ncclCommAbort sets
 * its communicator's abort flag and then frees memory, and a free waits for every kernel on
 * the device: aborted one after another, a communicator freed first would wait forever on
 * a kernel of one whose flag is not yet set. In parallel every flag is set at once. Caller
 * holds the write lock; handles are set to NULL. */
static void dlpg__nccl_abort_handles(struct dlpg__nccl *st, dlpg__nccl_comm_t *list) {
  int n = 0;
  for (dlpg__nccl_comm_t *c = list; c; c = c->next)
    for (int i = 0; i < c->ndev; i++) n += c->comms[i] || c->parents[i];
  dlpg__abort_job_t one, *jobs = n > 1 ? calloc((size_t)n, sizeof(*jobs)) : &one;
  pthread_t *tids = n > 1 ? calloc((size_t)n, sizeof(*tids)) : NULL;
  int *started = n > 1 ? calloc((size_t)n, sizeof(*started)) : NULL;
  int k = 0;
  for (dlpg__nccl_comm_t *c = list; c; c = c->next) {
    for (int i = 0; i < c->ndev; i++) {
      if (!c->comms[i] && !c->parents[i]) continue;
      dlpg__abort_job_t j = {st, c->key, c->devs[i], c->comms[i], c->parents[i]};
      c->comms[i] = NULL;
      c->parents[i] = NULL;
      if (n == 1 || !jobs || !tids || !started) {
        dlpg__nccl_abort_pair(j.st, j.key, j.dev, j.child, j.parent); /* one pair, or no memory */
        continue;
      }
      jobs[k] = j;
      started[k] = pthread_create(&tids[k], NULL, dlpg__abort_thread, &jobs[k]) == 0;
      if (!started[k]) dlpg__abort_thread(&jobs[k]);
      k++;
    }
  }
  for (int t = 0; t < k; t++)
    if (started[t]) pthread_join(tids[t], NULL);
  if (jobs != &one) free(jobs);
  free(tids);
  free(started);
}

void dlpg__nccl_abort(dlpg__nccl_t *st) {
  if (!st) return;
  atomic_store(&st->aborted, 1);
  int cur = -1;
  cudaGetDevice(&cur);
  dlpg__nccl_wrlock();
  pthread_mutex_lock(&st->mu);
  dlpg__nccl_abort_handles(st, st->comms);
  for (dlpg__nccl_comm_t *c = st->comms; c; c = c->next)
    if (c->state != DLPG__COMM_DESTROYED) c->state = DLPG__COMM_ABORTED;
  memset(st->by_dev, 0, sizeof(st->by_dev));
  dlpg__ipc_abort(st->ipc);
  pthread_cond_broadcast(&st->cv);
  pthread_mutex_unlock(&st->mu);
  dlpg__nccl_unlock();
  if (cur >= 0) cudaSetDevice(cur);
  DLPG_NCCL_INFO(st->rank, "group '%s': NCCL communicators aborted", st->name);
}

/* A device synchronisation the caller can stop waiting for: cudaDeviceSynchronize on a
 * detached thread, which frees the block when both sides are done with it. */
typedef struct dlpg__drain {
  int dev;
  atomic_int done;
  atomic_int refs;
} dlpg__drain_t;

static void dlpg__drain_release(dlpg__drain_t *d) {
  if (atomic_fetch_sub(&d->refs, 1) == 1) free(d);
}

static void *dlpg__drain_thread(void *arg) {
  dlpg__drain_t *d = arg;
  cudaSetDevice(d->dev);
  cudaDeviceSynchronize();
  atomic_store(&d->done, 1);
  dlpg__drain_release(d);
  return NULL;
}

/* Wait until the devices of list have finished their queued work (the operations enqueued
 * on the caller's streams included), until the deadline at most; false if it passed. A
 * kernel still waiting for a peer then ends with the aborts that follow. */
static int dlpg__drain_devices(struct dlpg__nccl *st, dlpg__nccl_comm_t *list, double deadline) {
  dlpg__drain_t *ds[DLPG__NCCL_MAX_DEVICE];
  int nd = 0;
  for (dlpg__nccl_comm_t *c = list; c; c = c->next) {
    for (int i = 0; i < c->ndev; i++) {
      int seen = 0;
      for (int k = 0; k < nd; k++) seen |= ds[k]->dev == c->devs[i];
      if (seen || nd == DLPG__NCCL_MAX_DEVICE) continue;
      dlpg__drain_t *d = calloc(1, sizeof(*d));
      if (!d) continue;
      d->dev = c->devs[i];
      atomic_init(&d->done, 0);
      atomic_init(&d->refs, 2);
      pthread_t t;
      if (pthread_create(&t, NULL, dlpg__drain_thread, d) != 0) {
        free(d);
        continue;
      }
      pthread_detach(t);
      ds[nd++] = d;
    }
  }
  int ok = 1;
  for (int k = 0; k < nd; k++) {
    while (!atomic_load(&ds[k]->done) && dlpg__now() < deadline) dlpg__sleep(200e-6);
    if (!atomic_load(&ds[k]->done)) {
      ok = 0;
      DLPG_NCCL_WARN(st->rank, "group '%s': device %d still busy at the deadline; aborting its "
                "communicators", st->name, ds[k]->dev);
    }
    dlpg__drain_release(ds[k]);
  }
  return ok;
}

/* Wait for queued device work, finalize every ready communicator (non-blocking, polled),
 * then release every handle; each step is bounded by the group's deadline, so destroy never
 * hangs on a missing or stuck peer. */
void dlpg__nccl_destroy(dlpg__nccl_t *st) {
  if (!st) return;
  atomic_store(&st->destroyed, 1);
  double timeout = st->g->timeout_s; /* resolved by core, always > 0 (backend_abi.h) */
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

  /* Operations still queued on streams finish first (destroy waits for queued work, up to
   * the group's timeout); on a timeout nothing is finalized, everything is aborted. */
  if (!dlpg__drain_devices(st, list, deadline))
    for (dlpg__nccl_comm_t *c = list; c; c = c->next)
      if (c->state == DLPG__COMM_READY) c->state = DLPG__COMM_FAILED;

  /* Start finalizing every ready communicator: the non-blocking ones (in split mode the
   * parents, whose resources the children share), polled against the deadline; whatever
   * does not finalize in time is aborted like the rest below. */
  dlpg__nccl_rdlock();
  for (dlpg__nccl_comm_t *c = list; c; c = c->next) {
    if (c->state != DLPG__COMM_READY) continue;
    for (int i = 0; i < c->ndev; i++) {
      ncclComm_t h = c->parents[i] ? c->parents[i] : c->comms[i];
      if (!h) continue;
      cudaSetDevice(c->devs[i]);
      /* The premul_sum ops made on this device's communicator (its streams are drained). */
      for (int k = 0; k < c->npremul[i]; k++)
        ncclRedOpDestroy(c->premul[i][k].op, c->premul[i][k].comm);
      c->npremul[i] = 0;
      ncclResult_t r = ncclCommFinalize(h);
      if (r != ncclSuccess && r != ncclInProgress) {
        DLPG_NCCL_WARN(st->rank, "ncclCommFinalize of '%s' device %d: %s; aborting it", c->key,
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
      DLPG_NCCL_WARN(st->rank, "group '%s': ncclCommFinalize still pending after %.1f s; aborting",
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

  /* Release every handle with ncclCommAbort, finalized or not. After a completed finalize
   * it frees the same resources as ncclCommDestroy, without the wait ncclCommDestroy can
   * add: NCCL's proxy thread serves until every peer process has closed its connection, so
   * a peer that is alive but stuck (or aborting itself) would hold destroy forever. */
  dlpg__nccl_wrlock();
  pthread_mutex_lock(&st->mu);
  dlpg__nccl_abort_handles(st, list);
  for (dlpg__nccl_comm_t *c = list; c; c = c->next) c->state = DLPG__COMM_DESTROYED;
  pthread_mutex_unlock(&st->mu);
  dlpg__nccl_unlock();
  for (dlpg__nccl_comm_t *c = list; c; c = c->next)
    for (int i = 0; i < c->ndev; i++) {
      if (c->scratch[i]) cudaSetDevice(c->devs[i]), cudaFree(c->scratch[i]), c->scratch[i] = NULL;
      /* Work still queued on a stream keeps it until done (cudaStreamDestroy returns at once). */
      if (c->own_streams[i])
        cudaSetDevice(c->devs[i]), cudaStreamDestroy(c->own_streams[i]), c->own_streams[i] = NULL;
      if (c->fork_ev[i]) cudaEventDestroy(c->fork_ev[i]), c->fork_ev[i] = NULL;
    }
  if (cur >= 0) cudaSetDevice(cur);
  /* The CUDA IPC path's mappings and staging (its struct stays for pollers). */
  pthread_mutex_lock(&st->mu);
  dlpg__ipc_t *ipc = st->ipc;
  pthread_mutex_unlock(&st->mu);
  dlpg__ipc_destroy(ipc);

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
