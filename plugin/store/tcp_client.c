/* The TCP store client (and, when asked, the embedded server it talks to). One store handle
 * is shared by every thread of the process: requests take a connection from a small pool
 * guarded by the client's mutex, so a thread blocked in a long WAIT never holds up another
 * thread's SET of the very key it waits for. Every send and receive is bounded by a
 * deadline (poll), a vanished server is DLPG_ERR_REMOTE at once, and the first connection
 * retries with exponential backoff (10 ms .. 1 s) until the open's timeout (a refused
 * token fails at once). Connections and the exchange itself: tcp_client_conn.c. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/status.h"
#include "store/store.h"
#include "store/tcp_client_internal.h"

/* Extra time a client waits for a WAIT's answer beyond the WAIT's own timeout: the server
 * answers at the deadline, this only covers the trip back. */
#define DLPG__TCP_WAIT_GRACE_S 2.0
/* The longest WAIT sent at once; longer waits are sent in slices (the server refuses WAITs
 * over DLPG_STORE_MAX_WAIT_S, 3600 s by default). */
#define DLPG__TCP_WAIT_SLICE_S 600.0

static dlpg_status_t dlpg__tcp_unexpected(dlpg__tcp_store_t *t, dlpg__reply_t *r, const char *what) {
  dlpg_status_t st;
  if (r->type == DLPG__REPLY_ERROR && r->n == 1)
    st = dlpg__error(DLPG_ERR_REMOTE, "store server %s: %s: %.*s", t->peer, what,
                     (int)r->f[0].len, (const char *)r->f[0].data);
  else
    st = dlpg__error(DLPG_ERR_REMOTE, "store server %s sent an unexpected reply (type %u, %zu "
                     "fields) to %s", t->peer, r->type, r->n, what);
  dlpg__reply_free(r);
  return st;
}

static dlpg_status_t dlpg__tcp_set(void *impl, const char *key, const void *value, size_t len) {
  dlpg__tcp_store_t *t = (dlpg__tcp_store_t *)impl;
  const void *d[2] = {key, value};
  size_t l[2] = {strlen(key), len};
  dlpg__reply_t r;
  DLPG_CHECK(dlpg__tcp_call(t, DLPG__CMD_SET, 2, d, l, dlpg__store_call_deadline(t->timeout_s), &r));
  if (r.type != DLPG__REPLY_OK) return dlpg__tcp_unexpected(t, &r, "SET");
  dlpg__reply_free(&r);
  return DLPG_OK;
}

/* One WAIT of at most a slice: the server parks the request until the keys exist or its
 * deadline. *timed_out: the slice ended with keys missing (the message names them). */
static dlpg_status_t dlpg__tcp_wait_once(dlpg__tcp_store_t *t, const char *const *keys,
                                         size_t nkeys, double timeout_s, double total_s,
                                         int *timed_out) {
  *timed_out = 0;
  if (nkeys >= DLPG__PROTO_MAX_FIELDS)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%zu keys exceed the TCP store's limit of %u",
                       nkeys, DLPG__PROTO_MAX_FIELDS - 1);
  const void **d = (const void **)malloc((nkeys + 1) * sizeof *d);
  size_t *l = (size_t *)malloc((nkeys + 1) * sizeof *l);
  if (!d || !l) {
    free(d);
    free(l);
    return dlpg__error(DLPG_ERR_SYSTEM, "out of memory for %zu keys", nkeys);
  }
  uint8_t ms[8];
  dlpg__put_u64(ms, (uint64_t)(timeout_s * 1000.0));
  d[0] = ms;
  l[0] = 8;
  for (size_t i = 0; i < nkeys; ++i) {
    d[i + 1] = keys[i];
    l[i + 1] = strlen(keys[i]);
  }
  dlpg__reply_t r;
  dlpg_status_t st = dlpg__tcp_call(t, DLPG__CMD_WAIT, nkeys + 1, d, l,
                                    dlpg__now() + timeout_s + DLPG__TCP_WAIT_GRACE_S, &r);
  free(d);
  free(l);
  if (st != DLPG_OK) return st;
  if (r.type == DLPG__REPLY_OK) {
    dlpg__reply_free(&r);
    return DLPG_OK;
  }
  if (r.type != DLPG__REPLY_TIMEOUT) return dlpg__tcp_unexpected(t, &r, "WAIT");
  *timed_out = 1;
  /* Name the missing keys, as many as the message holds (it is truncated with "..."). */
  char msg[DLPG__ERROR_MAX];
  size_t off = (size_t)snprintf(msg, sizeof msg, "timed out after %g s waiting for %s", total_s,
                                r.n == 1 ? "key" : "keys");
  for (size_t i = 0; i < r.n && off < sizeof msg; ++i)
    off += (size_t)snprintf(msg + off, sizeof msg - off, "%s'%.*s'", i ? ", " : " ",
                            (int)r.f[i].len, (const char *)r.f[i].data);
  if (off < sizeof msg) snprintf(msg + off, sizeof msg - off, " (store %s)", t->peer);
  dlpg__reply_free(&r);
  return dlpg__error(DLPG_ERR_TIMEOUT, "%s", msg);
}

