/* The TCP store client's connections: connect (and authenticate, tcp_auth.h), a pool shared
 * by the process's threads, and one request/reply exchange with MACs on an authenticated
 * connection. Every step is bounded by the caller's deadline. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "store/tcp_client_internal.h"

void dlpg__reply_free(dlpg__reply_t *r) {
  free(r->f);
  r->f = NULL;
  dlpg__buf_free(&r->body);
}

void dlpg__tcp_close_conn(dlpg__tcp_conn_t *c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  dlpg__auth_wipe(&c->auth, sizeof c->auth);
}

void dlpg__tcp_give(dlpg__tcp_store_t *t, dlpg__tcp_conn_t *c) {
  pthread_mutex_lock(&t->mu);
  if (t->nidle < DLPG__TCP_POOL_MAX) {
    t->idle[t->nidle++] = *c;
    c->fd = -1;
  }
  pthread_mutex_unlock(&t->mu);
  dlpg__tcp_close_conn(c);
}

/* Send one frame (already built in req), followed by its MAC on an authenticated conn. */
static dlpg_status_t dlpg__conn_send(dlpg__tcp_store_t *t, dlpg__tcp_conn_t *c,
                                     const dlpg__buf_t *req, double deadline) {
  DLPG_CHECK(dlpg__net_send_all(c->fd, req->data, req->len, deadline, t->peer));
  if (!c->auth.on) return DLPG_OK;
  uint8_t mac[DLPG__AUTH_MAC];
  if (dlpg__auth_frame_mac(&c->auth, DLPG__AUTH_TO_SERVER, c->auth.sent++, req->data, req->len,
                           mac) != 0)
    return dlpg__error(DLPG_ERR_SYSTEM, "libcrypto cannot compute a MAC");
  return dlpg__net_send_all(c->fd, mac, sizeof mac, deadline, t->peer);
}

/* Receive one reply frame (and check its MAC). *got_any: some of it arrived. */
static dlpg_status_t dlpg__conn_recv(dlpg__tcp_store_t *t, dlpg__tcp_conn_t *c, double deadline,
                                     dlpg__reply_t *r, int *got_any) {
  uint8_t head[DLPG__PROTO_HEADER];
  *got_any = 0;
  DLPG_CHECK(dlpg__net_recv_all(c->fd, head, sizeof head, deadline, t->peer));
  *got_any = 1;
  uint32_t blen = dlpg__get_u32(head);
  if (blen < DLPG__PROTO_BODY_HEAD || blen > DLPG__PROTO_MAX_BODY)
    return dlpg__error(DLPG_ERR_REMOTE, "store server %s sent a reply of %u bytes", t->peer, blen);
  size_t total = DLPG__PROTO_HEADER + blen, mac = c->auth.on ? DLPG__AUTH_MAC : 0;
  if (dlpg__buf_reserve(&r->body, total + mac) != 0)
    return dlpg__error(DLPG_ERR_SYSTEM, "out of memory for a reply of %u bytes", blen);
  memcpy(r->body.data, head, sizeof head);
  DLPG_CHECK(dlpg__net_recv_all(c->fd, r->body.data + sizeof head, blen + mac, deadline, t->peer));
  r->body.len = total;
  if (mac) {
    uint8_t want[DLPG__AUTH_MAC];
    if (dlpg__auth_frame_mac(&c->auth, DLPG__AUTH_TO_CLIENT, c->auth.received, r->body.data,
                             total, want) != 0 ||
        !dlpg__auth_equal(want, r->body.data + total, DLPG__AUTH_MAC))
      return dlpg__error(DLPG_ERR_REMOTE,
                         "a reply from store server %s failed authentication (altered, "
                         "replayed or injected on the way)", t->peer);
    c->auth.received++;
  }
  if (dlpg__frame_parse(r->body.data + sizeof head, blen, &r->type, &r->n, &r->f) != 0)
    return dlpg__error(DLPG_ERR_REMOTE, "store server %s sent a malformed reply", t->peer);
  return DLPG_OK;
}

