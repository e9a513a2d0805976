/* Reading one connection's frames and running them (tcp_server_conn.c queues and sends the
 * replies; tcp_server_cmds.c runs the commands): the handshake of an authenticated store,
 * each frame's MAC, and the back-pressure rule, under which a connection's requests are read
 * only while it may run them (no parked WAIT, fewer unread reply bytes than
 * DLPG_STORE_MAX_REPLY_BYTES), so a client that never reads its replies costs at most one
 * reply beyond that limit, and reading resumes as the replies drain.
 *
 * Memory: every recv lands in the server's one read buffer and the complete frames run from
 * there; only the bytes that cannot run yet (an unfinished frame) are copied into the
 * connection's own buffer, which grows with the bytes received (64 bytes, doubling, never
 * past the frame's announced length) and is freed once empty. A connection that has sent 5
 * bytes holds 64. Those buffers are bounded in total by DLPG_STORE_MAX_PENDING_BYTES: the
 * request whose growth would pass it is answered BUSY at once (a dlpg client retries until
 * its deadline, then reports DLPG_ERR_TIMEOUT naming the limit) and its remaining bytes are
 * dropped as they arrive; requests that arrive whole need no buffer and are never refused
 * for it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/log.h"
#include "base/status.h"
#include "store/tcp_server_internal.h"

/* Refuse the connection's authentication: say why, then close it. */
static void dlpg__conn_auth_fail(dlpg__tcp_server_t *s, dlpg__conn_t *c, const char *why) {
  if (dlpg__srv_may_warn(s))
    DLPG_WARN(STORE, -1, "store server: authentication failed for a client at %s: %s", c->peer,
              why);
  dlpg__srv_reply_msg(s, c, DLPG__REPLY_AUTH_FAILED, "authentication failed: %s", why);
  dlpg__conn_kill(s, c, "authentication failed");
}

/* HELLO then AUTH (tcp_auth.h), before anything else on a store with a token. */
static void dlpg__conn_handshake(dlpg__tcp_server_t *s, dlpg__conn_t *c, uint8_t type,
                                 const dlpg__field_t *f, size_t n) {
  if (c->auth_stage == DLPG__AUTH_WANT_HELLO) {
    if (type != DLPG__CMD_HELLO || n != 1 || f[0].len != DLPG__AUTH_NONCE) {
      dlpg__conn_auth_fail(s, c, "this store requires a token (set DLPG_STORE_TOKEN or add "
                                 "?token= to the store URL)");
      return;
    }
    uint8_t proof[DLPG__AUTH_MAC];
    memcpy(c->cn, f[0].data, DLPG__AUTH_NONCE);
    if (dlpg__auth_random(c->sn, sizeof c->sn) != 0 ||
        dlpg__auth_proof(s->token, "server", c->cn, c->sn, proof) != 0) {
      dlpg__conn_kill(s, c, "libcrypto failed");
      return;
    }
    const void *d[2] = {c->sn, proof};
    size_t l[2] = {DLPG__AUTH_NONCE, DLPG__AUTH_MAC};
    c->auth_stage = DLPG__AUTH_WANT_PROOF;
    dlpg__srv_reply(s, c, DLPG__REPLY_OK, 2, d, l);
    return;
  }
  uint8_t want[DLPG__AUTH_MAC];
  if (type != DLPG__CMD_AUTH || n != 1 || f[0].len != DLPG__AUTH_MAC) {
    dlpg__conn_auth_fail(s, c, "the client sent no proof after HELLO");
    return;
  }
  if (dlpg__auth_proof(s->token, "client", c->cn, c->sn, want) != 0) {
    dlpg__conn_kill(s, c, "libcrypto failed");
    return;
  }
  int ok = dlpg__auth_equal(want, f[0].data, DLPG__AUTH_MAC);
  dlpg__auth_wipe(want, sizeof want);
  if (!ok) {
    dlpg__conn_auth_fail(s, c, "the client's proof does not match this store's token "
                               "(DLPG_STORE_TOKEN or ?token= differ)");
    return;
  }
  if (dlpg__auth_start(&c->auth, s->token, c->cn, c->sn) != 0) {
    dlpg__conn_kill(s, c, "libcrypto failed");
    return;
  }
  c->auth_stage = DLPG__AUTH_DONE;
  dlpg__srv_reply(s, c, DLPG__REPLY_OK, 0, NULL, NULL); /* the first authenticated frame */
}

