/* Lazy communicator creation: the cache lookup keyed by an operation's local device list,
 * the store rendezvous that carries NCCL's unique id, and the non-blocking
 * ncclCommInitRankConfig polled against the group's deadline and abort flag.
 *
 * Store keys do not depend on the device list, because ranks may drive different devices
 * (rank r on cuda:r): every rank of a group creates its collective communicators in the same
 * order (it issues the same operations), so the creation index seq names the rendezvous
 * (c->rdv), under the group's job scope <keys> (backend_abi.h: keys an earlier job left
 * under the same name are never read):
 *   <keys>/nccl/<seq>/ndev/<rank>   each rank's local device count (decimal)
 *   <keys>/nccl/<seq>/id            written by rank 0: "ok" + ncclUniqueId, or "er" + message
 * Rank 0 checks every rank's device count before it publishes the id, so a mismatch fails
 * on every rank with the same message instead of hanging in ncclCommInitRankConfig.
 * Sends and receives use a communicator of the two ranks alone (model: Ray's
 * _get_nccl_p2p_communicator), created by those two; the pair's own creation index names it,
 * the lower rank plays rank 0's part, member 0 or 1 replaces the rank:
 *   <keys>/nccl/p2p/<lo>-<hi>/<seq>/ndev/<member>, .../id
 * A send or receive to self (inside a batch) uses a communicator of this rank alone, whose
 * unique id never leaves the process. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>

#include "nccl/nccl_internal.h"

static void dlpg__sleep_us(long us) { dlpg__sleep((double)us * 1e-6); }

static int dlpg__is_sendrecv(const dlpg__be_op_t *op) {
  return op->kind == DLPG__OP_SEND || op->kind == DLPG__OP_RECV;
}

/* The cache key of op's communicator: its device list, after "p<peer>:" for a send/recv
 * with another rank and "s:" for one with this rank. */
static void dlpg__devkey(const dlpg__be_op_t *op, int rank, char *key, size_t cap) {
  size_t n = 0;
  key[0] = 0;
  if (dlpg__is_sendrecv(op))
    n = (size_t)(op->peer == rank ? snprintf(key, cap, "s:") : snprintf(key, cap, "p%d:", op->peer));
  for (int i = 0; i < op->ntensors && n < cap; i++)
    n += (size_t)snprintf(key + n, cap - n, i ? ",%d" : "%d", op->in[i].device_id);
}

/* Group rank of member m of c (for messages). */
static int dlpg__member_rank(const dlpg__nccl_comm_t *c, int m) {
  if (c->peer == DLPG__NCCL_GROUP) return m;
  return m == c->member ? c->st->rank : c->peer;
}

/* Step a of one new entry: publish ndev. A single store set that waits on no peer, so it
 * needs no deadline (step b, rank 0 checking all and publishing the id, is dlpg__rdv_root). */
static dlpg_status_t dlpg__rdv_publish(const char *fn, dlpg__nccl_comm_t *c) {
  struct dlpg__nccl *st = c->st;
  char key[700], val[32];
  snprintf(key, sizeof(key), "%s/ndev/%d", c->rdv, c->member);
  snprintf(val, sizeof(val), "%d", c->ndev);
  dlpg_status_t s = dlpg__nccl_store_set(st->g->store, key, val, strlen(val));
  if (s != DLPG_OK) return dlpg__error_prefix(s, fn);
  return DLPG_OK;
}

