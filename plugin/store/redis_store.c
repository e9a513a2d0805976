/* "redis://HOST:PORT[/DB][?token=SECRET]": the dlpg store on a Redis server, through
 * hiredis, for jobs that outgrow one store process or already run Redis. The token (or
 * DLPG_STORE_TOKEN) is sent with AUTH; DB is SELECTed. SET/GET/INCRBY/EXISTS/DEL map one to
 * one; a get or wait on missing keys polls EXISTS with backoff (1 ms doubling to 50 ms)
 * until its deadline, so it needs nothing from the server's configuration (no keyspace
 * notifications). One connection per store handle, serialised by a mutex held for one
 * command at a time (a waiting thread never blocks another's SET); a broken connection is
 * reopened on the next command. Redis's own limits and ACLs apply; docs/security.md. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "base/clock.h"
#include "base/status.h"
#include "store/store.h"
#include "store/store_internal.h"
#include "store/tcp_auth.h"

typedef struct dlpg__redis {
  pthread_mutex_t mu;
  redisContext *ctx; /* NULL: reconnect before the next command */
  char *host, *token;
  int port, db;
  char peer[300];
  double timeout_s;
} dlpg__redis_t;

static struct timeval dlpg__tv(double s) {
  struct timeval tv;
  if (s < 0.001) s = 0.001;
  tv.tv_sec = (time_t)s;
  tv.tv_usec = (suseconds_t)((s - (double)tv.tv_sec) * 1e6);
  return tv;
}

/* A reply that is an error: authentication problems are the caller's argument. */
static dlpg_status_t dlpg__redis_reply_error(dlpg__redis_t *r, const redisReply *rep,
                                             const char *what) {
  if (strncmp(rep->str, "NOAUTH", 6) == 0 || strncmp(rep->str, "WRONGPASS", 9) == 0 ||
      strstr(rep->str, "AUTH") != NULL)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "redis server %s: authentication failed (%s): %s; set DLPG_STORE_TOKEN or "
                       "?token= to the server's password", r->peer, what, rep->str);
  return dlpg__error(DLPG_ERR_REMOTE, "redis server %s: %s: %s", r->peer, what, rep->str);
}

/* Run one command (argv form, binary safe) on a live connection; *out is the reply (the
 * caller frees it), never an error reply. */
static dlpg_status_t dlpg__redis_cmd(dlpg__redis_t *r, int argc, const char **argv,
                                     const size_t *lens, const char *what, redisReply **out);

static dlpg_status_t dlpg__redis_connect(dlpg__redis_t *r) {
  redisContext *c = redisConnectWithTimeout(r->host, r->port, dlpg__tv(r->timeout_s));
  if (!c || c->err) {
    dlpg_status_t st = dlpg__error(DLPG_ERR_REMOTE, "cannot connect to redis server %s: %s",
                                   r->peer, c ? c->errstr : "out of memory");
    if (c) redisFree(c);
    return st;
  }
  redisSetTimeout(c, dlpg__tv(r->timeout_s));
  r->ctx = c;
  redisReply *rep = NULL;
  char db[16];
  snprintf(db, sizeof db, "%d", r->db);
  const char *auth[2] = {"AUTH", r->token};
  const char *sel[2] = {"SELECT", db};
  const char *ping[1] = {"PING"};
  dlpg_status_t st = DLPG_OK;
  if (r->token) st = dlpg__redis_cmd(r, 2, auth, NULL, "AUTH", &rep);
  if (rep) freeReplyObject(rep);
  rep = NULL;
  if (st == DLPG_OK && r->db) st = dlpg__redis_cmd(r, 2, sel, NULL, "SELECT", &rep);
  if (rep) freeReplyObject(rep);
  rep = NULL;
  /* PING: a server that wants a password says so now, not at the first key. */
  if (st == DLPG_OK) st = dlpg__redis_cmd(r, 1, ping, NULL, "PING", &rep);
  if (rep) freeReplyObject(rep);
  if (st != DLPG_OK && r->ctx) {
    redisFree(r->ctx);
    r->ctx = NULL;
  }
  return st;
}

static dlpg_status_t dlpg__redis_cmd(dlpg__redis_t *r, int argc, const char **argv,
                                     const size_t *lens, const char *what, redisReply **out) {
  *out = NULL;
  if (!r->ctx) DLPG_CHECK(dlpg__redis_connect(r));
  size_t l[8];
  if (!lens && argc <= 8) {
    for (int i = 0; i < argc; ++i) l[i] = strlen(argv[i]);
    lens = l;
  }
  redisReply *rep = (redisReply *)redisCommandArgv(r->ctx, argc, argv, lens);
  if (!rep) {
    dlpg_status_t st = dlpg__error(DLPG_ERR_REMOTE, "redis server %s: %s failed: %s", r->peer,
                                   what, r->ctx->errstr[0] ? r->ctx->errstr : "no reply");
    redisFree(r->ctx); /* broken: reopened by the next command */
    r->ctx = NULL;
    return st;
  }
  if (rep->type == REDIS_REPLY_ERROR) {
    dlpg_status_t st = dlpg__redis_reply_error(r, rep, what);
    freeReplyObject(rep);
    return st;
  }
  *out = rep;
  return DLPG_OK;
}