/* Check the MAC that follows the frame of total bytes (length and body) at p. */
static int dlpg__conn_check_mac(dlpg__conn_t *c, const uint8_t *p, size_t total) {
  uint8_t want[DLPG__AUTH_MAC];
  if (dlpg__auth_frame_mac(&c->auth, DLPG__AUTH_TO_SERVER, c->auth.received, p, total, want) != 0)
    return -1;
  if (!dlpg__auth_equal(want, p + total, DLPG__AUTH_MAC)) return -1;
  c->auth.received++;
  return 0;
}

/* A read buffer this small is never refused for the pending limit (a handshake frame fits;
 * all of them together stay under DLPG_STORE_MAX_CONNS x this). */
#define DLPG__RBUF_FLOOR 512u

/* Run the complete frames among the len bytes at p while c may; the bytes consumed. */
static size_t dlpg__conn_run(dlpg__tcp_server_t *s, dlpg__conn_t *c, const uint8_t *p, size_t len) {
  size_t used = 0;
  while (dlpg__conn_can_run(s, c) && len - used >= DLPG__PROTO_HEADER) {
    const uint8_t *f0 = p + used;
    uint32_t body = dlpg__get_u32(f0);
    size_t most = c->auth_stage == DLPG__AUTH_DONE ? DLPG__PROTO_MAX_BODY : DLPG__PROTO_MAX_AUTH_BODY;
    if (body < DLPG__PROTO_BODY_HEAD || body > most) {
      if (c->auth_stage != DLPG__AUTH_DONE)
        dlpg__conn_auth_fail(s, c, "this store requires a token (set DLPG_STORE_TOKEN or add "
                                   "?token= to the store URL)");
      dlpg__conn_kill(s, c, "frame length out of range");
      break;
    }
    size_t frame = DLPG__PROTO_HEADER + body, mac = c->auth.on ? DLPG__AUTH_MAC : 0;
    if (len - used < frame + mac) break;
    if (mac && dlpg__conn_check_mac(c, f0, frame) != 0) {
      dlpg__conn_kill(s, c, "a frame's MAC does not match (altered, replayed or injected)");
      break;
    }
    uint8_t type = 0;
    size_t n = 0;
    dlpg__field_t *f = NULL;
    int rc = dlpg__frame_parse(f0 + DLPG__PROTO_HEADER, body, &type, &n, &f);
    if (rc == 0 && c->auth_stage != DLPG__AUTH_DONE) dlpg__conn_handshake(s, c, type, f, n);
    else if (rc == 0) rc = dlpg__srv_handle(s, c, type, f, n);
    free(f);
    if (rc != 0) {
      dlpg__conn_kill(s, c, "malformed frame");
      break;
    }
    used += frame + mac;
    if (c->auth_stage == DLPG__AUTH_DONE) dlpg__conn_prove(s, c);
  }
  return used;
}

/* The stall clock of the unfinished frame (or of the request being dropped). */
static void dlpg__conn_frame_clock(dlpg__conn_t *c, int consumed) {
  if (!c->rbuf.len && !c->discard) c->frame_start = 0;
  else if (consumed || !c->frame_start) c->frame_start = dlpg__now();
}

/* The limit refuses to hold more of c's unfinished request (need bytes so far, of a frame
 * of total bytes, 0: not known): answer BUSY and drop the rest as it arrives; or, when that
 * cannot be done in order (requests wait before it) or the frame is invalid, close c. */
static void dlpg__conn_refuse_pending(dlpg__tcp_server_t *s, dlpg__conn_t *c, size_t total,
                                      size_t need) {
  size_t held = s->pending, lim = s->lim.max_pending_bytes;
  if (!total || !dlpg__conn_can_run(s, c)) {
    if (dlpg__srv_may_warn(s))
      DLPG_WARN(STORE, -1, "store server: closing the connection from %s: its unfinished "
                "requests cannot be held (%zu bytes held for all connections, the limit "
                "DLPG_STORE_MAX_PENDING_BYTES is %zu)", c->peer, held, lim);
    dlpg__conn_kill(s, c, "unfinished requests over DLPG_STORE_MAX_PENDING_BYTES");
    return;
  }
  if (dlpg__srv_may_warn(s))
    DLPG_WARN(STORE, -1, "store server: answering a %zu-byte request from %s BUSY and dropping "
              "it: %zu bytes of unfinished requests are held for all connections, the limit "
              "DLPG_STORE_MAX_PENDING_BYTES is %zu", total, c->peer, held, lim);
  c->discard = total - need;
  dlpg__conn_rbuf_free(s, c);
  if (c->auth.on) c->auth.received++; /* the dropped frame used its counter */
  c->frame_start = dlpg__now();
  dlpg__srv_reply_msg(s, c, DLPG__REPLY_BUSY,
                      "the store server holds %zu bytes of unfinished requests, its limit "
                      "DLPG_STORE_MAX_PENDING_BYTES is %zu: a %zu-byte request does not fit now",
                      held, lim, total);
}

