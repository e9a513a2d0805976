/* The dlpg TCP store server: one thread, epoll, non-blocking sockets, a read and a write
 * buffer per connection (protocol in tcp_proto.h). WAIT requests are parked on their
 * connection with a deadline; every SET/ADD re-checks the parked waiters, and the epoll
 * timeout is the nearest deadline, so a WAIT is answered as soon as its keys exist or with
 * TIMEOUT at its deadline. A connection that sends a malformed or oversized frame is closed
 * alone; the server stays up for the others. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "core/status.h"
#include "store/tcp_server_internal.h"

/* epoll tags for the two non-connection descriptors. */
static char dlpg__tag_listen, dlpg__tag_wake;

void dlpg__conn_clear_wait(dlpg__conn_t *c) {
  for (size_t i = 0; i < c->nwkeys; ++i) free(c->wkeys[i]);
  free(c->wkeys);
  free(c->wlens);
  c->wkeys = NULL;
  c->wlens = NULL;
  c->nwkeys = 0;
  c->waiting = 0;
}

static void dlpg__conn_free(dlpg__tcp_server_t *s, dlpg__conn_t *c) {
  if (c->prev) c->prev->next = c->next;
  else s->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  epoll_ctl(s->ep_fd, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  dlpg__buf_free(&c->rbuf);
  dlpg__buf_free(&c->wbuf);
  dlpg__conn_clear_wait(c);
  free(c);
}

void dlpg__conn_kill(dlpg__conn_t *c, const char *why) {
  if (!c->dead) DLPG_INFO(STORE, -1, "store server: closing connection fd %d: %s", c->fd, why);
  c->dead = 1;
}

static void dlpg__conn_set_out(dlpg__tcp_server_t *s, dlpg__conn_t *c, int want) {
  if (c->want_out == want) return;
  struct epoll_event ev;
  ev.events = EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0);
  ev.data.ptr = c;
  if (epoll_ctl(s->ep_fd, EPOLL_CTL_MOD, c->fd, &ev) == 0) c->want_out = want;
  else dlpg__conn_kill(c, "epoll_ctl failed");
}

void dlpg__conn_flush(dlpg__tcp_server_t *s, dlpg__conn_t *c) {
  size_t off = 0;
  while (off < c->wbuf.len) {
    ssize_t n = send(c->fd, c->wbuf.data + off, c->wbuf.len - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += (size_t)n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;
    } else {
      dlpg__conn_kill(c, "send failed");
      return;
    }
  }
  dlpg__buf_consume(&c->wbuf, off);
  dlpg__conn_set_out(s, c, c->wbuf.len > 0);
}

/* Run the complete frames buffered on c, until it parks a WAIT or has too much unsent. */
static void dlpg__conn_process(dlpg__tcp_server_t *s, dlpg__conn_t *c) {
  while (!c->dead && !c->waiting && c->rbuf.len >= DLPG__PROTO_HEADER &&
         c->wbuf.len <= DLPG__PROTO_MAX_BODY) {
    uint32_t body = dlpg__get_u32(c->rbuf.data);
    if (body < DLPG__PROTO_BODY_HEAD || body > DLPG__PROTO_MAX_BODY) {
      dlpg__conn_kill(c, "frame length out of range");
      return;
    }
    if (c->rbuf.len < DLPG__PROTO_HEADER + body) return;
    uint8_t type = 0;
    size_t n = 0;
    dlpg__field_t *f = NULL;
    int rc = dlpg__frame_parse(c->rbuf.data + DLPG__PROTO_HEADER, body, &type, &n, &f);
    if (rc == 0) rc = dlpg__srv_handle(s, c, type, f, n);
    free(f);
    if (rc != 0) {
      dlpg__conn_kill(c, "malformed frame");
      return;
    }
    dlpg__buf_consume(&c->rbuf, DLPG__PROTO_HEADER + body);
  }
}