static dlpg_status_t dlpg__rdv_root(const char *fn, dlpg__nccl_comm_t *c, double deadline) {
  struct dlpg__nccl *st = c->st;
  char key[700], val[32], what[256], out[2 + sizeof(ncclUniqueId) + 400];
  size_t outlen = 0;
  int bad = -1, badn = 0;
  for (int r = 0; r < c->nmembers && bad < 0; r++) {
    size_t len = 0;
    snprintf(key, sizeof(key), "%s/ndev/%d", c->rdv, r);
    snprintf(what, sizeof(what), "rank %d to join communicator %d (devices '%s')",
             dlpg__member_rank(c, r), c->seq, c->key);
    memset(val, 0, sizeof(val));
    DLPG_CHECK(dlpg__store_get_slices(fn, st, key, val, sizeof(val) - 1, &len, deadline, what));
    int n = atoi(val);
    if (n != c->ndev) bad = r, badn = n;
  }
  if (bad >= 0) {
    int m = snprintf(out, sizeof(out),
                     "er%s: ranks drive different numbers of CUDA devices in their %d-th CUDA "
                     "%s: rank %d uses %d (devices '%s'), rank %d uses %d; every rank "
                     "must pass the same number of tensors", fn, c->seq + 1,
                     c->peer == DLPG__NCCL_GROUP ? "communicator" : "point-to-point communicator",
                     st->rank, c->ndev, c->key, dlpg__member_rank(c, bad), badn);
    outlen = m > 0 && (size_t)m < sizeof(out) ? (size_t)m : sizeof(out) - 1;
  } else {
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      dlpg__nccl_result(r, NULL, fn, "ncclGetUniqueId");
      int m = snprintf(out, sizeof(out), "er%s", dlpg__last_error());
      outlen = m > 0 && (size_t)m < sizeof(out) ? (size_t)m : sizeof(out) - 1;
    } else {
      memcpy(out, "ok", 2);
      memcpy(out + 2, &id, sizeof(id));
      outlen = 2 + sizeof(id);
    }
  }
  snprintf(key, sizeof(key), "%s/id", c->rdv);
  dlpg_status_t s = dlpg__nccl_store_set(st->g->store, key, out, outlen);
  if (s != DLPG_OK) return dlpg__error_prefix(s, fn);
  if (out[0] == 'e') return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%.*s", (int)outlen - 2, out + 2);
  return DLPG_OK;
}

static dlpg_status_t dlpg__rdv_fetch(const char *fn, dlpg__nccl_comm_t *c, double deadline,
                                     ncclUniqueId *id) {
  struct dlpg__nccl *st = c->st;
  char key[700], what[256], buf[2 + sizeof(ncclUniqueId) + 400];
  size_t len = 0;
  snprintf(key, sizeof(key), "%s/id", c->rdv);
  snprintf(what, sizeof(what), "rank %d to publish NCCL's unique id of communicator %d (devices '%s')",
           dlpg__member_rank(c, 0), c->seq, c->key);
  DLPG_CHECK(dlpg__store_get_slices(fn, st, key, buf, sizeof(buf), &len, deadline, what));
  if (len > sizeof(buf)) len = sizeof(buf);
  if (len >= 2 && buf[0] == 'e' && buf[1] == 'r')
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%.*s", (int)len - 2, buf + 2);
  if (len != 2 + sizeof(ncclUniqueId) || memcmp(buf, "ok", 2) != 0)
    return dlpg__error(DLPG_ERR_INTERNAL, "%s: store key '%s' holds %zu bytes, not an NCCL unique id",
                       fn, key, len);
  memcpy(id, buf + 2, sizeof(*id));
  return DLPG_OK;
}

dlpg_status_t dlpg__nccl_wait_ready(const char *fn, dlpg__nccl_comm_t *const *cs, int nc,
                                    int parents, double deadline) {
  long nap = 20;
  double t0 = dlpg__now();
  for (;;) {
    int pending = 0;
    dlpg_status_t s = DLPG_OK;
    dlpg__nccl_rdlock();
    for (int k = 0; k < nc && s == DLPG_OK; k++) {
      dlpg__nccl_comm_t *c = cs[k];
      if (atomic_load(&c->st->aborted)) {
        s = dlpg__error(DLPG_ERR_ABORTED, "%s: group '%s' was aborted", fn, c->st->name);
        break;
      }
      ncclComm_t *hs = parents ? c->parents : c->comms;
      for (int i = 0; i < c->ndev; i++) {
        if (!hs[i]) {
          s = dlpg__error(DLPG_ERR_ABORTED, "%s: communicator '%s' of group '%s' was aborted", fn,
                          c->key, c->st->name);
          break;
        }
        ncclResult_t a = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(hs[i], &a);
        if (r != ncclSuccess) a = r;
        if (a == ncclInProgress) {
          pending = 1;
        } else if (a != ncclSuccess) {
          s = dlpg__nccl_result(a, hs[i], fn, "NCCL communicator");
          break;
        }
      }
    }
    dlpg__nccl_unlock();
    if (s != DLPG_OK || !pending) return s;
    if (dlpg__now() > deadline)
      return dlpg__error(DLPG_ERR_TIMEOUT,
                         "%s: NCCL communicator '%s' of group '%s' (rank %d) not ready before the "
                         "deadline (%.1f s); a peer is missing or stuck", fn, cs[0]->key,
                         cs[0]->st->name, cs[0]->st->rank,
                         cs[0]->st->g ? cs[0]->st->g->timeout_s : 0.0);
    /* NCCL finishes a non-blocking group launch on its own thread within tens of
     * microseconds: spin (yielding) for the first 200 us so a fast launch is not padded by
     * a sleep's granularity, then back off to sleeps for slow steps (init, connection). */
    if (dlpg__now() - t0 < 200e-6) {
      sched_yield();
      continue;
    }
    dlpg__sleep_us(nap);
    if (nap < 1000) nap *= 2;
  }
}