/* Block until every key exists, in slices of at most DLPG__TCP_WAIT_SLICE_S. */
static dlpg_status_t dlpg__tcp_wait(void *impl, const char *const *keys, size_t nkeys,
                                    double timeout_s) {
  dlpg__tcp_store_t *t = (dlpg__tcp_store_t *)impl;
  if (nkeys == 0) return DLPG_OK;
  double deadline = dlpg__now() + timeout_s;
  for (;;) {
    double left = deadline - dlpg__now();
    double slice = left < DLPG__TCP_WAIT_SLICE_S ? left : DLPG__TCP_WAIT_SLICE_S;
    int timed_out = 0;
    dlpg_status_t st = dlpg__tcp_wait_once(t, keys, nkeys, slice > 0.001 ? slice : 0.001,
                                           timeout_s, &timed_out);
    if (!timed_out || slice >= left) return st;
  }
}

static dlpg_status_t dlpg__tcp_get(void *impl, const char *key, double timeout_s, void *buf,
                                   size_t cap, size_t *len) {
  dlpg__tcp_store_t *t = (dlpg__tcp_store_t *)impl;
  double deadline = dlpg__now() + timeout_s;
  const void *d[1] = {key};
  size_t l[1] = {strlen(key)};
  /* GET first (one round trip when the key is there, as in a rendezvous after a wait);
   * when it is missing, WAIT for it (or for the deadline) and GET again. */
  for (;;) {
    dlpg__reply_t r;
    DLPG_CHECK(dlpg__tcp_call(t, DLPG__CMD_GET, 1, d, l, dlpg__store_call_deadline(t->timeout_s), &r));
    if (r.type == DLPG__REPLY_NOT_FOUND) {
      dlpg__reply_free(&r);
      double left = deadline - dlpg__now();
      DLPG_CHECK(dlpg__tcp_wait(impl, &key, 1, left > 0.001 ? left : 0.001));
      continue;
    }
    if (r.type != DLPG__REPLY_OK || r.n != 1) return dlpg__tcp_unexpected(t, &r, "GET");
    size_t vlen = r.f[0].len;
    if (buf && cap) memcpy(buf, r.f[0].data, vlen < cap ? vlen : cap);
    *len = vlen;
    dlpg__reply_free(&r);
    return DLPG_OK;
  }
}

static dlpg_status_t dlpg__tcp_add(void *impl, const char *key, int64_t delta, int64_t *result) {
  dlpg__tcp_store_t *t = (dlpg__tcp_store_t *)impl;
  uint8_t dv[8];
  dlpg__put_u64(dv, (uint64_t)delta);
  const void *d[2] = {key, dv};
  size_t l[2] = {strlen(key), 8};
  dlpg__reply_t r;
  DLPG_CHECK(dlpg__tcp_call(t, DLPG__CMD_ADD, 2, d, l, dlpg__store_call_deadline(t->timeout_s), &r));
  if (r.type == DLPG__REPLY_ERROR && r.n == 1) {
    dlpg_status_t st = dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "cannot add %lld to key '%s': %.*s",
                                   (long long)delta, key, (int)r.f[0].len,
                                   (const char *)r.f[0].data);
    dlpg__reply_free(&r);
    return st;
  }
  if (r.type != DLPG__REPLY_OK || r.n != 1 || r.f[0].len != 8)
    return dlpg__tcp_unexpected(t, &r, "ADD");
  if (result) *result = (int64_t)dlpg__get_u64(r.f[0].data);
  dlpg__reply_free(&r);
  return DLPG_OK;
}