static void dlpg__conn_read(dlpg__tcp_server_t *s, dlpg__conn_t *c) {
  for (;;) {
    /* Never buffer more than one whole frame beyond what is being processed. */
    if (c->rbuf.len >= 2 * (DLPG__PROTO_HEADER + (size_t)DLPG__PROTO_MAX_BODY)) {
      dlpg__conn_kill(c, "too much pipelined input");
      return;
    }
    if (dlpg__buf_reserve(&c->rbuf, c->rbuf.len + 65536) != 0) {
      dlpg__conn_kill(c, "out of memory");
      return;
    }
    ssize_t n = recv(c->fd, c->rbuf.data + c->rbuf.len, c->rbuf.cap - c->rbuf.len, 0);
    if (n > 0) {
      c->rbuf.len += (size_t)n;
      dlpg__conn_process(s, c);
      if (c->dead) return;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    dlpg__conn_kill(c, n == 0 ? "peer closed" : "recv failed");
    return;
  }
}

static void dlpg__accept_all(dlpg__tcp_server_t *s) {
  for (;;) {
    int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        DLPG_WARN(STORE, -1, "store server: accept on port %d: %s (pausing accepts)", s->port,
                  strerror(errno));
        if (epoll_ctl(s->ep_fd, EPOLL_CTL_DEL, s->listen_fd, NULL) == 0)
          s->accept_resume_at = dlpg__now() + 0.1;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
        DLPG_WARN(STORE, -1, "store server: accept on port %d: %s", s->port, strerror(errno));
      }
      return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    dlpg__conn_t *c = (dlpg__conn_t *)calloc(1, sizeof *c);
    if (!c) {
      close(fd);
      continue;
    }
    c->fd = fd;
    struct epoll_event ev;
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.ptr = c;
    if (epoll_ctl(s->ep_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
      close(fd);
      free(c);
      continue;
    }
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
  }
}

/* Answer parked WAITs whose keys now exist or whose deadline has passed, and resume the
 * frames their connections buffered meanwhile. Returns the nearest remaining deadline
 * (or a negative value when nobody waits). */
static double dlpg__service_waiters(dlpg__tcp_server_t *s) {
  double nearest = -1;
  int again = 1;
  while (again) {
    again = 0;
    s->dirty = 0;
    double now = dlpg__now();
    nearest = -1;
    for (dlpg__conn_t *c = s->conns; c; c = c->next) {
      if (!c->waiting || c->dead) continue;
      size_t nmiss = 0;
      /* Keep only the keys still missing, in their order. */
      for (size_t i = 0; i < c->nwkeys; ++i) {
        if (dlpg__kv_find(&s->kv, c->wkeys[i], c->wlens[i])) {
          free(c->wkeys[i]);
          continue;
        }
        c->wkeys[nmiss] = c->wkeys[i];
        c->wlens[nmiss] = c->wlens[i];
        nmiss++;
      }
      c->nwkeys = nmiss;
      if (nmiss == 0) {
        dlpg__conn_clear_wait(c);
        dlpg__srv_reply(s, c, DLPG__REPLY_OK, 0, NULL, NULL);
      } else if (c->deadline <= now) {
        dlpg__srv_reply(s, c, DLPG__REPLY_TIMEOUT, nmiss, (const void *const *)c->wkeys, c->wlens);
        dlpg__conn_clear_wait(c);
      } else {
        if (nearest < 0 || c->deadline < nearest) nearest = c->deadline;
        continue;
      }
      dlpg__conn_process(s, c);
      if (s->dirty) again = 1;
    }
  }
  return nearest;
}

static void *dlpg__server_main(void *arg) {
  dlpg__tcp_server_t *s = (dlpg__tcp_server_t *)arg;
  struct epoll_event evs[64];
  int timeout_ms = -1;
  while (!atomic_load(&s->stop)) {
    int n = epoll_wait(s->ep_fd, evs, 64, timeout_ms);
    if (n < 0 && errno != EINTR) {
      DLPG_WARN(STORE, -1, "store server: epoll_wait: %s", strerror(errno));
      break;
    }
    for (int i = 0; i < n; ++i) {
      void *p = evs[i].data.ptr;
      if (p == &dlpg__tag_listen) {
        dlpg__accept_all(s);
      } else if (p == &dlpg__tag_wake) {
        uint64_t v;
        if (read(s->wake_fd, &v, sizeof v) < 0) { /* nothing to do: the flag decides */
        }
      } else {
        dlpg__conn_t *c = (dlpg__conn_t *)p;
        if (c->dead) continue;
        if (evs[i].events & EPOLLOUT) {
          dlpg__conn_flush(s, c);
          dlpg__conn_process(s, c);
        }
        if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) dlpg__conn_read(s, c);
      }
    }
    double nearest = dlpg__service_waiters(s);
    for (dlpg__conn_t *c = s->conns, *next; c; c = next) {
      next = c->next;
      if (c->dead) dlpg__conn_free(s, c);
    }
    if (nearest < 0) {
      timeout_ms = -1;
    } else {
      double left = nearest - dlpg__now();
      /* A WAIT may park for up to a year: cap the sleep so the conversion fits an int. */
      if (left > 86400.0) left = 86400.0;
      timeout_ms = left <= 0 ? 0 : (int)(left * 1000.0) + 1;
    }
    if (s->accept_resume_at > 0) {
      /* Accept again 100 ms after running out of descriptors. */
      double left = s->accept_resume_at - dlpg__now();
      if (left <= 0) {
        struct epoll_event ev;
        ev.events = EPOLLIN;
        ev.data.ptr = &dlpg__tag_listen;
        if (epoll_ctl(s->ep_fd, EPOLL_CTL_ADD, s->listen_fd, &ev) == 0) s->accept_resume_at = 0;
        left = 0.1;
      }
      int ms = (int)(left * 1000.0) + 1;
      if (timeout_ms < 0 || timeout_ms > ms) timeout_ms = ms;
    }
  }
  return NULL;
}