/* One frame out, one back, on connection c. */
static dlpg_status_t dlpg__conn_exchange(dlpg__tcp_store_t *t, dlpg__tcp_conn_t *c, uint8_t type,
                                         size_t n, const void *const *data, const size_t *lens,
                                         double deadline, dlpg__reply_t *r, int *got_any) {
  dlpg__buf_t req = {0};
  *got_any = 0;
  if (dlpg__frame_append(&req, type, n, data, lens) != 0) {
    dlpg__buf_free(&req);
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "request of %zu fields exceeds the store protocol's limits (%u fields, "
                       "%u bytes) or memory ran out",
                       n, DLPG__PROTO_MAX_FIELDS, DLPG__PROTO_MAX_BODY);
  }
  dlpg_status_t st = dlpg__conn_send(t, c, &req, deadline);
  dlpg__buf_free(&req);
  if (st == DLPG_OK) return dlpg__conn_recv(t, c, deadline, r, got_any);
  /* A server that refuses a connection (a limit) says why, then closes: read that. */
  if (st == DLPG_ERR_REMOTE && !c->auth.on) {
    dlpg__saved_error_t se;
    dlpg__error_save(&se);
    double soon = dlpg__now() + 0.05;
    if (dlpg__conn_recv(t, c, soon < deadline ? soon : deadline, r, got_any) == DLPG_OK &&
        (r->type == DLPG__REPLY_ERROR || r->type == DLPG__REPLY_AUTH_FAILED))
      return DLPG_OK;
    dlpg__reply_free(r);
    *got_any = 0;
    st = dlpg__error_restore(&se, st);
  }
  return st;
}

/* A reply that refuses the connection (AUTH_FAILED, or ERROR before any command). */
static dlpg_status_t dlpg__refused(dlpg__tcp_store_t *t, const dlpg__reply_t *r) {
  int len = r->n == 1 ? (int)r->f[0].len : 0;
  const char *msg = r->n == 1 ? (const char *)r->f[0].data : "";
  if (r->type == DLPG__REPLY_AUTH_FAILED)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "store server %s: %.*s", t->peer, len, msg);
  return dlpg__error(DLPG_ERR_REMOTE, "store server %s refused the connection: %.*s", t->peer,
                     len, msg);
}

/* HELLO and AUTH (tcp_auth.h); on success c's session is on. */
static dlpg_status_t dlpg__handshake(dlpg__tcp_store_t *t, dlpg__tcp_conn_t *c, double deadline) {
  uint8_t cn[DLPG__AUTH_NONCE], want[DLPG__AUTH_MAC], proof[DLPG__AUTH_MAC];
  if (dlpg__auth_random(cn, sizeof cn) != 0)
    return dlpg__error(DLPG_ERR_SYSTEM, "libcrypto cannot make a nonce");
  const void *d[1] = {cn};
  size_t l[1] = {sizeof cn};
  dlpg__reply_t r = {0};
  int got = 0;
  DLPG_CHECK(dlpg__conn_exchange(t, c, DLPG__CMD_HELLO, 1, d, l, deadline, &r, &got));
  dlpg_status_t st = DLPG_OK;
  if (r.type != DLPG__REPLY_OK) {
    st = dlpg__refused(t, &r);
  } else if (r.n != 2 || r.f[0].len != DLPG__AUTH_NONCE || r.f[1].len != DLPG__AUTH_MAC) {
    st = dlpg__error(DLPG_ERR_REMOTE, "store server %s answered HELLO with %zu fields", t->peer,
                     r.n);
  } else if (dlpg__auth_proof(t->token, "server", cn, r.f[0].data, want) != 0 ||
             dlpg__auth_proof(t->token, "client", cn, r.f[0].data, proof) != 0) {
    st = dlpg__error(DLPG_ERR_SYSTEM, "libcrypto cannot compute an HMAC");
  } else if (!dlpg__auth_equal(want, r.f[1].data, DLPG__AUTH_MAC)) {
    st = dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                     "store server %s: authentication failed: the server does not hold this "
                     "client's token (DLPG_STORE_TOKEN or ?token= differ)", t->peer);
  } else if (dlpg__auth_start(&c->auth, t->token, cn, r.f[0].data) != 0) {
    st = dlpg__error(DLPG_ERR_SYSTEM, "libcrypto cannot derive the session key");
  }
  dlpg__reply_free(&r);
  if (st != DLPG_OK) return st;
  /* The proof goes out before the session (its MACs) starts on the client's side. */
  c->auth.on = 0;
  d[0] = proof;
  l[0] = sizeof proof;
  dlpg__buf_t req = {0};
  if (dlpg__frame_append(&req, DLPG__CMD_AUTH, 1, d, l) != 0) {
    dlpg__buf_free(&req);
    return dlpg__error(DLPG_ERR_SYSTEM, "out of memory");
  }
  st = dlpg__net_send_all(c->fd, req.data, req.len, deadline, t->peer);
  dlpg__buf_free(&req);
  dlpg__auth_wipe(proof, sizeof proof);
  c->auth.on = 1;
  if (st == DLPG_OK) st = dlpg__conn_recv(t, c, deadline, &r, &got);
  if (st == DLPG_OK && r.type != DLPG__REPLY_OK) st = dlpg__refused(t, &r);
  dlpg__reply_free(&r);
  return st;
}

