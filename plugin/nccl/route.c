/* Which path a group's CUDA operations take: NCCL, or the CUDA IPC path (ipc.h) when ranks
 * share a GPU, which NCCL refuses ("Duplicate GPU detected"). Each rank publishes, at its
 * first CUDA operation of the group, where it runs: its host (name, boot, pid namespace:
 * CUDA IPC needs one kernel and processes that can see each other) and its GPU's UUID. The
 * collectives' choice reads every rank's, a send's or receive's its two ranks', so both
 * sides of every decision read the same strings and decide alike:
 *
 *   - DLPG_CUDA_BACKEND=nccl: NCCL, nothing exchanged (the path before the IPC one existed);
 *   - no two of the ranks share a GPU: NCCL;
 *   - two share one and all are on one host (or DLPG_CUDA_BACKEND=ipc, one host): IPC;
 *   - two share one across hosts: an error naming the ranks and the GPU.
 *
 * The choice is logged at INFO with its reason. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl/ipc_host.h"

#define DLPG__WHERE_CAP 384

/* Read a one-line file into buf ("" when unreadable). */
static void dlpg__read_line(const char *path, char *buf, size_t cap) {
  buf[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f) return;
  if (fgets(buf, (int)cap, f)) buf[strcspn(buf, "\n")] = '\0';
  fclose(f);
}