/* One command under the store's mutex. */
static dlpg_status_t dlpg__redis_run(dlpg__redis_t *r, int argc, const char **argv,
                                     const size_t *lens, const char *what, redisReply **out) {
  pthread_mutex_lock(&r->mu);
  dlpg_status_t st = dlpg__redis_cmd(r, argc, argv, lens, what, out);
  pthread_mutex_unlock(&r->mu);
  return st;
}

static dlpg_status_t dlpg__redis_set(void *impl, const char *key, const void *value, size_t len) {
  const char *argv[3] = {"SET", key, (const char *)value};
  size_t lens[3] = {3, strlen(key), len};
  redisReply *rep;
  DLPG_CHECK(dlpg__redis_run((dlpg__redis_t *)impl, 3, argv, lens, "SET", &rep));
  freeReplyObject(rep);
  return DLPG_OK;
}

/* How many of keys exist (EXISTS counts a repeated key each time). */
static dlpg_status_t dlpg__redis_exists(dlpg__redis_t *r, const char *const *keys, size_t nkeys,
                                        long long *count) {
  const char **argv = (const char **)malloc((nkeys + 1) * sizeof *argv);
  size_t *lens = (size_t *)malloc((nkeys + 1) * sizeof *lens);
  if (!argv || !lens) {
    free(argv);
    free(lens);
    return dlpg__error(DLPG_ERR_SYSTEM, "out of memory for %zu keys", nkeys);
  }
  argv[0] = "EXISTS";
  lens[0] = 6;
  for (size_t i = 0; i < nkeys; ++i) {
    argv[i + 1] = keys[i];
    lens[i + 1] = strlen(keys[i]);
  }
  redisReply *rep = NULL;
  dlpg_status_t st = dlpg__redis_run(r, (int)nkeys + 1, argv, lens, "EXISTS", &rep);
  free(argv);
  free(lens);
  if (st != DLPG_OK) return st;
  *count = rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1;
  freeReplyObject(rep);
  return DLPG_OK;
}

static dlpg_status_t dlpg__redis_wait(void *impl, const char *const *keys, size_t nkeys,
                                      double timeout_s) {
  dlpg__redis_t *r = (dlpg__redis_t *)impl;
  double deadline = dlpg__now() + timeout_s, backoff = 0.001;
  for (;;) {
    long long n = 0;
    DLPG_CHECK(dlpg__redis_exists(r, keys, nkeys, &n));
    if (n == (long long)nkeys) return DLPG_OK;
    double left = deadline - dlpg__now();
    if (left <= 0) break;
    dlpg__sleep(backoff < left ? backoff : left);
    backoff = backoff * 2 > 0.05 ? 0.05 : backoff * 2;
  }
  /* Name the keys still missing. */
  char msg[DLPG__ERROR_MAX];
  size_t off = (size_t)snprintf(msg, sizeof msg, "timed out after %g s waiting for key(s)",
                                timeout_s);
  for (size_t i = 0; i < nkeys && off < sizeof msg; ++i) {
    long long one = 0;
    if (dlpg__redis_exists(r, &keys[i], 1, &one) == DLPG_OK && one == 1) continue;
    off += (size_t)snprintf(msg + off, sizeof msg - off, " '%s'", keys[i]);
  }
  if (off < sizeof msg) snprintf(msg + off, sizeof msg - off, " (redis server %s)", r->peer);
  return dlpg__error(DLPG_ERR_TIMEOUT, "%s", msg);
}

static dlpg_status_t dlpg__redis_get(void *impl, const char *key, double timeout_s, void *buf,
                                     size_t cap, size_t *len) {
  dlpg__redis_t *r = (dlpg__redis_t *)impl;
  double deadline = dlpg__now() + timeout_s;
  for (;;) {
    const char *argv[2] = {"GET", key};
    redisReply *rep;
    DLPG_CHECK(dlpg__redis_run(r, 2, argv, NULL, "GET", &rep));
    if (rep->type == REDIS_REPLY_STRING) {
      size_t n = rep->len;
      if (buf && cap) memcpy(buf, rep->str, n < cap ? n : cap);
      *len = n;
      freeReplyObject(rep);
      return DLPG_OK;
    }
    int nil = rep->type == REDIS_REPLY_NIL;
    freeReplyObject(rep);
    if (!nil)
      return dlpg__error(DLPG_ERR_REMOTE, "redis server %s: GET '%s' answered a non-string",
                         r->peer, key);
    double left = deadline - dlpg__now();
    DLPG_CHECK(dlpg__redis_wait(impl, &key, 1, left > 0.001 ? left : 0.001));
  }
}