/* Split mode: the ready non-blocking communicators become the parents, and one
 * ncclCommSplit of each (color 0, key = its NCCL rank, so ranks keep their numbers) gives
 * the blocking child that operations use. The split is issued in one NCCL group (every
 * local device of an entry takes part in the same split); on non-blocking parents it
 * returns ncclInProgress and the children are polled against the deadline, so a peer that
 * vanishes during the split ends in DLPG_ERR_TIMEOUT, as during init. */
dlpg_status_t dlpg__nccl_split_all(const char *fn, dlpg__nccl_comm_t **nw, int nn,
                                   double deadline) {
  int any = 0;
  for (int k = 0; k < nn; k++) any |= nw[k]->mode == DLPG__MODE_SPLIT;
  if (!any) return DLPG_OK;
  dlpg_status_t s = DLPG_OK;
  for (int k = 0; k < nn && s == DLPG_OK; k++) {
    dlpg__nccl_comm_t *c = nw[k];
    if (c->mode != DLPG__MODE_SPLIT) continue;
    if (!(c->p2p_warm = calloc((size_t)c->nranks, 1)))
      return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
  }
  dlpg__nccl_rdlock();
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) s = dlpg__nccl_result(r, NULL, fn, "ncclGroupStart (split)");
  for (int k = 0; k < nn && s == DLPG_OK; k++) {
    dlpg__nccl_comm_t *c = nw[k];
    if (c->mode != DLPG__MODE_SPLIT) continue;
    for (int i = 0; i < c->ndev && s == DLPG_OK; i++) {
      ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
      dlpg__nccl_apply_config(c->st, &cfg);
      cfg.blocking = 1;
      cfg.splitShare = 1;
      c->parents[i] = c->comms[i];
      c->comms[i] = NULL;
      s = dlpg__cuda_result(cudaSetDevice(c->devs[i]), fn, "cudaSetDevice");
      if (s != DLPG_OK) break;
      r = ncclCommSplit(c->parents[i], 0, c->member * c->ndev + i, &c->comms[i], &cfg);
      s = dlpg__nccl_result(r, c->parents[i], fn, "ncclCommSplit");
    }
  }
  r = ncclGroupEnd();
  if (s == DLPG_OK) s = dlpg__nccl_result(r, NULL, fn, "ncclGroupEnd (communicator split)");
  dlpg__nccl_unlock();
  if (s != DLPG_OK) return s;
  /* On a non-blocking parent NCCL stores the child's handle only when the split has
   * finished on its own thread: poll the parents' state and the handles against the
   * deadline (the handle is written by that thread, hence the atomic load). */
  DLPG_CHECK(dlpg__nccl_wait_ready(fn, nw, nn, 1, deadline));
  long nap = 20;
  for (;;) {
    int pending = 0;
    for (int k = 0; k < nn; k++)
      for (int i = 0; i < nw[k]->ndev; i++)
        if (nw[k]->mode == DLPG__MODE_SPLIT && !__atomic_load_n(&nw[k]->comms[i], __ATOMIC_ACQUIRE))
          pending = 1;
    if (!pending) break;
    if (atomic_load(&nw[0]->st->aborted))
      return dlpg__error(DLPG_ERR_ABORTED, "%s: group '%s' was aborted", fn, nw[0]->st->name);
    if (dlpg__now() > deadline)
      return dlpg__error(DLPG_ERR_TIMEOUT,
                         "%s: ncclCommSplit of communicator '%s' of group '%s' (rank %d) did not "
                         "finish before the deadline; a peer is missing or stuck", fn, nw[0]->key,
                         nw[0]->st->name, nw[0]->st->rank);
    dlpg__sleep_us(nap);
    if (nap < 1000) nap *= 2;
  }
  return dlpg__nccl_wait_ready(fn, nw, nn, 0, deadline);
}