dlpg_status_t dlpg__tcp_ping(dlpg__tcp_store_t *t, dlpg__tcp_conn_t *c, double deadline,
                             int *refused) {
  dlpg__reply_t r = {0};
  int got = 0;
  *refused = 0;
  DLPG_CHECK(dlpg__conn_exchange(t, c, DLPG__CMD_CHECK, 0, NULL, NULL, deadline, &r, &got));
  dlpg_status_t st = DLPG_OK;
  if (r.type == DLPG__REPLY_ERROR || r.type == DLPG__REPLY_AUTH_FAILED) {
    *refused = 1;
    st = dlpg__refused(t, &r);
  } else if (r.type != DLPG__REPLY_OK) {
    st = dlpg__error(DLPG_ERR_REMOTE, "store server %s answered CHECK with reply type %u",
                     t->peer, r.type);
  }
  dlpg__reply_free(&r);
  return st;
}

dlpg_status_t dlpg__tcp_connect(dlpg__tcp_store_t *t, double deadline, dlpg__tcp_conn_t *c) {
  memset(c, 0, sizeof *c);
  c->fd = -1;
  DLPG_CHECK(dlpg__net_connect_once(t->host, t->port, deadline, &c->fd));
  if (!t->token) return DLPG_OK;
  dlpg_status_t st = dlpg__handshake(t, c, deadline);
  if (st != DLPG_OK) dlpg__tcp_close_conn(c);
  return st;
}

/* A pooled connection the server has not closed meanwhile (an idle connection has nothing
 * to read: readable means closed), else a new one. *pooled says which. */
static dlpg_status_t dlpg__tcp_take(dlpg__tcp_store_t *t, double deadline, dlpg__tcp_conn_t *c,
                                    int *pooled) {
  for (;;) {
    pthread_mutex_lock(&t->mu);
    int have = t->nidle > 0;
    if (have) *c = t->idle[--t->nidle];
    pthread_mutex_unlock(&t->mu);
    if (!have) break;
    struct pollfd p = {c->fd, POLLIN, 0};
    if (poll(&p, 1, 0) == 0) {
      *pooled = 1;
      return DLPG_OK;
    }
    dlpg__tcp_close_conn(c);
  }
  *pooled = 0;
  dlpg_status_t st = dlpg__tcp_connect(t, deadline, c);
  if (st == DLPG_ERR_SYSTEM) st = DLPG_ERR_REMOTE; /* refused or unreachable: the server left */
  return st == DLPG_OK ? st : dlpg__error(st, "%s", dlpg__last_error());
}

dlpg_status_t dlpg__tcp_call(dlpg__tcp_store_t *t, uint8_t type, size_t n,
                             const void *const *data, const size_t *lens, double deadline,
                             dlpg__reply_t *r) {
  memset(r, 0, sizeof *r);
  double backoff = 0.005;
  int resent = 0;
  for (;;) {
    dlpg__tcp_conn_t c;
    int pooled = 0, got = 0;
    DLPG_CHECK(dlpg__tcp_take(t, deadline, &c, &pooled));
    dlpg_status_t st = dlpg__conn_exchange(t, &c, type, n, data, lens, deadline, r, &got);
    if (st != DLPG_OK) {
      dlpg__tcp_close_conn(&c);
      dlpg__reply_free(r);
      /* Closed by the server just as we sent (idle timeout): nothing ran unless it was the
       * request itself that was cut, so resend once, except ADD (not idempotent). */
      if (st == DLPG_ERR_REMOTE && pooled && !got && !resent && type != DLPG__CMD_ADD) {
        resent = 1;
        continue;
      }
      return st;
    }
    if (r->type == DLPG__REPLY_AUTH_FAILED) {
      dlpg__tcp_close_conn(&c);
      st = dlpg__refused(t, r);
      dlpg__reply_free(r);
      return st;
    }
    dlpg__tcp_give(t, &c);
    if (r->type != DLPG__REPLY_BUSY) return DLPG_OK;
    double left = deadline - dlpg__now();
    if (left <= backoff) {
      st = dlpg__error(DLPG_ERR_TIMEOUT, "store server %s stayed busy until the deadline: %.*s",
                       t->peer, r->n == 1 ? (int)r->f[0].len : 0,
                       r->n == 1 ? (const char *)r->f[0].data : "");
      dlpg__reply_free(r);
      return st;
    }
    dlpg__reply_free(r);
    dlpg__sleep(backoff);
    backoff = backoff * 2 > 0.5 ? 0.5 : backoff * 2;
  }
}