static dlpg_status_t dlpg__redis_add(void *impl, const char *key, int64_t delta,
                                     int64_t *result) {
  char d[32];
  snprintf(d, sizeof d, "%lld", (long long)delta);
  const char *argv[3] = {"INCRBY", key, d};
  redisReply *rep;
  dlpg_status_t st = dlpg__redis_run((dlpg__redis_t *)impl, 3, argv, NULL, "INCRBY", &rep);
  if (st == DLPG_ERR_REMOTE && strstr(dlpg__last_error(), "not an integer"))
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "cannot add %lld to key '%s': %s",
                       (long long)delta, key, dlpg__last_error());
  DLPG_CHECK(st);
  if (result) *result = rep->integer;
  freeReplyObject(rep);
  return DLPG_OK;
}

static dlpg_status_t dlpg__redis_check(void *impl, const char *const *keys, size_t nkeys,
                                       int *all_exist) {
  long long n = 0;
  DLPG_CHECK(dlpg__redis_exists((dlpg__redis_t *)impl, keys, nkeys, &n));
  *all_exist = n == (long long)nkeys;
  return DLPG_OK;
}

static dlpg_status_t dlpg__redis_delete(void *impl, const char *key, int *deleted) {
  const char *argv[2] = {"DEL", key};
  redisReply *rep;
  DLPG_CHECK(dlpg__redis_run((dlpg__redis_t *)impl, 2, argv, NULL, "DEL", &rep));
  if (deleted) *deleted = rep->type == REDIS_REPLY_INTEGER && rep->integer > 0;
  freeReplyObject(rep);
  return DLPG_OK;
}

static int dlpg__redis_port(void *impl) {
  (void)impl; /* not a TCP store: no port */
  return -1;
}

static void dlpg__redis_destroy(void *impl) {
  dlpg__redis_t *r = (dlpg__redis_t *)impl;
  if (!r) return;
  if (r->ctx) redisFree(r->ctx);
  if (r->token) {
    dlpg__auth_wipe(r->token, strlen(r->token));
    free(r->token);
  }
  free(r->host);
  pthread_mutex_destroy(&r->mu);
  free(r);
}

static const dlpg__store_vtbl_t dlpg__redis_vtbl = {
    "redis",           dlpg__redis_set,    dlpg__redis_get,  dlpg__redis_add,    dlpg__redis_wait,
    dlpg__redis_check, dlpg__redis_delete, dlpg__redis_port, dlpg__redis_destroy};

dlpg_status_t dlpg__redis_store_open(const char *host, int port, int db, const char *token,
                                     double timeout_s, dlpg_store_t **out) {
  dlpg__redis_t *r = (dlpg__redis_t *)calloc(1, sizeof *r);
  if (!r) return dlpg__error(DLPG_ERR_SYSTEM, "out of memory");
  pthread_mutex_init(&r->mu, NULL);
  r->port = port;
  r->db = db;
  r->timeout_s = timeout_s;
  r->host = strdup(host);
  r->token = token && *token ? strdup(token) : NULL;
  snprintf(r->peer, sizeof r->peer, "%s:%d", host, port);
  if (!r->host || (token && *token && !r->token)) {
    dlpg__redis_destroy(r);
    return dlpg__error(DLPG_ERR_SYSTEM, "out of memory");
  }
  /* The first connection retries (10 ms doubling to 1 s) until the timeout: the server may
   * still be starting. A refused password is final; a server not reached in time is the
   * open's deadline passing (DLPG_ERR_TIMEOUT), as for tcp://. */
  double deadline = dlpg__now() + timeout_s, backoff = 0.01;
  for (;;) {
    pthread_mutex_lock(&r->mu);
    dlpg_status_t st = dlpg__redis_connect(r);
    pthread_mutex_unlock(&r->mu);
    if (st == DLPG_OK) break;
    double left = deadline - dlpg__now();
    if (st == DLPG_ERR_INVALID_ARGUMENT || left <= 0) {
      if (st != DLPG_ERR_INVALID_ARGUMENT) {
        char last[DLPG__ERROR_MAX];
        snprintf(last, sizeof last, "%s", dlpg__last_error());
        st = dlpg__error(DLPG_ERR_TIMEOUT, "cannot reach redis server %s within %g s (last "
                         "error: %s)", r->peer, timeout_s, last);
      }
      dlpg__redis_destroy(r);
      return st;
    }
    dlpg__sleep(backoff < left ? backoff : left);
    backoff = backoff * 2 > 1.0 ? 1.0 : backoff * 2;
  }
  return dlpg__store_new(&dlpg__redis_vtbl, r, timeout_s, host, out);
}
