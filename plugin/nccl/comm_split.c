/* The eager half of dlpg_group_split on CUDA (backend_abi.h, state_split): every ready
 * group communicator of the parent (one per device list, in creation order, the same on
 * every rank) is split with ncclCommSplit into the child's communicator for the same device
 * list, so the child's first operation finds it in its cache instead of making one through
 * the store. Every parent rank calls it, a rank without a child with NCCL_SPLIT_NOCOLOR.
 * The child's NCCL ranks keep dlpg's numbering (child rank * ndev + local device), which is
 * the key NCCL sorts by. The split goes to the handle that can be polled against the
 * deadline (the non-blocking parent in split mode, the communicator itself in non-blocking
 * mode; blocking mode waits inside NCCL, as its creation does); in split mode the child
 * then gets its blocking twin as a created communicator does (dlpg__nccl_split_all).
 * Pairwise communicators are not split: a child's pair makes its own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl/nccl_internal.h"

/* The parent's ready group communicators in creation order, retained (*n of them). */
static dlpg__nccl_comm_t **dlpg__split_sources(struct dlpg__nccl *pst, int *n) {
  *n = 0;
  pthread_mutex_lock(&pst->mu);
  int cap = 0;
  for (dlpg__nccl_comm_t *c = pst->comms; c; c = c->next) cap++;
  dlpg__nccl_comm_t **v = cap ? calloc((size_t)cap, sizeof(*v)) : NULL;
  for (dlpg__nccl_comm_t *c = pst->comms; c && v; c = c->next) {
    if (c->peer != DLPG__NCCL_GROUP || c->state != DLPG__COMM_READY) continue;
    int j = (*n)++;
    while (j > 0 && v[j - 1]->seq > c->seq) { /* by seq: the list is newest first */
      v[j] = v[j - 1];
      j--;
    }
    v[j] = c;
    dlpg__nccl_comm_retain(c);
  }
  pthread_mutex_unlock(&pst->mu);
  return v;
}

/* A child entry for parent entry pc in child state cst (not in its list yet). */
static dlpg__nccl_comm_t *dlpg__split_entry(struct dlpg__nccl *cst, const dlpg__nccl_comm_t *pc) {
  dlpg__nccl_comm_t *c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->st = cst;
  dlpg__nccl_state_retain(cst);
  memcpy(c->key, pc->key, sizeof(c->key));
  c->peer = DLPG__NCCL_GROUP;
  c->member = cst->rank;
  c->nmembers = cst->size;
  c->ndev = pc->ndev;
  memcpy(c->devs, pc->devs, sizeof(c->devs));
  c->nranks = c->ndev * c->nmembers;
  c->seq = cst->ncreated++;
  snprintf(c->rdv, sizeof(c->rdv), "%s/nccl/%d", cst->keys, c->seq);
  c->mode = pc->mode;
  c->lazy_colls = pc->lazy_colls;
  c->state = DLPG__COMM_CREATING;
  atomic_init(&c->refs, 1); /* the cache's */
  pthread_mutex_init(&c->issue_mu, NULL);
  return c;
}