/* "host=<name>,boot=<id>,pidns=<ns>|gpu=<uuid>|dev=<ordinal>" (route_rule.h). */
static dlpg_status_t dlpg__where_this(const char *fn, int dev, char *out, size_t cap) {
  char host[128] = "", boot[64], ns[64] = "";
  gethostname(host, sizeof host - 1);
  dlpg__read_line("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
  ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  ns[n > 0 ? n : 0] = '\0';
  struct cudaDeviceProp prop;
  DLPG_CHECK(dlpg__cuda_result(cudaGetDeviceProperties(&prop, dev), fn, "cudaGetDeviceProperties"));
  char uuid[33];
  for (int i = 0; i < 16; i++) snprintf(uuid + 2 * i, 3, "%02x", (unsigned char)prop.uuid.bytes[i]);
  snprintf(out, cap, "host=%s,boot=%s,pidns=%s|gpu=%s|dev=%d", host, boot, ns, uuid, dev);
  return DLPG_OK;
}

/* Publish this rank's string (once), then read rank q's (kept). */
static dlpg_status_t dlpg__where_of(const char *fn, struct dlpg__nccl *st, int dev, int q,
                                    double deadline, const char **out) {
  char key[700];
  pthread_mutex_lock(&st->mu);
  if (!st->where) st->where = calloc((size_t)st->size, sizeof(char *));
  dlpg_status_t s = st->where ? DLPG_OK : dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
  if (s == DLPG_OK && !st->where_published) {
    char w[DLPG__WHERE_CAP];
    s = dlpg__where_this(fn, dev, w, sizeof w);
    if (s == DLPG_OK) {
      snprintf(key, sizeof key, "%s/cudaipc/where/%d", st->keys, st->rank);
      s = dlpg__nccl_store_set(st->g->store, key, w, strlen(w));
      if (s == DLPG_OK) st->where[st->rank] = strdup(w), st->where_published = 1;
    }
  }
  int have = s == DLPG_OK && st->where[q];
  pthread_mutex_unlock(&st->mu);
  DLPG_CHECK(s);
  if (!have) {
    char w[DLPG__WHERE_CAP];
    size_t len = 0;
    snprintf(key, sizeof key, "%s/cudaipc/where/%d", st->keys, q);
    char what[64];
    snprintf(what, sizeof what, "where rank %d runs (its host and GPU)", q);
    DLPG_CHECK(dlpg__store_get_slices(fn, st, key, w, sizeof w - 1, &len, deadline, what));
    w[len] = '\0';
    pthread_mutex_lock(&st->mu);
    if (!st->where[q]) st->where[q] = strdup(w);
    pthread_mutex_unlock(&st->mu);
  }
  *out = st->where[q];
  return *out ? DLPG_OK : dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
}

/* The decision for ranks[0..nr) (this rank among them). *route: DLPG__ROUTE_*; why: the
 * reason, for the INFO line. */
static dlpg_status_t dlpg__decide(const char *fn, struct dlpg__nccl *st, int dev, const int *ranks,
                                  int nr, int *route, char *why, size_t cap) {
  dlpg__cuda_path_t forced = dlpg__cuda_path();
  if (forced == DLPG__CUDA_NCCL) {
    *route = DLPG__ROUTE_NCCL;
    snprintf(why, cap, "DLPG_CUDA_BACKEND=nccl");
    return DLPG_OK;
  }
  double deadline = dlpg__now() + st->g->timeout_s;
  const char **w = calloc((size_t)nr, sizeof *w);
  if (!w) return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
  for (int i = 0; i < nr; i++) {
    dlpg_status_t s = dlpg__where_of(fn, st, dev, ranks[i], deadline, &w[i]);
    if (s != DLPG_OK) {
      free(w);
      return s;
    }
  }
  dlpg_status_t s = dlpg__route_rule(fn, st->name, (int)forced, ranks, nr, w,
                                     DLPG__IPC_MAX_RANKS, route, why, cap);
  free(w);
  return s;
}

static int dlpg__is_pair(const dlpg__be_op_t *op) {
  return op->kind == DLPG__OP_SEND || op->kind == DLPG__OP_RECV;
}

/* The route of one op: the group's, or its pair's. */
static dlpg_status_t dlpg__route_op(const char *fn, const dlpg__be_op_t *op, int *route) {
  struct dlpg__nccl *st = op->state;
  int dev = op->in[0].device_id;
  if (st->size < 2 || dlpg__cuda_path() == DLPG__CUDA_NCCL) {
    *route = DLPG__ROUTE_NCCL;
    return DLPG_OK;
  }
  if (dlpg__is_pair(op)) {
    if (op->peer == st->rank || op->peer < 0 || op->peer >= st->size) {
      *route = DLPG__ROUTE_NCCL;  /* to self: NCCL's own communicator of one rank */
      return DLPG_OK;
    }
    pthread_mutex_lock(&st->mu);
    if (!st->pair_route) st->pair_route = calloc((size_t)st->size, 1);
    int r = st->pair_route ? st->pair_route[op->peer] : DLPG__ROUTE_UNDECIDED;
    pthread_mutex_unlock(&st->mu);
    if (r != DLPG__ROUTE_UNDECIDED) {
      *route = r;
      return DLPG_OK;
    }
    /* From the two ranks' strings alone, never the collectives' choice: the peer may not
     * have made that one yet, and both sides must decide alike. A pair on two GPUs of an
     * IPC group runs on NCCL's pairwise communicator, which serves it. */
    int lo = st->rank < op->peer ? st->rank : op->peer, hi = lo == st->rank ? op->peer : st->rank;
    int ranks[2] = {lo, hi};
    char why[512];
    DLPG_CHECK(dlpg__decide(fn, st, dev, ranks, 2, &r, why, sizeof why));
    pthread_mutex_lock(&st->mu);
    if (st->pair_route) st->pair_route[op->peer] = (unsigned char)r;
    pthread_mutex_unlock(&st->mu);
    if (r == DLPG__ROUTE_IPC)
      DLPG_NCCL_INFO(st->rank, "group '%s': sends and receives between ranks %d and %d on cuda "
                     "tensors run on CUDA IPC (%s)", st->name, lo, hi, why);
    *route = r;
    return DLPG_OK;
  }
  int r = atomic_load(&st->route);
  if (r != DLPG__ROUTE_UNDECIDED) {
    *route = r;
    if (r == DLPG__ROUTE_NCCL || r == DLPG__ROUTE_IPC) return DLPG_OK;
    return dlpg__error(st->route_err, "%s", st->route_msg);
  }
  int *ranks = malloc((size_t)st->size * sizeof(int));
  if (!ranks) return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
  for (int q = 0; q < st->size; q++) ranks[q] = q;
  char why[512];
  dlpg_status_t s = dlpg__decide(fn, st, dev, ranks, st->size, &r, why, sizeof why);
  free(ranks);
  if (s != DLPG_OK) {
    /* Final for the group: every later collective repeats it (a timeout does not stick,
     * since a late peer may still come). */
    if (s != DLPG_ERR_TIMEOUT && s != DLPG_ERR_ABORTED) {
      st->route_err = s;
      snprintf(st->route_msg, sizeof st->route_msg, "%s", dlpg__last_error());
      atomic_store(&st->route, 3);
    }
    return s;
  }
  int expect = DLPG__ROUTE_UNDECIDED;
  if (atomic_compare_exchange_strong(&st->route, &expect, r))
    DLPG_NCCL_INFO(st->rank, "group '%s': collectives on cuda tensors run on %s (%s)", st->name,
                   r == DLPG__ROUTE_IPC ? "CUDA IPC" : "NCCL", why);
  *route = r;
  return DLPG_OK;
}

dlpg_status_t dlpg__nccl_route(const char *fn, dlpg__be_op_t *const *ops, int n,
                               unsigned char *is_ipc, int *nipc) {
  *nipc = 0;
  for (int k = 0; k < n; k++) {
    int r = DLPG__ROUTE_NCCL;
    DLPG_CHECK(dlpg__route_op(fn, ops[k], &r));
    is_ipc[k] = r == DLPG__ROUTE_IPC;
    *nipc += is_ipc[k];
  }
  return DLPG_OK;
}

void dlpg__nccl_route_free(struct dlpg__nccl *st) {
  if (st->where)
    for (int q = 0; q < st->size; q++) free(st->where[q]);
  free(st->where);
  free(st->pair_route);
  st->where = NULL;
  st->pair_route = NULL;
}
