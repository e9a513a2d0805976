/* The dlpg TCP store server: one thread, epoll, non-blocking sockets, a read and a write
 * buffer per connection (protocol in tcp_proto.h, connection I/O in tcp_server_conn.c).
 * WAIT requests are parked on their connection with a deadline and indexed by key
 * (wait_index.h): a SET touches only its key's waiters. The epoll timeout is the nearest
 * deadline; a once-a-second sweep closes connections that stall a frame, the handshake or
 * their replies, or sit idle. A connection that has not completed a frame (with a token: the
 * handshake) within DLPG_STORE_FIRST_FRAME_TIMEOUT_S is closed. At DLPG_STORE_MAX_CONNS (kept
 * below the descriptor limit) or DLPG_STORE_MAX_CONNS_PER_PEER, a new connection closes the
 * oldest one (of that address, for the per-peer limit) that has completed no frame, so idle
 * sockets cannot lock real clients out; when every connection has completed one, the new
 * connection is told why and closed at once. A connection that breaks the protocol is closed
 * alone; the server stays up for the others. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "base/status.h"
#include "store/tcp_server_internal.h"

/* epoll tags for the two non-connection descriptors. */
static char dlpg__tag_listen, dlpg__tag_wake;

/* Connections from peer: the count in s->peers (created at 0). */
static size_t *dlpg__peer_count(dlpg__tcp_server_t *s, const char *peer) {
  size_t len = strlen(peer);
  dlpg__kv_entry_t *e = dlpg__kv_find(&s->peers, peer, len);
  if (!e) {
    size_t zero = 0;
    if (dlpg__kv_set(&s->peers, peer, len, &zero, sizeof zero) != 0) return NULL;
    e = dlpg__kv_find(&s->peers, peer, len);
  }
  return (size_t *)(void *)e->value; /* malloc'ed, so aligned for size_t */
}