/* CHECK and DELETE both answer one byte. */
static dlpg_status_t dlpg__tcp_flag(dlpg__tcp_store_t *t, uint8_t cmd, const char *const *keys,
                                    size_t nkeys, int *flag) {
  if (nkeys >= DLPG__PROTO_MAX_FIELDS)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%zu keys exceed the TCP store's limit of %u",
                       nkeys, DLPG__PROTO_MAX_FIELDS - 1);
  const void **d = (const void **)malloc((nkeys ? nkeys : 1) * sizeof *d);
  size_t *l = (size_t *)malloc((nkeys ? nkeys : 1) * sizeof *l);
  if (!d || !l) {
    free(d);
    free(l);
    return dlpg__error(DLPG_ERR_SYSTEM, "out of memory for %zu keys", nkeys);
  }
  for (size_t i = 0; i < nkeys; ++i) {
    d[i] = keys[i];
    l[i] = strlen(keys[i]);
  }
  dlpg__reply_t r;
  dlpg_status_t st =
      dlpg__tcp_call(t, cmd, nkeys, d, l, dlpg__store_call_deadline(t->timeout_s), &r);
  free(d);
  free(l);
  if (st != DLPG_OK) return st;
  if (r.type != DLPG__REPLY_OK || r.n != 1 || r.f[0].len != 1)
    return dlpg__tcp_unexpected(t, &r, cmd == DLPG__CMD_CHECK ? "CHECK" : "DELETE");
  if (flag) *flag = r.f[0].data[0] != 0;
  dlpg__reply_free(&r);
  return DLPG_OK;
}

static dlpg_status_t dlpg__tcp_check(void *impl, const char *const *keys, size_t nkeys,
                                     int *all_exist) {
  return dlpg__tcp_flag((dlpg__tcp_store_t *)impl, DLPG__CMD_CHECK, keys, nkeys, all_exist);
}

static dlpg_status_t dlpg__tcp_delete(void *impl, const char *key, int *deleted) {
  return dlpg__tcp_flag((dlpg__tcp_store_t *)impl, DLPG__CMD_DELETE, &key, 1, deleted);
}

static int dlpg__tcp_port(void *impl) { return ((dlpg__tcp_store_t *)impl)->port; }

/* Close the client's connections first, then stop the server they talk to. */
static void dlpg__tcp_destroy(void *impl) {
  dlpg__tcp_store_t *t = (dlpg__tcp_store_t *)impl;
  if (!t) return;
  for (int i = 0; i < t->nidle; ++i) dlpg__tcp_close_conn(&t->idle[i]);
  if (t->server) dlpg__tcp_server_stop(t->server);
  pthread_mutex_destroy(&t->mu);
  free(t->host);
  if (t->token) {
    dlpg__auth_wipe(t->token, strlen(t->token));
    free(t->token);
  }
  free(t);
}

static const dlpg__store_vtbl_t dlpg__tcp_vtbl = {
    "tcp",          dlpg__tcp_set,    dlpg__tcp_get,  dlpg__tcp_add,    dlpg__tcp_wait,
    dlpg__tcp_check, dlpg__tcp_delete, dlpg__tcp_port, dlpg__tcp_destroy};

/* Connect, retrying with exponential backoff (10 ms doubling to 1 s) until deadline; a
 * refused token or a host name the resolver does not know (DLPG_ERR_INVALID_ARGUMENT) or a
 * server's refusal (a connection limit) is final. Without a token the connection completes one request (dlpg__tcp_ping) before it
 * goes to the pool, as an authenticated one completes its handshake. */
