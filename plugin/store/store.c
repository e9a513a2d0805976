/* The public dlpg_store_* operations: validate every argument at the door, resolve the
 * timeout, then dispatch to the store's implementation (TCP, file, host callbacks). Also
 * the reference counting behind dlpg_store_t: the caller's handle and every group created
 * on the store each hold one reference; the implementation is destroyed with the last. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/status.h"
#include "base/timeout.h"
#include "store/store.h"
#include "store/store_internal.h"
#include "store/tcp_proto.h"

struct dlpg_store {
  const dlpg__store_vtbl_t *vt;
  void *impl;
  double timeout_s;
  atomic_int refs;
  char *host; /* for TCP stores: the host clients reach (Gloo binds to the matching route) */
};

dlpg_status_t dlpg__store_new(const dlpg__store_vtbl_t *vt, void *impl, double timeout_s,
                              const char *host, dlpg_store_t **out) {
  dlpg_store_t *s = (dlpg_store_t *)calloc(1, sizeof *s);
  char *h = host ? strdup(host) : NULL;
  if (!s || (host && !h)) {
    free(s);
    free(h);
    if (vt && vt->destroy) vt->destroy(impl);
    return dlpg__error(DLPG_ERR_SYSTEM, "dlpg__store_new: out of memory");
  }
  s->vt = vt;
  s->impl = impl;
  s->timeout_s = timeout_s;
  s->host = h;
  atomic_init(&s->refs, 1);
  *out = s;
  return DLPG_OK;
}

void dlpg__store_retain(dlpg_store_t *s) {
  if (s) atomic_fetch_add(&s->refs, 1);
}

void dlpg__store_release(dlpg_store_t *s) {
  if (!s) return;
  if (atomic_fetch_sub(&s->refs, 1) != 1) return;
  if (s->vt && s->vt->destroy) s->vt->destroy(s->impl);
  free(s->host);
  free(s);
}

const char *dlpg__store_host(const dlpg_store_t *s) { return s ? s->host : NULL; }

static _Thread_local double dlpg__store_tls_cap;

double dlpg__store_cap_deadline(double deadline) {
  double old = dlpg__store_tls_cap;
  dlpg__store_tls_cap = deadline;
  return old;
}

double dlpg__store_call_deadline(double timeout_s) {
  double d = dlpg__now() + timeout_s;
  return dlpg__store_tls_cap > 0 && dlpg__store_tls_cap < d ? dlpg__store_tls_cap : d;
}

double dlpg__store_timeout(const dlpg_store_t *s) {
  return s && s->timeout_s > 0 ? s->timeout_s : dlpg__timeout_resolve(0);
}

dlpg_status_t dlpg__store_resolve_timeout(const char *fn, double timeout_s, double dflt,
                                          double *out) {
  if (isnan(timeout_s))
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: timeout_s is NaN", fn);
  *out = dflt > 0 ? dlpg__timeout_or(timeout_s, dflt) : dlpg__timeout_resolve(timeout_s);
  return DLPG_OK;
}

dlpg_status_t dlpg__store_check_key(const char *fn, const char *arg, const char *key) {
  if (!key) return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, arg);
  size_t n = strnlen(key, (size_t)DLPG_STORE_MAX_KEY_LEN + 1);
  if (n == 0)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "%s: %s is empty (keys are 1..%u bytes)", fn, arg, DLPG_STORE_MAX_KEY_LEN);
  if (n > DLPG_STORE_MAX_KEY_LEN)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "%s: %s \"%.40s...\" is longer than DLPG_STORE_MAX_KEY_LEN (%u bytes)", fn,
                       arg, key, DLPG_STORE_MAX_KEY_LEN);
  return DLPG_OK;
}

static dlpg_status_t dlpg__check_keys(const char *fn, const char *const *keys, size_t nkeys) {
  if (nkeys > 0 && !keys)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: keys is NULL but nkeys is %zu", fn, nkeys);
  char arg[48];
  for (size_t i = 0; i < nkeys; ++i) {
    snprintf(arg, sizeof arg, "keys[%zu]", i);
    DLPG_CHECK(dlpg__store_check_key(fn, arg, keys[i]));
  }
  return DLPG_OK;
}

#define DLPG__STORE_ARG(fn, s) \
  DLPG_ARG_CHECK((s) != NULL, "%s: store is NULL", fn)

/* Surface an implementation's error under the public function's name. */
static dlpg_status_t dlpg__store_fail(dlpg_status_t st, const char *fn) {
  return st == DLPG_OK ? st : dlpg__error_prefix(st, fn);
}

dlpg_status_t dlpg_store_set(dlpg_store_t *store, const char *key, const void *value, size_t len) {
  static const char fn[] = "dlpg_store_set";
  DLPG__STORE_ARG(fn, store);
  DLPG_CHECK(dlpg__store_check_key(fn, "key", key));
  DLPG_ARG_CHECK(len <= DLPG_STORE_MAX_VALUE_LEN,
                 "%s: len %zu of the value of key '%s' exceeds DLPG_STORE_MAX_VALUE_LEN (%u bytes)",
                 fn, len, key, DLPG_STORE_MAX_VALUE_LEN);
  DLPG_ARG_CHECK(value != NULL || len == 0, "%s: value is NULL but len is %zu", fn, len);
  return dlpg__store_fail(store->vt->set(store->impl, key, value ? value : "", len), fn);
}