/* Create the entries of new[0..nn) together: rendezvous all, one ncclGroupStart/End of all
 * inits, then poll all. */
static dlpg_status_t dlpg__create_all(const char *fn, dlpg__nccl_comm_t **nw, int nn, double deadline) {
  dlpg_status_t s = DLPG_OK;
  int lazy = dlpg__nccl_lazy_colls();
  for (int k = 0; k < nn; k++) nw[k]->lazy_colls = lazy;
  ncclUniqueId *ids = calloc((size_t)nn, sizeof(ncclUniqueId));
  if (!ids) return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
  /* Publishing never waits, so every member publishes before any root waits: no order of
   * new communicators across ranks can deadlock. A communicator of this rank alone makes
   * its own id. */
  for (int k = 0; k < nn && s == DLPG_OK; k++)
    if (nw[k]->nmembers > 1) s = dlpg__rdv_publish(fn, nw[k]);
  for (int k = 0; k < nn && s == DLPG_OK; k++)
    if (nw[k]->nmembers > 1 && nw[k]->member == 0) s = dlpg__rdv_root(fn, nw[k], deadline);
  for (int k = 0; k < nn && s == DLPG_OK; k++) {
    if (nw[k]->nmembers > 1) {
      s = dlpg__rdv_fetch(fn, nw[k], deadline, &ids[k]);
    } else {
      ncclResult_t r = ncclGetUniqueId(&ids[k]);
      s = dlpg__nccl_result(r, NULL, fn, "ncclGetUniqueId");
    }
  }
  if (s != DLPG_OK) goto out;

  int cur = -1;
  cudaGetDevice(&cur);
  dlpg__nccl_rdlock();
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) s = dlpg__nccl_result(r, NULL, fn, "ncclGroupStart");
  for (int k = 0; k < nn && s == DLPG_OK; k++) {
    dlpg__nccl_comm_t *c = nw[k];
    for (int i = 0; i < c->ndev && s == DLPG_OK; i++) {
      ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
      dlpg__nccl_apply_config(c->st, &cfg);
      cfg.blocking = c->mode == DLPG__MODE_BLOCKING ? 1 : 0;
      s = dlpg__cuda_result(cudaSetDevice(c->devs[i]), fn, "cudaSetDevice");
      if (s != DLPG_OK) break;
      r = ncclCommInitRankConfig(&c->comms[i], c->nranks, ids[k], c->member * c->ndev + i, &cfg);
      s = dlpg__nccl_result(r, c->comms[i], fn, "ncclCommInitRankConfig");
    }
  }
  r = ncclGroupEnd();
  if (s == DLPG_OK) s = dlpg__nccl_result(r, NULL, fn, "ncclGroupEnd (communicator init)");
  dlpg__nccl_unlock();
  if (s == DLPG_OK) s = dlpg__nccl_wait_ready(fn, nw, nn, 0, deadline);
  if (s == DLPG_OK) s = dlpg__nccl_split_all(fn, nw, nn, deadline);
  if (cur >= 0) cudaSetDevice(cur);
  if (s == DLPG_OK)
    for (int k = 0; k < nn; k++) {
      char conf[256];
      dlpg__nccl_describe_config(nw[k]->st, conf, sizeof conf);
      DLPG_NCCL_INFO(nw[k]->st->rank, "group '%s': communicator %d on devices '%s' ready (%d NCCL "
                "ranks, %s; config:%s)", nw[k]->st->name, nw[k]->seq, nw[k]->key, nw[k]->nranks,
                nw[k]->parents[0] ? "blocking split child" : nw[k]->mode == DLPG__MODE_BLOCKING
                                                               ? "blocking" : "non-blocking",
                conf[0] ? conf : " NCCL's defaults");
    }
out:
  free(ids);
  return s;
}

/* Mark the entries created by this thread READY, or FAILED with the message (handles
 * aborted so no NCCL thread is left behind), and wake waiters. */