static void dlpg__conn_free(dlpg__tcp_server_t *s, dlpg__conn_t *c) {
  if (c->prev) c->prev->next = c->next;
  else s->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  epoll_ctl(s->ep_fd, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  s->queued -= c->counted;
  if (c->dead) s->ndying--;
  else if (!c->proven) dlpg__conn_prove(s, c); /* off the unproven list (server stopping) */
  size_t *n = dlpg__peer_count(s, c->peer);
  if (n && --*n == 0) dlpg__kv_delete(&s->peers, c->peer, strlen(c->peer));
  s->nconns--;
  dlpg__conn_rbuf_free(s, c);
  dlpg__buf_free(&c->wbuf);
  dlpg__conn_clear_wait(s, c);
  dlpg__auth_wipe(&c->auth, sizeof c->auth);
  free(c);
}

/* Tell a connection we will not serve why, in one unauthenticated ERROR frame, and close. */
static void dlpg__refuse(int fd, const char *why) {
  dlpg__buf_t b = {0};
  const void *d[1] = {why};
  size_t l[1] = {strlen(why)};
  if (dlpg__frame_append(&b, DLPG__REPLY_ERROR, 1, d, l) == 0 &&
      send(fd, b.data, b.len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) { /* best effort */
  }
  dlpg__buf_free(&b);
  close(fd);
}

static void dlpg__format_addr(const struct sockaddr *sa, socklen_t sl, char *out, size_t cap) {
  if (getnameinfo(sa, sl, out, (socklen_t)cap, NULL, 0, NI_NUMERICHOST) != 0)
    snprintf(out, cap, "?");
}

/* The oldest connection (from peer; NULL: any) that has completed no frame, or NULL. */
static dlpg__conn_t *dlpg__oldest_unproven(dlpg__tcp_server_t *s, const char *peer) {
  for (dlpg__conn_t *c = s->unproven_old; c; c = c->unext)
    if (!peer || strcmp(c->peer, peer) == 0) return c;
  return NULL;
}

/* Close victim to make room for a new connection under limit (a parameter's name). */
static void dlpg__evict(dlpg__tcp_server_t *s, dlpg__conn_t *victim, const char *limit,
                        size_t value, const char *newcomer) {
  double age = dlpg__now() - victim->opened;
  if (dlpg__srv_may_warn(s))
    DLPG_WARN(STORE, -1, "store server: %s (%zu) reached: closing the connection from %s that "
              "completed no frame in %.1f s (the oldest such) to admit one from %s", limit,
              value, victim->peer, age, newcomer);
  dlpg__srv_reply_msg(s, victim, DLPG__REPLY_ERROR,
                      "the store server closed this connection, which completed no frame in "
                      "%.1f s, to admit a new one: its limit %s (%zu) was reached", age, limit,
                      value);
  dlpg__conn_kill(s, victim, "evicted for a new connection (no frame completed)");
}

/* Admit one accepted descriptor, or refuse it when a connection limit is reached. */
static void dlpg__admit(dlpg__tcp_server_t *s, int fd, const struct sockaddr *sa, socklen_t sl) {
  char peer[64], buf[256];
  dlpg__format_addr(sa, sl, peer, sizeof peer);
  size_t *count = dlpg__peer_count(s, peer);
  const char *why = NULL;
  dlpg__conn_t *victim = NULL;
  if (!count) {
    why = "the store server is out of memory";
  } else if (s->nconns - s->ndying >= s->lim.max_conns) {
    if ((victim = dlpg__oldest_unproven(s, NULL)) != NULL) {
      dlpg__evict(s, victim, "DLPG_STORE_MAX_CONNS", s->lim.max_conns, peer);
    } else {
      snprintf(buf, sizeof buf, "the store server has %zu connections, its limit "
               "(DLPG_STORE_MAX_CONNS or the descriptor limit)", s->nconns);
      why = buf;
    }
  } else if (*count >= s->lim.max_conns_per_peer) {
    /* (Counts include connections closing in this loop iteration: one eviction each.) */
    if ((victim = dlpg__oldest_unproven(s, peer)) != NULL) {
      dlpg__evict(s, victim, "DLPG_STORE_MAX_CONNS_PER_PEER", s->lim.max_conns_per_peer, peer);
    } else {
      snprintf(buf, sizeof buf, "%zu connections from %s already, the store server's limit "
               "DLPG_STORE_MAX_CONNS_PER_PEER", *count, peer);
      why = buf;
    }
  }
  dlpg__conn_t *c = why ? NULL : (dlpg__conn_t *)calloc(1, sizeof *c);
  if (!c) {
    if (!why) why = "the store server is out of memory";
    if (dlpg__srv_may_warn(s))
      DLPG_WARN(STORE, -1, "store server: refusing a connection from %s: %s", peer, why);
    if (count && *count == 0) dlpg__kv_delete(&s->peers, peer, strlen(peer));
    dlpg__refuse(fd, why);
    return;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  c->fd = fd;
  snprintf(c->peer, sizeof c->peer, "%s", peer);
  c->opened = c->last_in = c->last_out = dlpg__now();
  c->auth_stage = s->token ? DLPG__AUTH_WANT_HELLO : DLPG__AUTH_DONE;
  c->events = EPOLLIN | EPOLLRDHUP;
  struct epoll_event ev;
  ev.events = c->events;
  ev.data.ptr = c;
  if (epoll_ctl(s->ep_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
    if (*count == 0) dlpg__kv_delete(&s->peers, peer, strlen(peer));
    close(fd);
    free(c);
    return;
  }
  ++*count;
  s->nconns++;
  dlpg__conn_list_unproven(s, c);
  c->next = s->conns;
  if (s->conns) s->conns->prev = c;
  s->conns = c;
}

static void dlpg__accept_all(dlpg__tcp_server_t *s) {
  /* Evicted connections close at the end of the loop iteration: a burst beyond this many
   * waits in the backlog for the next one, so descriptors stay bounded. */
  while (s->ndying < 64) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(s->listen_fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      dlpg__admit(s, fd, (struct sockaddr *)&ss, sl);
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      DLPG_WARN(STORE, -1, "store server: accept on %s: %s (pausing accepts)", s->address,
                strerror(errno));
      if (epoll_ctl(s->ep_fd, EPOLL_CTL_DEL, s->listen_fd, NULL) == 0)
        s->accept_resume_at = dlpg__now() + 0.1;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
      DLPG_WARN(STORE, -1, "store server: accept on %s: %s", s->address, strerror(errno));
    }
    return;
  }
}

static void dlpg__make_ready(dlpg__tcp_server_t *s, dlpg__conn_t *c) {
  if (c->on_ready) return;
  c->on_ready = 1;
  c->rnext = s->ready;
  s->ready = c;
}

/* Answer parked WAITs past their deadline (only when the nearest one has passed). */
static void dlpg__expire_waits(dlpg__tcp_server_t *s, double now) {
  if (!s->nearest_wait || s->nearest_wait > now) return;
  s->nearest_wait = 0;
  for (dlpg__conn_t *c = s->conns; c; c = c->next) {
    if (!c->waiting || c->dead) continue;
    if (c->deadline > now) {
      if (!s->nearest_wait || c->deadline < s->nearest_wait) s->nearest_wait = c->deadline;
      continue;
    }
    /* Name the keys still missing, in request order. */
    size_t n = 0;
    const void **d = (const void **)malloc(c->wait.missing * sizeof *d);
    size_t *l = (size_t *)malloc(c->wait.missing * sizeof *l);
    if (!d || !l) {
      free(d);
      free(l);
      dlpg__conn_kill(s, c, "out of memory");
      continue;
    }
    for (dlpg__waiter_t *w = c->wait.first; w && n < c->wait.missing; w = w->cnext)
      if (w->bpprev) {
        d[n] = w->key;
        l[n++] = w->klen;
      }
    dlpg__srv_reply(s, c, DLPG__REPLY_TIMEOUT, n, d, l);
    free(d);
    free(l);
    dlpg__conn_clear_wait(s, c);
    dlpg__make_ready(s, c);
  }
}

/* Once a second: close connections that stall a frame, the handshake or their replies, or
 * sit idle past their time. */
static void dlpg__sweep(dlpg__tcp_server_t *s, double now) {
  if (now < s->next_sweep) return;
  s->next_sweep = now + 1.0;
  const dlpg__store_limits_t *l = &s->lim;
  char why[128];
  for (dlpg__conn_t *c = s->conns; c; c = c->next) {
    if (c->dead) continue;
    why[0] = '\0';
    if (!c->proven && now - c->opened > l->first_frame_timeout_s)
      snprintf(why, sizeof why, "%s within DLPG_STORE_FIRST_FRAME_TIMEOUT_S (%g s)",
               c->auth_stage != DLPG__AUTH_DONE && s->token ? "no authentication"
                                                            : "no complete frame",
               l->first_frame_timeout_s);
    else if (c->frame_start && (c->events & EPOLLIN) && now - c->frame_start > l->frame_timeout_s)
      snprintf(why, sizeof why, "a frame unfinished for DLPG_STORE_FRAME_TIMEOUT_S (%g s)",
               l->frame_timeout_s);
    else if (c->wbuf.len && now - c->last_out > l->frame_timeout_s)
      snprintf(why, sizeof why, "replies unread for DLPG_STORE_FRAME_TIMEOUT_S (%g s)",
               l->frame_timeout_s);
    else if (!c->waiting && !c->rbuf.len && !c->wbuf.len &&
             now - (c->last_in > c->last_out ? c->last_in : c->last_out) > l->idle_timeout_s)
      snprintf(why, sizeof why, "idle for DLPG_STORE_IDLE_TIMEOUT_S (%g s)", l->idle_timeout_s);
    if (why[0]) dlpg__conn_kill(s, c, why);
  }
}

/* Milliseconds until the next thing the loop must do by itself (-1: nothing). */
static int dlpg__next_timeout_ms(dlpg__tcp_server_t *s, double now) {
  double at = s->nearest_wait;
  if (s->conns && (!at || s->next_sweep < at)) at = s->next_sweep;
  if (s->accept_resume_at > 0 && (!at || s->accept_resume_at < at)) at = s->accept_resume_at;
  if (!at) return -1;
  double left = at - now;
  return left <= 0 ? 0 : (int)(left * 1000.0) + 1;
}

static void dlpg__resume_accepts(dlpg__tcp_server_t *s, double now) {
  if (s->accept_resume_at <= 0 || now < s->accept_resume_at) return;
  struct epoll_event ev;
  ev.events = EPOLLIN;
  ev.data.ptr = &dlpg__tag_listen;
  if (epoll_ctl(s->ep_fd, EPOLL_CTL_ADD, s->listen_fd, &ev) == 0) s->accept_resume_at = 0;
  else s->accept_resume_at = now + 0.1;
}

static void dlpg__on_event(dlpg__tcp_server_t *s, dlpg__conn_t *c, unsigned events) {
  if (c->dead) return;
  if (events & EPOLLOUT) {
    dlpg__conn_flush(s, c);
    dlpg__conn_process(s, c);
  }
  if (events & EPOLLIN) dlpg__conn_read(s, c);
  /* Gone while its requests wait (reading paused): nothing left to serve. */
  if (!c->dead && (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) && !(c->events & EPOLLIN))
    dlpg__conn_kill(s, c, "peer closed");
  else if (!c->dead && (events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
    dlpg__conn_read(s, c);
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
        dlpg__on_event(s, (dlpg__conn_t *)p, evs[i].events);
      }
    }
    double now = dlpg__now();
    dlpg__expire_waits(s, now);
    /* Connections whose WAIT was answered run the frames they sent meanwhile. */
    while (s->ready) {
      dlpg__conn_t *c = s->ready;
      s->ready = c->rnext;
      c->on_ready = 0;
      if (!c->dead) dlpg__conn_process(s, c);
    }
    dlpg__sweep(s, now);
    while (s->dead) {
      dlpg__conn_t *c = s->dead;
      s->dead = c->dnext;
      dlpg__conn_free(s, c);
    }
    dlpg__resume_accepts(s, now);
    timeout_ms = dlpg__next_timeout_ms(s, dlpg__now());
  }
  return NULL;
}

/* The address actually bound, "[::]:29501" or "127.0.0.1:29501". */
static void dlpg__bound_address(int fd, char *out, size_t cap) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  char host[64] = "?", port[16] = "?";
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
    getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, port, sizeof port,
                NI_NUMERICHOST | NI_NUMERICSERV);
  snprintf(out, cap, strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, port);
}

