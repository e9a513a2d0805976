/* One connection of the TCP store server: queuing and sending its replies, closing it, and
 * the back-pressure rule (whether it may run its next request), which decides when its
 * socket is watched for reading. Reading and running its frames is tcp_server_frames.c,
 * which sits above this file and the commands (tcp_server_cmds.c) that reply through it. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "base/log.h"
#include "base/status.h"
#include "store/tcp_server_internal.h"

static void dlpg__conn_unlist_unproven(dlpg__tcp_server_t *s, dlpg__conn_t *c) {
  if (c->uprev) c->uprev->unext = c->unext;
  else if (s->unproven_old == c) s->unproven_old = c->unext;
  if (c->unext) c->unext->uprev = c->uprev;
  else if (s->unproven_new == c) s->unproven_new = c->uprev;
  c->uprev = c->unext = NULL;
}

void dlpg__conn_list_unproven(dlpg__tcp_server_t *s, dlpg__conn_t *c) {
  c->uprev = s->unproven_new;
  c->unext = NULL;
  if (s->unproven_new) s->unproven_new->unext = c;
  else s->unproven_old = c;
  s->unproven_new = c;
}

void dlpg__conn_prove(dlpg__tcp_server_t *s, dlpg__conn_t *c) {
  if (c->proven || c->dead) return;
  c->proven = 1;
  dlpg__conn_unlist_unproven(s, c);
}

void dlpg__conn_rbuf_free(dlpg__tcp_server_t *s, dlpg__conn_t *c) {
  s->pending -= c->rbuf.cap;
  dlpg__buf_free(&c->rbuf);
}

void dlpg__conn_kill(dlpg__tcp_server_t *s, dlpg__conn_t *c, const char *why) {
  if (c->dead) return;
  DLPG_INFO(STORE, -1, "store server: closing connection from %s: %s", c->peer, why);
  /* Off the unproven list at once, so an eviction never picks it twice. */
  if (!c->proven) dlpg__conn_unlist_unproven(s, c);
  s->ndying++;
  c->dead = 1;
  c->dnext = s->dead; /* freed at the end of the loop iteration */
  s->dead = c;
}

int dlpg__srv_may_warn(dlpg__tcp_server_t *s) {
  double now = dlpg__now();
  if (now - s->last_warn < 1.0) {
    s->warns_dropped++;
    return 0;
  }
  if (s->warns_dropped)
    DLPG_WARN(STORE, -1, "store server: %lu similar warnings in the last second not shown",
              s->warns_dropped);
  s->last_warn = now;
  s->warns_dropped = 0;
  return 1;
}

void dlpg__conn_clear_wait(dlpg__tcp_server_t *s, dlpg__conn_t *c) {
  dlpg__widx_clear(&s->waiters, &c->wait);
  c->waiting = 0;
}

int dlpg__conn_can_run(const dlpg__tcp_server_t *s, const dlpg__conn_t *c) {
  return !c->dead && !c->waiting && c->wbuf.len < s->lim.max_reply_bytes;
}

void dlpg__conn_update_events(dlpg__tcp_server_t *s, dlpg__conn_t *c) {
  if (c->dead) return;
  /* RDHUP stays registered while reading pauses, so a client that leaves is noticed. */
  unsigned ev = EPOLLRDHUP;
  if (dlpg__conn_can_run(s, c)) ev |= EPOLLIN;
  if (c->wbuf.len) ev |= EPOLLOUT;
  if (ev == c->events) return;
  struct epoll_event e;
  e.events = ev;
  e.data.ptr = c;
  if (epoll_ctl(s->ep_fd, EPOLL_CTL_MOD, c->fd, &e) == 0) c->events = ev;
  else dlpg__conn_kill(s, c, "epoll_ctl failed");
}

void dlpg__conn_flush(dlpg__tcp_server_t *s, dlpg__conn_t *c) {
  size_t off = 0;
  while (off < c->wbuf.len && !c->dead) {
    ssize_t n = send(c->fd, c->wbuf.data + off, c->wbuf.len - off, MSG_NOSIGNAL);
    if (n > 0) off += (size_t)n;
    else if (n < 0 && errno == EINTR) continue;
    else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    else dlpg__conn_kill(s, c, "send failed");
  }
  if (off) c->last_out = dlpg__now();
  dlpg__buf_consume(&c->wbuf, off);
  if (!c->wbuf.len) dlpg__buf_free(&c->wbuf); /* an idle connection holds no buffer */
  s->queued = s->queued - c->counted + c->wbuf.len;
  c->counted = c->wbuf.len;
  dlpg__conn_update_events(s, c);
}

void dlpg__srv_reply(dlpg__tcp_server_t *s, dlpg__conn_t *c, uint8_t type, size_t n,
                     const void *const *data, const size_t *lens) {
  size_t start = c->wbuf.len;
  if (dlpg__frame_append(&c->wbuf, type, n, data, lens) != 0) {
    dlpg__conn_kill(s, c, "out of memory for a reply");
    return;
  }
  if (c->auth.on) {
    uint8_t mac[DLPG__AUTH_MAC];
    if (dlpg__auth_frame_mac(&c->auth, DLPG__AUTH_TO_CLIENT, c->auth.sent++, c->wbuf.data + start,
                             c->wbuf.len - start, mac) != 0 ||
        dlpg__buf_append(&c->wbuf, mac, sizeof mac) != 0) {
      dlpg__conn_kill(s, c, "cannot authenticate a reply");
      return;
    }
  }
  if (start == 0) c->last_out = dlpg__now(); /* the stall clock starts with the first byte */
  dlpg__conn_flush(s, c);
}

void dlpg__srv_reply_msg(dlpg__tcp_server_t *s, dlpg__conn_t *c, uint8_t type, const char *fmt,
                         ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const void *d[1] = {msg};
  size_t l[1] = {n < 0 ? 0 : (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1};
  dlpg__srv_reply(s, c, type, 1, d, l);
}