/* Split pc into nc (NULL: this rank takes part without a child) and wait for it. */
static dlpg_status_t dlpg__split_one(const char *fn, dlpg__nccl_comm_t *pc, dlpg__nccl_comm_t *nc,
                                     int color, double deadline) {
  int poll = pc->mode != DLPG__MODE_BLOCKING;
  ncclComm_t dropped[DLPG__MAX_LOCAL_DEVICES] = {0};
  dlpg_status_t s = DLPG_OK;
  pthread_mutex_lock(&pc->issue_mu); /* no operation on the parent's handles meanwhile */
  dlpg__nccl_rdlock();
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) s = dlpg__nccl_result(r, NULL, fn, "ncclGroupStart (split)");
  for (int i = 0; i < pc->ndev && s == DLPG_OK; i++) {
    ncclComm_t src = pc->parents[i] ? pc->parents[i] : pc->comms[i];
    if (!src) {
      s = dlpg__error(DLPG_ERR_ABORTED, "%s: communicator '%s' of group '%s' was aborted", fn,
                      pc->key, pc->st->name);
      break;
    }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    if (nc) dlpg__nccl_apply_config(nc->st, &cfg); /* the child's settings */
    cfg.blocking = poll ? 0 : 1;
    s = dlpg__cuda_result(cudaSetDevice(pc->devs[i]), fn, "cudaSetDevice");
    if (s != DLPG_OK) break;
    if (nc)
      r = ncclCommSplit(src, color, nc->member * nc->ndev + i, &nc->comms[i], &cfg);
    else
      r = ncclCommSplit(src, NCCL_SPLIT_NOCOLOR, 0, &dropped[i], &cfg);
    s = dlpg__nccl_result(r, src, fn, "ncclCommSplit (dlpg_group_split)");
  }
  r = ncclGroupEnd();
  if (s == DLPG_OK) s = dlpg__nccl_result(r, NULL, fn, "ncclGroupEnd (dlpg_group_split)");
  dlpg__nccl_unlock();
  /* A non-blocking split finishes on NCCL's thread: the parent's handles say when. */
  if (s == DLPG_OK && poll) s = dlpg__nccl_wait_ready(fn, &pc, 1, pc->parents[0] != NULL, deadline);
  pthread_mutex_unlock(&pc->issue_mu);
  for (int i = 0; i < pc->ndev; i++)
    if (dropped[i]) ncclCommDestroy(dropped[i]); /* NOCOLOR returns none; never kept */
  if (s != DLPG_OK || !nc) return s;
  /* The child's handles are written by that thread once the split is done. */
  for (long nap = 20;;) {
    int pending = 0;
    for (int i = 0; i < nc->ndev; i++)
      pending |= !__atomic_load_n(&nc->comms[i], __ATOMIC_ACQUIRE);
    if (!pending) break;
    if (atomic_load(&pc->st->aborted))
      return dlpg__error(DLPG_ERR_ABORTED, "%s: group '%s' was aborted", fn, pc->st->name);
    if (dlpg__now() > deadline)
      return dlpg__error(DLPG_ERR_TIMEOUT, "%s: ncclCommSplit of communicator '%s' of group '%s' "
                         "(rank %d) did not finish before the deadline; a peer is missing or "
                         "stuck", fn, pc->key, pc->st->name, pc->st->rank);
    dlpg__sleep((double)nap * 1e-6);
    if (nap < 1000) nap *= 2;
  }
  if (poll) DLPG_CHECK(dlpg__nccl_wait_ready(fn, &nc, 1, 0, deadline));
  /* Split mode: operations use a blocking twin, as on a created communicator. */
  return dlpg__nccl_split_all(fn, &nc, 1, deadline);
}

dlpg_status_t dlpg__nccl_state_split(void *parent, const dlpg__be_group_t *child, int color,
                                     int key, void **child_state) {
  static const char fn[] = "dlpg_group_split";
  (void)key; /* the child's rank, which core derived from it, orders its NCCL ranks */
  struct dlpg__nccl *pst = parent;
  *child_state = NULL;
  int n = 0;
  dlpg__nccl_comm_t **src = dlpg__split_sources(pst, &n);
  if (!n) {
    free(src);
    return DLPG_OK; /* nothing made yet: the child makes its own at its first operation */
  }
  struct dlpg__nccl *cst = NULL;
  dlpg_status_t s = child ? dlpg__nccl_create(child, &cst) : DLPG_OK;
  double deadline = dlpg__now() + pst->g->timeout_s;
  int cur = -1;
  cudaGetDevice(&cur);
  for (int k = 0; k < n; k++) {
    dlpg__nccl_comm_t *nc = NULL;
    if (s == DLPG_OK && cst && !(nc = dlpg__split_entry(cst, src[k])))
      s = dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
    /* After a failure the remaining splits are still called: the peers wait in them. */
    dlpg_status_t ks = dlpg__split_one(fn, src[k], s == DLPG_OK ? nc : NULL, color, deadline);
    if (s == DLPG_OK) s = ks;
    if (nc) { /* into the child's cache, ready or failed (its handles aborted) */
      dlpg__nccl_finish_all(&nc, 1, ks);
      pthread_mutex_lock(&cst->mu);
      nc->next = cst->comms;
      cst->comms = nc;
      pthread_mutex_unlock(&cst->mu);
    }
    dlpg__nccl_comm_release(src[k]);
  }
  free(src);
  if (cur >= 0) cudaSetDevice(cur);
  if (s != DLPG_OK) {
    if (cst) dlpg__nccl_destroy(cst);
    return s;
  }
  if (cst) {
    char conf[256];
    dlpg__nccl_describe_config(cst, conf, sizeof conf);
    DLPG_NCCL_INFO(cst->rank, "group '%s': %d communicator%s split from group '%s' (color %d; "
                   "config:%s)", cst->name, n, n == 1 ? "" : "s", pst->name, color,
                   conf[0] ? conf : " NCCL's defaults");
  }
  *child_state = cst;
  return DLPG_OK;
}
