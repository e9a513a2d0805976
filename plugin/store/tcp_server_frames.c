/* Reading one connection's frames and running them (tcp_server_conn.c queues and sends the
 * replies; tcp_server_cmds.c runs the commands): the handshake of an authenticated store,
 * each frame's MAC, and the back-pressure rule, under which a connection's requests are read
 * only while it may run them (no parked WAIT, fewer unread reply bytes than
 * DLPG_STORE_MAX_REPLY_BYTES), so a client that never reads its replies costs at most one
 * reply beyond that limit, and reading resumes as the replies drain. */
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

void dlpg__conn_process(dlpg__tcp_server_t *s, dlpg__conn_t *c) {
  int consumed = 0;
  while (dlpg__conn_can_run(s, c) && c->rbuf.len >= DLPG__PROTO_HEADER) {
    uint32_t body = dlpg__get_u32(c->rbuf.data);
    size_t most = c->auth_stage == DLPG__AUTH_DONE ? DLPG__PROTO_MAX_BODY : DLPG__PROTO_MAX_AUTH_BODY;
    if (body < DLPG__PROTO_BODY_HEAD || body > most) {
      if (c->auth_stage != DLPG__AUTH_DONE)
        dlpg__conn_auth_fail(s, c, "this store requires a token (set DLPG_STORE_TOKEN or add "
                                   "?token= to the store URL)");
      dlpg__conn_kill(s, c, "frame length out of range");
      break;
    }
    size_t frame = DLPG__PROTO_HEADER + body, mac = c->auth.on ? DLPG__AUTH_MAC : 0;
    if (c->rbuf.len < frame + mac) break;
    if (mac && dlpg__conn_check_mac(c, c->rbuf.data, frame) != 0) {
      dlpg__conn_kill(s, c, "a frame's MAC does not match (altered, replayed or injected)");
      break;
    }
    uint8_t type = 0;
    size_t n = 0;
    dlpg__field_t *f = NULL;
    int rc = dlpg__frame_parse(c->rbuf.data + DLPG__PROTO_HEADER, body, &type, &n, &f);
    if (rc == 0 && c->auth_stage != DLPG__AUTH_DONE) dlpg__conn_handshake(s, c, type, f, n);
    else if (rc == 0) rc = dlpg__srv_handle(s, c, type, f, n);
    free(f);
    if (rc != 0) {
      dlpg__conn_kill(s, c, "malformed frame");
      break;
    }
    dlpg__buf_consume(&c->rbuf, frame + mac);
    consumed = 1;
  }
  if (!c->rbuf.len) c->frame_start = 0;
  else if (consumed || !c->frame_start) c->frame_start = dlpg__now();
  dlpg__conn_update_events(s, c);
}

void dlpg__conn_read(dlpg__tcp_server_t *s, dlpg__conn_t *c) {
  /* Read while the connection may run what it sends; the rest waits in the kernel. */
  while (dlpg__conn_can_run(s, c)) {
    if (dlpg__buf_reserve(&c->rbuf, c->rbuf.len + 65536) != 0) {
      dlpg__conn_kill(s, c, "out of memory");
      return;
    }
    ssize_t n = recv(c->fd, c->rbuf.data + c->rbuf.len, c->rbuf.cap - c->rbuf.len, 0);
    if (n > 0) {
      c->rbuf.len += (size_t)n;
      c->last_in = dlpg__now();
      dlpg__conn_process(s, c);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    dlpg__conn_kill(s, c, n == 0 ? "peer closed" : "recv failed");
    return;
  }
  dlpg__conn_update_events(s, c);
}
