/* dlpg_store_from_ops: a store implemented by the host through callbacks (PyTorch's c10d
 * store, JAX's key-value client). The ops table is copied, reading only the bytes the host
 * said it has (struct_size), so an older host's shorter table stays valid. Callbacks run
 * one at a time per store (the ABI promises hosts that), under the store's mutex.
 *
 * A blocking get would then hold the mutex for its whole timeout and keep another dlpg
 * thread of this process from setting the very key it waits for, so blocking waits are cut
 * into slices (50 ms growing to 1 s) and the mutex is released between them. A slice that
 * ends with DLPG_ERR_TIMEOUT just starts the next one until the caller's deadline.
 *
 * A host's wait that expires is not free, though: torch 2's TCPStore logs "[c10d]
 * waitForInput: socket ... timed out after 41ms" for each one, into the user's log, and
 * torch 1.13's client can take the late answer of a timed-out wait for the reply to its next
 * request. So when the host has a check callback, a blocking get or wait never asks the host
 * to block: the keys are checked (non-blocking) at growing intervals, 1 ms doubling to
 * 50 ms, and read once they exist; the host sees only requests that succeed. Without check,
 * or once check has failed (torch 1.13's PrefixStore has none), the slices are used. */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/params.h"
#include "base/status.h"
#include "store/store.h"
#include "store/store_internal.h"
#include "store/tcp_proto.h"

/* A FIFO (ticket) lock: a sliced get that releases and retakes the lock must not starve
 * the thread waiting to set its key, which a plain mutex (not fair) would allow. */
typedef struct dlpg__ticket_lock {
  pthread_mutex_t m;
  pthread_cond_t c;
  unsigned long next, serving;
} dlpg__ticket_lock_t;

typedef struct dlpg__ops_store {
  dlpg_store_ops_t ops; /* the host's table, zero-filled beyond its struct_size */
  void *ctx;
  dlpg__ticket_lock_t mu;
  atomic_int check_failed; /* the host's check failed once: blocking reads use slices */
} dlpg__ops_store_t;

static void dlpg__ticket_init(dlpg__ticket_lock_t *l) {
  pthread_mutex_init(&l->m, NULL);
  pthread_cond_init(&l->c, NULL);
  l->next = l->serving = 0;
}

static void dlpg__ticket_destroy(dlpg__ticket_lock_t *l) {
  pthread_cond_destroy(&l->c);
  pthread_mutex_destroy(&l->m);
}

static void dlpg__ticket_lock(dlpg__ticket_lock_t *l) {
  pthread_mutex_lock(&l->m);
  unsigned long mine = l->next++;
  while (mine != l->serving) pthread_cond_wait(&l->c, &l->m);
  pthread_mutex_unlock(&l->m);
}

static void dlpg__ticket_unlock(dlpg__ticket_lock_t *l) {
  pthread_mutex_lock(&l->m);
  l->serving++;
  pthread_cond_broadcast(&l->c);
  pthread_mutex_unlock(&l->m);
}

/* A non-OK status from the host becomes a message naming the callback and the key. Values
 * outside the enum are reported as DLPG_ERR_REMOTE (the host failed). */
static dlpg_status_t dlpg__ops_fail(dlpg_status_t st, const char *cb, const char *key) {
  if ((int)st < (int)DLPG_ERR_INVALID_ARGUMENT || (int)st > (int)DLPG_ERR_INTERNAL) {
    int raw = (int)st;
    return dlpg__error(DLPG_ERR_REMOTE, "host store callback %s (key '%s') returned %d", cb,
                       key ? key : "", raw);
  }
  return dlpg__error(st, "host store callback %s (key '%s') returned %s", cb, key ? key : "",
                     dlpg_status_name(st));
}