/* Keep the n bytes at p that c cannot run yet, after those its buffer holds. 0: kept; -1:
 * not kept (c was refused, or closed). */
static int dlpg__conn_keep(dlpg__tcp_server_t *s, dlpg__conn_t *c, const uint8_t *p, size_t n) {
  dlpg__buf_t *b = &c->rbuf;
  size_t need = b->len + n;
  if (need > b->cap) {
    /* The length of the frame being assembled, once its length prefix has arrived. */
    uint8_t head[DLPG__PROTO_HEADER];
    size_t have = b->len < sizeof head ? b->len : sizeof head, total = 0;
    if (have) memcpy(head, b->data, have); /* (data is NULL while the buffer is empty) */
    memcpy(head + have, p, sizeof head - have < n ? sizeof head - have : n);
    if (need >= sizeof head) {
      uint32_t body = dlpg__get_u32(head);
      size_t most = c->auth_stage == DLPG__AUTH_DONE ? DLPG__PROTO_MAX_BODY : DLPG__PROTO_MAX_AUTH_BODY;
      if (body >= DLPG__PROTO_BODY_HEAD && body <= most)
        total = DLPG__PROTO_HEADER + body + (c->auth.on ? DLPG__AUTH_MAC : 0);
    }
    size_t ncap = b->cap ? b->cap : 64;
    while (ncap < need) ncap *= 2;
    if (total >= need && ncap > total) ncap = total;
    /* Growth past the limit is refused, except for bytes that complete the frame (they run
     * and are freed at once). */
    if (ncap > DLPG__RBUF_FLOOR && s->pending - b->cap + ncap > s->lim.max_pending_bytes &&
        !(total && total <= need)) {
      dlpg__conn_refuse_pending(s, c, total, need);
      return -1;
    }
    uint8_t *q = (uint8_t *)realloc(b->data, ncap);
    if (!q) {
      dlpg__conn_kill(s, c, "out of memory");
      return -1;
    }
    s->pending = s->pending - b->cap + ncap;
    b->data = q;
    b->cap = ncap;
  }
  memcpy(b->data + b->len, p, n);
  b->len += n;
  return 0;
}

void dlpg__conn_process(dlpg__tcp_server_t *s, dlpg__conn_t *c) {
  size_t used = c->rbuf.len ? dlpg__conn_run(s, c, c->rbuf.data, c->rbuf.len) : 0;
  if (used >= c->rbuf.len) dlpg__conn_rbuf_free(s, c);
  else if (used) dlpg__buf_consume(&c->rbuf, used);
  dlpg__conn_frame_clock(c, used > 0);
  dlpg__conn_update_events(s, c);
}

void dlpg__conn_read(dlpg__tcp_server_t *s, dlpg__conn_t *c) {
  /* Read while the connection may run what it sends; the rest waits in the kernel. */
  while (dlpg__conn_can_run(s, c)) {
    ssize_t got = recv(c->fd, s->scratch, sizeof s->scratch, 0);
    if (got > 0) {
      const uint8_t *p = s->scratch;
      size_t n = (size_t)got, used = 0;
      c->last_in = dlpg__now();
      if (c->discard) { /* the rest of a request refused for the pending limit */
        size_t d = c->discard < n ? c->discard : n;
        c->discard -= d;
        p += d;
        n -= d;
      }
      if (c->rbuf.len) {
        /* An unfinished frame is buffered: append, then run what is complete. */
        if (n && dlpg__conn_keep(s, c, p, n) == 0) dlpg__conn_process(s, c);
        continue;
      }
      if (n) used = dlpg__conn_run(s, c, p, n); /* straight from the read buffer */
      if (n > used && !c->dead) dlpg__conn_keep(s, c, p + used, n - used);
      if (!c->dead) dlpg__conn_frame_clock(c, used > 0);
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    dlpg__conn_kill(s, c, got == 0 ? "peer closed" : "recv failed");
    return;
  }
  dlpg__conn_update_events(s, c);
}