void dlpg__nccl_finish_all(dlpg__nccl_comm_t **nw, int nn, dlpg_status_t s) {
  const char *msg = s == DLPG_OK ? "" : dlpg__last_error();
  if (s != DLPG_OK) dlpg__nccl_wrlock();
  for (int k = 0; k < nn; k++) {
    dlpg__nccl_comm_t *c = nw[k];
    pthread_mutex_lock(&c->st->mu);
    if (s != DLPG_OK) {
      for (int i = 0; i < c->ndev; i++) {
        if (c->comms[i]) ncclCommAbort(c->comms[i]), c->comms[i] = NULL;
        if (c->parents[i]) ncclCommAbort(c->parents[i]), c->parents[i] = NULL;
      }
      c->err = s;
      snprintf(c->msg, sizeof(c->msg), "%s", msg);
      if (c->state == DLPG__COMM_CREATING) c->state = DLPG__COMM_FAILED;
    } else if (c->state == DLPG__COMM_CREATING) {
      c->state = DLPG__COMM_READY;
      if (c->ndev == 1 && c->peer == DLPG__NCCL_GROUP && c->devs[0] >= 0 &&
          c->devs[0] < DLPG__NCCL_MAX_DEVICE &&
          !atomic_load(&c->st->aborted) && !atomic_load(&c->st->destroyed))
        c->st->by_dev[c->devs[0]] = c;
    }
    pthread_cond_broadcast(&c->st->cv);
    pthread_mutex_unlock(&c->st->mu);
  }
  if (s != DLPG_OK) dlpg__nccl_unlock();
}

/* Whom new entry c connects, its NCCL rank count, creation index and rendezvous prefix,
 * for op (caller holds st->mu; c->st, ndev set). */
static void dlpg__entry_members(dlpg__nccl_comm_t *c, const dlpg__be_op_t *op) {
  struct dlpg__nccl *st = c->st;
  if (!dlpg__is_sendrecv(op)) {
    c->peer = DLPG__NCCL_GROUP;
    c->member = st->rank;
    c->nmembers = st->size;
    c->seq = st->ncreated++;
    snprintf(c->rdv, sizeof(c->rdv), "%s/nccl/%d", st->keys, c->seq);
  } else if (op->peer == st->rank) {
    c->peer = DLPG__NCCL_SELF;
    c->member = 0;
    c->nmembers = 1;
    c->seq = 0;
  } else {
    int lo = st->rank < op->peer ? st->rank : op->peer, hi = st->rank ^ op->peer ^ lo;
    c->peer = op->peer;
    c->member = st->rank == lo ? 0 : 1;
    c->nmembers = 2;
    c->seq = st->pair_created[op->peer]++;
    snprintf(c->rdv, sizeof(c->rdv), "%s/nccl/p2p/%d-%d/%d", st->keys, lo, hi, c->seq);
  }
  c->nranks = c->ndev * c->nmembers;
}

/* The status of a finished entry (caller holds st->mu). */
static dlpg_status_t dlpg__entry_status(const char *fn, dlpg__nccl_comm_t *c) {
  switch (c->state) {
    case DLPG__COMM_READY: return DLPG_OK;
    case DLPG__COMM_FAILED:
      return dlpg__error(c->err, "%s: communicator '%s' of group '%s' failed to initialise: %s", fn,
                         c->key, c->st->name, c->msg);
    case DLPG__COMM_ABORTED:
      return dlpg__error(DLPG_ERR_ABORTED, "%s: group '%s' was aborted", fn, c->st->name);
    default:
      return dlpg__error(DLPG_ERR_ABORTED, "%s: group '%s' is being destroyed", fn, c->st->name);
  }
}