static dlpg_status_t dlpg__ops_set(void *impl, const char *key, const void *value, size_t len) {
  dlpg__ops_store_t *o = (dlpg__ops_store_t *)impl;
  dlpg__ticket_lock(&o->mu);
  dlpg_status_t st = o->ops.set(o->ctx, key, value, len);
  dlpg__ticket_unlock(&o->mu);
  return st == DLPG_OK ? st : dlpg__ops_fail(st, "set", key);
}

/* The longest pause between two checks of keys that do not exist yet: what a blocking read
 * on a host store may lag behind the key's arrival. */
#define DLPG__OPS_POLL_MAX_S 0.05

/* Check keys at growing intervals until they all exist (*present = 1) or deadline passes
 * (*present = 0). Non-OK when the host has no usable check: the caller uses slices. */
static dlpg_status_t dlpg__ops_poll(dlpg__ops_store_t *o, const char *const *keys, size_t nkeys,
                                    double deadline, int *present) {
  *present = 0;
  if (!o->ops.check || atomic_load(&o->check_failed)) return DLPG_ERR_UNSUPPORTED;
  double nap = 0.001;
  for (;;) {
    int all = 0;
    dlpg__ticket_lock(&o->mu);
    dlpg_status_t st = o->ops.check(o->ctx, keys, nkeys, &all);
    dlpg__ticket_unlock(&o->mu);
    if (st != DLPG_OK) {
      atomic_store(&o->check_failed, 1);
      return st;
    }
    if (all) {
      *present = 1;
      return DLPG_OK;
    }
    double left = deadline - dlpg__now();
    if (left <= 0) return DLPG_OK;
    dlpg__sleep(nap < left ? nap : left);
    nap = nap * 2 > DLPG__OPS_POLL_MAX_S ? DLPG__OPS_POLL_MAX_S : nap * 2;
  }
}

/* One blocking get cut into slices (see the top of the file). */
static dlpg_status_t dlpg__ops_get_sliced(dlpg__ops_store_t *o, const char *key, double timeout_s,
                                          void *buf, size_t cap, size_t *len) {
  double deadline = dlpg__now() + timeout_s, slice = 0.05;
  for (;;) {
    double left = deadline - dlpg__now();
    double t = left < slice ? left : slice;
    if (t < 0.001) t = 0.001;
    size_t n = 0;
    dlpg__ticket_lock(&o->mu);
    dlpg_status_t st = o->ops.get(o->ctx, key, t, buf, cap, &n);
    dlpg__ticket_unlock(&o->mu);
    if (st == DLPG_OK) {
      *len = n;
      return DLPG_OK;
    }
    if (st != DLPG_ERR_TIMEOUT) return dlpg__ops_fail(st, "get", key);
    if (dlpg__now() >= deadline)
      return dlpg__error(DLPG_ERR_TIMEOUT, "timed out after %g s waiting for key '%s'",
                         timeout_s, key);
    slice = slice * 2 > 1.0 ? 1.0 : slice * 2;
  }
}

static dlpg_status_t dlpg__ops_get(void *impl, const char *key, double timeout_s, void *buf,
                                   size_t cap, size_t *len) {
  dlpg__ops_store_t *o = (dlpg__ops_store_t *)impl;
  double deadline = dlpg__now() + timeout_s;
  int present = 0;
  if (dlpg__ops_poll(o, &key, 1, deadline, &present) != DLPG_OK)
    return dlpg__ops_get_sliced(o, key, timeout_s, buf, cap, len);
  if (!present)
    return dlpg__error(DLPG_ERR_TIMEOUT, "timed out after %g s waiting for key '%s'", timeout_s,
                       key);
  /* The key exists: the host answers at once (the time left only covers a deleted key). */
  double left = deadline - dlpg__now();
  return dlpg__ops_get_sliced(o, key, left > 0.001 ? left : 0.001, buf, cap, len);
}