dlpg_status_t dlpg_store_get(dlpg_store_t *store, const char *key, double timeout_s, void *buf,
                             size_t capacity, size_t *len) {
  static const char fn[] = "dlpg_store_get";
  DLPG__STORE_ARG(fn, store);
  DLPG_CHECK(dlpg__store_check_key(fn, "key", key));
  DLPG_ARG_CHECK(buf != NULL || capacity == 0, "%s: buf is NULL but capacity is %zu", fn,
                 capacity);
  DLPG_ARG_CHECK(len != NULL, "%s: len is NULL", fn);
  double t;
  DLPG_CHECK(dlpg__store_resolve_timeout(fn, timeout_s, store->timeout_s, &t));
  size_t n = 0;
  DLPG_CHECK(dlpg__store_fail(store->vt->get(store->impl, key, t, buf, capacity, &n), fn));
  *len = n;
  return DLPG_OK;
}

dlpg_status_t dlpg_store_add(dlpg_store_t *store, const char *key, int64_t delta, int64_t *result) {
  static const char fn[] = "dlpg_store_add";
  DLPG__STORE_ARG(fn, store);
  DLPG_CHECK(dlpg__store_check_key(fn, "key", key));
  int64_t r = 0;
  DLPG_CHECK(dlpg__store_fail(store->vt->add(store->impl, key, delta, &r), fn));
  if (result) *result = r;
  return DLPG_OK;
}

dlpg_status_t dlpg_store_wait(dlpg_store_t *store, const char *const *keys, size_t nkeys,
                              double timeout_s) {
  static const char fn[] = "dlpg_store_wait";
  DLPG__STORE_ARG(fn, store);
  DLPG_CHECK(dlpg__check_keys(fn, keys, nkeys));
  double t;
  DLPG_CHECK(dlpg__store_resolve_timeout(fn, timeout_s, store->timeout_s, &t));
  if (nkeys == 0) return DLPG_OK;
  if (store->vt->wait) return dlpg__store_fail(store->vt->wait(store->impl, keys, nkeys, t), fn);
  /* An implementation without wait: get each key (length only) within one deadline. */
  double deadline = dlpg__now() + t;
  for (size_t i = 0; i < nkeys; ++i) {
    double left = deadline - dlpg__now();
    size_t n = 0;
    DLPG_CHECK(dlpg__store_fail(
        store->vt->get(store->impl, keys[i], left > 0.001 ? left : 0.001, NULL, 0, &n), fn));
  }
  return DLPG_OK;
}

dlpg_status_t dlpg_store_check(dlpg_store_t *store, const char *const *keys, size_t nkeys,
                               int *all_exist) {
  static const char fn[] = "dlpg_store_check";
  DLPG__STORE_ARG(fn, store);
  DLPG_CHECK(dlpg__check_keys(fn, keys, nkeys));
  DLPG_ARG_CHECK(all_exist != NULL, "%s: all_exist is NULL", fn);
  if (!store->vt->check)
    return dlpg__error(DLPG_ERR_UNSUPPORTED, "%s: the %s store does not implement check", fn,
                       store->vt->kind);
  int all = 1;
  if (nkeys > 0) DLPG_CHECK(dlpg__store_fail(store->vt->check(store->impl, keys, nkeys, &all), fn));
  *all_exist = all ? 1 : 0;
  return DLPG_OK;
}

dlpg_status_t dlpg_store_delete_key(dlpg_store_t *store, const char *key, int *deleted) {
  static const char fn[] = "dlpg_store_delete_key";
  DLPG__STORE_ARG(fn, store);
  DLPG_CHECK(dlpg__store_check_key(fn, "key", key));
  if (!store->vt->delete_key)
    return dlpg__error(DLPG_ERR_UNSUPPORTED, "%s: the %s store does not implement delete_key", fn,
                       store->vt->kind);
  int d = 0;
  DLPG_CHECK(dlpg__store_fail(store->vt->delete_key(store->impl, key, &d), fn));
  if (deleted) *deleted = d ? 1 : 0;
  return DLPG_OK;
}

dlpg_status_t dlpg_store_port(dlpg_store_t *store, int *port) {
  static const char fn[] = "dlpg_store_port";
  DLPG__STORE_ARG(fn, store);
  DLPG_ARG_CHECK(port != NULL, "%s: port is NULL", fn);
  int p = store->vt->port ? store->vt->port(store->impl) : -1;
  if (p < 0)
    return dlpg__error(DLPG_ERR_UNSUPPORTED, "%s: the store is a %s store, not a TCP store", fn,
                       store->vt->kind);
  *port = p;
  return DLPG_OK;
}

dlpg_status_t dlpg_store_close(dlpg_store_t *store) {
  dlpg__store_release(store);
  return DLPG_OK;
}