dlpg_status_t dlpg__tcp_server_start(const char *host, int port, dlpg__tcp_server_t **out) {
  if (!out) return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "dlpg__tcp_server_start: out is NULL");
  if (port < 0 || port > 65535)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "dlpg__tcp_server_start: port %d is outside [0, 65535]", port);
  dlpg__tcp_server_t *s = (dlpg__tcp_server_t *)calloc(1, sizeof *s);
  if (!s) return dlpg__error(DLPG_ERR_SYSTEM, "dlpg__tcp_server_start: out of memory");
  s->ep_fd = s->wake_fd = -1;
  dlpg_status_t st = dlpg__net_listen(host, port, &s->listen_fd, &s->port);
  if (st != DLPG_OK) {
    free(s);
    return st;
  }
  s->ep_fd = epoll_create1(EPOLL_CLOEXEC);
  s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  struct epoll_event ev;
  ev.events = EPOLLIN;
  ev.data.ptr = &dlpg__tag_listen;
  int ok = s->ep_fd >= 0 && s->wake_fd >= 0 &&
           epoll_ctl(s->ep_fd, EPOLL_CTL_ADD, s->listen_fd, &ev) == 0;
  ev.data.ptr = &dlpg__tag_wake;
  ok = ok && epoll_ctl(s->ep_fd, EPOLL_CTL_ADD, s->wake_fd, &ev) == 0;
  if (ok) {
    /* The server thread takes no signals: a host's SIGINT handler runs on its own threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&s->thread, NULL, dlpg__server_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0) {
      DLPG_INFO(STORE, -1, "store server listening on %s:%d", host && *host ? host : "*", s->port);
      *out = s;
      return DLPG_OK;
    }
    errno = rc;
  }
  int err = errno;
  if (s->ep_fd >= 0) close(s->ep_fd);
  if (s->wake_fd >= 0) close(s->wake_fd);
  close(s->listen_fd);
  free(s);
  return dlpg__error(DLPG_ERR_SYSTEM, "dlpg store server on %s:%d: cannot start: %s",
                     host && *host ? host : "*", port, strerror(err));
}

int dlpg__tcp_server_port(const dlpg__tcp_server_t *s) { return s ? s->port : -1; }

void dlpg__tcp_server_stop(dlpg__tcp_server_t *s) {
  if (!s) return;
  atomic_store(&s->stop, 1);
  uint64_t one = 1;
  if (write(s->wake_fd, &one, sizeof one) < 0) { /* the eventfd cannot be full here */
  }
  pthread_join(s->thread, NULL);
  while (s->conns) dlpg__conn_free(s, s->conns);
  dlpg__kv_free(&s->kv);
  close(s->listen_fd);
  close(s->ep_fd);
  close(s->wake_fd);
  free(s);
}