static dlpg_status_t dlpg__ops_add(void *impl, const char *key, int64_t delta, int64_t *result) {
  dlpg__ops_store_t *o = (dlpg__ops_store_t *)impl;
  int64_t r = 0;
  dlpg__ticket_lock(&o->mu);
  dlpg_status_t st = o->ops.add(o->ctx, key, delta, &r);
  dlpg__ticket_unlock(&o->mu);
  if (st != DLPG_OK) return dlpg__ops_fail(st, "add", key);
  *result = r;
  return DLPG_OK;
}

static dlpg_status_t dlpg__ops_wait(void *impl, const char *const *keys, size_t nkeys,
                                    double timeout_s) {
  dlpg__ops_store_t *o = (dlpg__ops_store_t *)impl;
  double deadline = dlpg__now() + timeout_s;
  int present = 0;
  if (dlpg__ops_poll(o, keys, nkeys, deadline, &present) == DLPG_OK) {
    if (present) return DLPG_OK;
  } else if (o->ops.wait) {
    /* The host's wait, sliced like get. */
    double slice = 0.05;
    for (;;) {
      double left = deadline - dlpg__now();
      double t = left < slice ? left : slice;
      if (t < 0.001) t = 0.001;
      dlpg__ticket_lock(&o->mu);
      dlpg_status_t st = o->ops.wait(o->ctx, keys, nkeys, t);
      dlpg__ticket_unlock(&o->mu);
      if (st == DLPG_OK) return st;
      if (st != DLPG_ERR_TIMEOUT) return dlpg__ops_fail(st, "wait", keys[0]);
      if (dlpg__now() >= deadline) break;
      slice = slice * 2 > 1.0 ? 1.0 : slice * 2;
    }
  } else {
    /* No wait callback: get each key (length only) within the one deadline. */
    size_t i = 0;
    for (; i < nkeys; ++i) {
      double left = deadline - dlpg__now();
      size_t n = 0;
      dlpg_status_t st = dlpg__ops_get_sliced(o, keys[i], left > 0.001 ? left : 0.001, NULL, 0, &n);
      if (st == DLPG_ERR_TIMEOUT) break;
      if (st != DLPG_OK) return st;
    }
    if (i == nkeys) return DLPG_OK;
  }
  /* Name the keys still missing when the host can tell us, else all of them. */
  char msg[DLPG__ERROR_MAX];
  size_t off = (size_t)snprintf(msg, sizeof msg, "timed out after %g s waiting for keys", timeout_s);
  for (size_t i = 0; i < nkeys && off < sizeof msg; ++i) {
    int exists = 0;
    if (o->ops.check) {
      dlpg__ticket_lock(&o->mu);
      dlpg_status_t st = o->ops.check(o->ctx, &keys[i], 1, &exists);
      dlpg__ticket_unlock(&o->mu);
      if (st != DLPG_OK) exists = 0;
    }
    if (!exists) off += (size_t)snprintf(msg + off, sizeof msg - off, " '%s'", keys[i]);
  }
  return dlpg__error(DLPG_ERR_TIMEOUT, "%s", msg);
}

static dlpg_status_t dlpg__ops_check(void *impl, const char *const *keys, size_t nkeys,
                                     int *all_exist) {
  dlpg__ops_store_t *o = (dlpg__ops_store_t *)impl;
  if (!o->ops.check)
    return dlpg__error(DLPG_ERR_UNSUPPORTED, "the host's store has no check callback");
  int all = 0;
  dlpg__ticket_lock(&o->mu);
  dlpg_status_t st = o->ops.check(o->ctx, keys, nkeys, &all);
  dlpg__ticket_unlock(&o->mu);
  if (st != DLPG_OK) return dlpg__ops_fail(st, "check", nkeys ? keys[0] : "");
  *all_exist = all != 0;
  return DLPG_OK;
}