static dlpg_status_t dlpg__tcp_first_connect(dlpg__tcp_store_t *t, double timeout_s) {
  double deadline = dlpg__now() + timeout_s, backoff = 0.010;
  char last[DLPG__ERROR_MAX] = "";
  for (;;) {
    dlpg__tcp_conn_t c;
    int refused = 0;
    dlpg_status_t st = dlpg__tcp_connect(t, deadline, &c);
    if (st == DLPG_OK && !t->token) {
      st = dlpg__tcp_ping(t, &c, deadline, &refused);
      if (st != DLPG_OK) dlpg__tcp_close_conn(&c);
    }
    if (st == DLPG_OK) {
      dlpg__tcp_give(t, &c);
      return DLPG_OK;
    }
    if (st == DLPG_ERR_INVALID_ARGUMENT || refused) return st;
    snprintf(last, sizeof last, "%s", dlpg__last_error());
    double left = deadline - dlpg__now();
    if (left <= 0)
      return dlpg__error(DLPG_ERR_TIMEOUT, "cannot reach store server %s within %g s (last error: %s)",
                         t->peer, timeout_s, last);
    dlpg__sleep(backoff < left ? backoff : left);
    backoff = backoff * 2 > 1.0 ? 1.0 : backoff * 2;
  }
}

dlpg_status_t dlpg__tcp_store_open_ex(const char *connect_host, int port, const char *bind_host,
                                      const char *token, double timeout_s,
                                      const char *store_host, dlpg_store_t **out) {
  dlpg__tcp_store_t *t = (dlpg__tcp_store_t *)calloc(1, sizeof *t);
  if (!t) return dlpg__error(DLPG_ERR_SYSTEM, "out of memory");
  pthread_mutex_init(&t->mu, NULL);
  t->timeout_s = timeout_s;
  t->port = port;
  dlpg_status_t st = DLPG_OK;
  if (token && *token && !(t->token = strdup(token))) {
    st = dlpg__error(DLPG_ERR_SYSTEM, "out of memory");
    goto fail;
  }
  if (bind_host) {
    st = dlpg__tcp_server_start(bind_host, port, t->token, &t->server);
    if (st != DLPG_OK) goto fail;
    t->port = dlpg__tcp_server_port(t->server);
  }
  t->host = strdup(connect_host);
  if (!t->host) {
    st = dlpg__error(DLPG_ERR_SYSTEM, "out of memory");
    goto fail;
  }
  snprintf(t->peer, sizeof t->peer, "%s:%d", connect_host, t->port);
  DLPG_CHECK_GOTO(dlpg__tcp_first_connect(t, timeout_s), st, fail);
  if (t->server)
    DLPG_INFO(STORE, -1, "store client connected to %s (serving on %s, %s)", t->peer,
              dlpg__tcp_server_address(t->server), t->token ? "token required" : "no token");
  else
    DLPG_INFO(STORE, -1, "store client connected to %s", t->peer);
  return dlpg__store_new(&dlpg__tcp_vtbl, t, timeout_s, store_host ? store_host : connect_host,
                         out);
fail:
  dlpg__tcp_destroy(t);
  return st;
}

/* A wildcard bind address is not something to connect to: use the loopback for our own
 * client (the server listens there too). */
static int dlpg__is_wildcard(const char *h) {
  return !h[0] || strcmp(h, "0.0.0.0") == 0 || strcmp(h, "::") == 0 || strcmp(h, "*") == 0;
}

dlpg_status_t dlpg__tcp_store_open(const char *host, int port, int serve, const char *token,
                                   double timeout_s, dlpg_store_t **out) {
  const char *connect = host, *shown = NULL;
  char name[256];
  if (serve && dlpg__is_wildcard(host)) {
    connect = strcmp(host, "::") == 0 ? "::1" : "127.0.0.1";
    /* Other machines reach a wildcard server by this machine's name. */
    if (gethostname(name, sizeof name) == 0) {
      name[sizeof name - 1] = '\0';
      shown = name;
    }
  }
  return dlpg__tcp_store_open_ex(connect, port, serve ? host : NULL, token, timeout_s, shown, out);
}