dlpg_status_t dlpg__nccl_get_comms(const char *fn, dlpg__be_op_t *const *ops, int n,
                                   dlpg__nccl_comm_t **comms) {
  dlpg__nccl_comm_t *nw[64];
  int nn = 0;
  dlpg_status_t s = DLPG_OK;
  for (int i = 0; i < n; i++) comms[i] = NULL;

  /* Fast path: every op on one device whose communicator is ready (single ops, send/recv
   * pairs, coalesced batches): no key formatting, no list walk, no deadline clock. The
   * flags are rechecked by the issue path. */
  int hits = 0;
  for (int i = 0; i < n && hits == i; i++) {
    if (ops[i]->ntensors != 1 || dlpg__is_sendrecv(ops[i])) break;
    struct dlpg__nccl *st = ops[i]->state;
    int dev = ops[i]->in[0].device_id;
    if (dev < 0 || dev >= DLPG__NCCL_MAX_DEVICE) break;
    pthread_mutex_lock(&st->mu);
    dlpg__nccl_comm_t *c = st->by_dev[dev];
    if (c && c->state == DLPG__COMM_READY && !atomic_load(&st->aborted) &&
        !atomic_load(&st->destroyed)) {
      dlpg__nccl_comm_retain(c);
      comms[i] = c;
      hits++;
    }
    pthread_mutex_unlock(&st->mu);
  }
  if (hits == n) return DLPG_OK;
  for (int i = 0; i < hits; i++) dlpg__nccl_comm_release(comms[i]), comms[i] = NULL;
  /* Before a communicator is made for a device: does the device exist here at all? */
  for (int i = 0; i < n; i++) DLPG_CHECK(dlpg__nccl_devices_rule(fn, ops[i]));

  double deadline = dlpg__now() + ops[0]->gview->timeout_s;

  /* Pass 1: find or claim every op's entry. */
  for (int i = 0; i < n && s == DLPG_OK; i++) {
    struct dlpg__nccl *st = ops[i]->state;
    char key[DLPG__NCCL_KEY_MAX];
    dlpg__devkey(ops[i], st->rank, key, sizeof(key));
    pthread_mutex_lock(&st->mu);
    if (atomic_load(&st->aborted) || dlpg__be_group_aborted(ops[i]->gview)) {
      s = dlpg__error(DLPG_ERR_ABORTED, "%s: group '%s' was aborted", fn, st->name);
    } else if (atomic_load(&st->destroyed)) {
      s = dlpg__error(DLPG_ERR_ABORTED, "%s: group '%s' is being destroyed", fn, st->name);
    } else {
      dlpg__nccl_comm_t *c = st->comms;
      while (c && strcmp(c->key, key) != 0) c = c->next;
      if (!c) {
        if (nn == (int)(sizeof(nw) / sizeof(nw[0]))) {
          s = dlpg__error(DLPG_ERR_UNSUPPORTED, "%s: more than %d new communicators in one batch",
                          fn, nn);
        } else if (!(c = calloc(1, sizeof(*c)))) {
          s = dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
        } else {
          c->st = st;
          dlpg__nccl_state_retain(st);
          snprintf(c->key, sizeof(c->key), "%s", key);
          c->ndev = ops[i]->ntensors;
          for (int d = 0; d < c->ndev; d++) c->devs[d] = ops[i]->in[d].device_id;
          dlpg__entry_members(c, ops[i]);
          c->state = DLPG__COMM_CREATING;
          c->mode = (int)dlpg__nccl_mode(c->nranks);
          atomic_init(&c->refs, 1); /* the cache's */
          pthread_mutex_init(&c->issue_mu, NULL);
          c->next = st->comms;
          st->comms = c;
          nw[nn++] = c;
        }
      }
      if (c) {
        dlpg__nccl_comm_retain(c);
        comms[i] = c;
      }
    }
    pthread_mutex_unlock(&st->mu);
  }

  /* Pass 2: create what this thread claimed, all together. */
  if (nn > 0) {
    dlpg_status_t cs = s == DLPG_OK ? dlpg__create_all(fn, nw, nn, deadline) : s;
    if (s == DLPG_OK) s = cs;
    dlpg__nccl_finish_all(nw, nn, s);
  }

  /* Pass 3: wait for entries other threads are creating; check every entry's state. */
  for (int i = 0; i < n && s == DLPG_OK; i++) {
    dlpg__nccl_comm_t *c = comms[i];
    struct dlpg__nccl *st = c->st;
    pthread_mutex_lock(&st->mu);
    while (c->state == DLPG__COMM_CREATING && s == DLPG_OK) {
      if (atomic_load(&st->aborted)) {
        s = dlpg__error(DLPG_ERR_ABORTED, "%s: group '%s' was aborted", fn, st->name);
        break;
      }
      if (dlpg__now() > deadline) {
        s = dlpg__error(DLPG_ERR_TIMEOUT,
                        "%s: timed out waiting for another thread to create communicator '%s' of "
                        "group '%s'", fn, c->key, st->name);
        break;
      }
      struct timespec ts = dlpg__abstime_in(0.05);
      pthread_cond_timedwait(&st->cv, &st->mu, &ts);
    }
    if (s == DLPG_OK) s = dlpg__entry_status(fn, c);
    pthread_mutex_unlock(&st->mu);
  }

  if (s != DLPG_OK)
    for (int i = 0; i < n; i++)
      if (comms[i]) dlpg__nccl_comm_release(comms[i]), comms[i] = NULL;
  return s;
}