static dlpg_status_t dlpg__ops_delete(void *impl, const char *key, int *deleted) {
  dlpg__ops_store_t *o = (dlpg__ops_store_t *)impl;
  if (!o->ops.delete_key)
    return dlpg__error(DLPG_ERR_UNSUPPORTED, "the host's store has no delete_key callback");
  int d = 0;
  dlpg__ticket_lock(&o->mu);
  dlpg_status_t st = o->ops.delete_key(o->ctx, key, &d);
  dlpg__ticket_unlock(&o->mu);
  if (st != DLPG_OK) return dlpg__ops_fail(st, "delete_key", key);
  *deleted = d != 0;
  return DLPG_OK;
}

static int dlpg__ops_port(void *impl) {
  (void)impl; /* not a TCP store: no port */
  return -1;
}

static void dlpg__ops_destroy(void *impl) {
  dlpg__ops_store_t *o = (dlpg__ops_store_t *)impl;
  if (o->ops.release) o->ops.release(o->ctx);
  dlpg__ticket_destroy(&o->mu);
  free(o);
}

static const dlpg__store_vtbl_t dlpg__ops_vtbl = {
    "ops",           dlpg__ops_set,    dlpg__ops_get,  dlpg__ops_add,    dlpg__ops_wait,
    dlpg__ops_check, dlpg__ops_delete, dlpg__ops_port, dlpg__ops_destroy};

/* The smallest table a host may pass: struct_size through add. */
#define DLPG__OPS_MIN_SIZE (offsetof(dlpg_store_ops_t, add) + sizeof(((dlpg_store_ops_t *)0)->add))

dlpg_status_t dlpg_store_from_ops(const dlpg_store_ops_t *ops, void *ctx, double timeout_s,
                                  dlpg_store_t **store) {
  static const char fn[] = "dlpg_store_from_ops";
  DLPG_ARG_CHECK(ops != NULL, "%s: ops is NULL", fn);
  DLPG_ARG_CHECK(store != NULL, "%s: store is NULL", fn);
  DLPG_ARG_CHECK(ops->struct_size >= DLPG__OPS_MIN_SIZE,
                 "%s: ops->struct_size is %zu, smaller than the %zu bytes that hold set, get "
                 "and add (sizeof(dlpg_store_ops_t) is %zu)",
                 fn, ops->struct_size, (size_t)DLPG__OPS_MIN_SIZE, sizeof(dlpg_store_ops_t));
  dlpg_store_ops_t copy;
  memset(&copy, 0, sizeof copy);
  memcpy(&copy, ops, ops->struct_size < sizeof copy ? ops->struct_size : sizeof copy);
  DLPG_ARG_CHECK(copy.set != NULL, "%s: ops->set is NULL (set, get and add are required)", fn);
  DLPG_ARG_CHECK(copy.get != NULL, "%s: ops->get is NULL (set, get and add are required)", fn);
  DLPG_ARG_CHECK(copy.add != NULL, "%s: ops->add is NULL (set, get and add are required)", fn);
  double t;
  DLPG_CHECK(dlpg__store_resolve_timeout(fn, timeout_s, 0, &t));
  dlpg__ops_store_t *o = (dlpg__ops_store_t *)calloc(1, sizeof *o);
  if (!o) return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
  o->ops = copy;
  o->ctx = ctx;
  dlpg__ticket_init(&o->mu);
  dlpg_store_t *s = NULL;
  /* On failure dlpg__store_new destroys o, which would call the host's release: the host
   * still owns ctx when this function fails, so clear release first. */
  o->ops.release = NULL;
  /* The server's host, for backends that bind to the route there (dlpg.h); unknown, the
   * launcher's MASTER_ADDR is the best guess at where the job's peers are. */
  const char *host = copy.host && *copy.host ? copy.host : dlpg__param_str(DLPG__PARAM_MASTER_ADDR);
  dlpg_status_t st = dlpg__store_new(&dlpg__ops_vtbl, o, t, host && *host ? host : NULL, &s);
  if (st != DLPG_OK) return dlpg__error_prefix(st, fn);
  o->ops.release = copy.release;
  *store = s;
  return DLPG_OK;
}