/* DLPG_STORE_MAX_CONNS, kept below the descriptor limit (with room for the server's own). */
static size_t dlpg__conn_cap(size_t wanted) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return wanted;
  size_t room = rl.rlim_cur > 128 ? (size_t)rl.rlim_cur - 64 : (size_t)rl.rlim_cur / 2;
  return wanted < room ? wanted : room;
}

dlpg_status_t dlpg__tcp_server_start(const char *host, int port, const char *token,
                                     dlpg__tcp_server_t **out) {
  static const char fn[] = "dlpg__tcp_server_start";
  if (!out) return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
  if (port < 0 || port > 65535)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "%s: port %d is outside [0, 65535]", fn, port);
  dlpg__tcp_server_t *s = (dlpg__tcp_server_t *)calloc(1, sizeof *s);
  if (!s) return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
  s->ep_fd = s->wake_fd = s->listen_fd = -1;
  dlpg__store_limits_load(&s->lim);
  s->lim.max_conns = dlpg__conn_cap(s->lim.max_conns);
  if (token && *token && !(s->token = strdup(token))) {
    free(s);
    return dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory", fn);
  }
  dlpg_status_t st = dlpg__net_listen(host, port, &s->listen_fd, &s->port);
  if (st != DLPG_OK) {
    free(s->token);
    free(s);
    return st;
  }
  dlpg__bound_address(s->listen_fd, s->address, sizeof s->address);
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
      DLPG_INFO(STORE, -1, "store server listening on %s (%s)", s->address,
                s->token ? "token required" : "no token: anyone who reaches it may use it");
      *out = s;
      return DLPG_OK;
    }
    errno = rc;
  }
  int err = errno;
  if (s->ep_fd >= 0) close(s->ep_fd);
  if (s->wake_fd >= 0) close(s->wake_fd);
  close(s->listen_fd);
  free(s->token);
  free(s);
  return dlpg__error(DLPG_ERR_SYSTEM, "dlpg store server on %s:%d: cannot start: %s",
                     host && *host ? host : "*", port, strerror(err));
}

int dlpg__tcp_server_port(const dlpg__tcp_server_t *s) { return s ? s->port : -1; }

const char *dlpg__tcp_server_address(const dlpg__tcp_server_t *s) { return s ? s->address : ""; }

void dlpg__tcp_server_stop(dlpg__tcp_server_t *s) {
  if (!s) return;
  atomic_store(&s->stop, 1);
  uint64_t one = 1;
  if (write(s->wake_fd, &one, sizeof one) < 0) { /* the eventfd cannot be full here */
  }
  pthread_join(s->thread, NULL);
  s->dead = NULL; /* every connection is freed below, dead or not */
  while (s->conns) dlpg__conn_free(s, s->conns);
  dlpg__kv_free(&s->kv);
  dlpg__kv_free(&s->peers);
  dlpg__widx_free(&s->waiters);
  close(s->listen_fd);
  close(s->ep_fd);
  close(s->wake_fd);
  if (s->token) {
    dlpg__auth_wipe(s->token, strlen(s->token));
    free(s->token);
  }
  free(s);
}
