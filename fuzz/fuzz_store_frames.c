/* libFuzzer target: arbitrary bytes arrive on one connection of the store server, which
 * parses and runs them as it would off the network (frames, handshake, every command, the
 * waiter index), replying into a socket pair that is drained and read back as frames. The
 * first byte picks a token (authenticated server) or none, and the split into reads. Any
 * crash, leak, undefined behaviour or a reply that is not a well-formed frame is a finding. */
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "store/tcp_server_internal.h"

/* Read back every reply frame the server wrote and check it parses. */
static void dlpg__drain(int fd, dlpg__buf_t *in, int mac) {
  uint8_t tmp[65536];
  ssize_t n;
  while ((n = recv(fd, tmp, sizeof tmp, MSG_DONTWAIT)) > 0) dlpg__buf_append(in, tmp, (size_t)n);
  while (in->len >= DLPG__PROTO_HEADER) {
    uint32_t body = dlpg__get_u32(in->data);
    if (body < DLPG__PROTO_BODY_HEAD || body > DLPG__PROTO_MAX_BODY) abort();
    size_t total = DLPG__PROTO_HEADER + body + (mac ? DLPG__AUTH_MAC : 0);
    if (in->len < total) break;
    uint8_t type;
    size_t nf;
    dlpg__field_t *f;
    if (dlpg__frame_parse(in->data + DLPG__PROTO_HEADER, body, &type, &nf, &f) != 0) abort();
    free(f);
    dlpg__buf_consume(in, total);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  static int quiet;
  if (!quiet) {
    setenv("DLPG_DEBUG", "NONE", 1);
    setenv("DLPG_STORE_MAX_BYTES", "1048576", 1); /* small quotas reach the limit paths */
    setenv("DLPG_STORE_MAX_KEYS", "64", 1);
    setenv("DLPG_STORE_MAX_REPLY_BYTES", "4096", 1);
    quiet = 1;
  }
  uint8_t mode = data[0];
  data++;
  size--;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0) return 0;
  int one_mb = 1 << 20;
  setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &one_mb, sizeof one_mb);
  setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &one_mb, sizeof one_mb);
  dlpg__tcp_server_t s;
  memset(&s, 0, sizeof s);
  dlpg__store_limits_load(&s.lim);
  s.ep_fd = epoll_create1(0);
  char token[] = "fuzz-token";
  s.token = (mode & 1) ? token : NULL;
  dlpg__conn_t *c = (dlpg__conn_t *)calloc(1, sizeof *c);
  c->fd = sv[0];
  strcpy(c->peer, "fuzz");
  c->auth_stage = s.token ? DLPG__AUTH_WANT_HELLO : DLPG__AUTH_DONE;
  struct epoll_event ev = {EPOLLIN, {.ptr = c}};
  epoll_ctl(s.ep_fd, EPOLL_CTL_ADD, c->fd, &ev);
  c->events = EPOLLIN;
  s.conns = c;
  /* Feed the input in chunks (mode's high bits pick the size), as reads would. */
  size_t chunk = 1 + ((size_t)(mode >> 1) * 37);
  dlpg__buf_t replies = {0};
  for (size_t off = 0; off < size && !c->dead; off += chunk) {
    size_t n = size - off < chunk ? size - off : chunk;
    dlpg__buf_append(&c->rbuf, data + off, n);
    dlpg__conn_process(&s, c);
    /* A WAIT answered by a SET of the same connection cannot happen (it is parked), but the
     * ready list must be emptied as the event loop does. */
    while (s.ready) {
      dlpg__conn_t *r = s.ready;
      s.ready = r->rnext;
      r->on_ready = 0;
      if (!r->dead) dlpg__conn_process(&s, r);
    }
    dlpg__drain(sv[1], &replies, c->auth.on);
    if (!c->dead) dlpg__conn_flush(&s, c);
  }
  dlpg__conn_clear_wait(&s, c);
  dlpg__buf_free(&c->rbuf);
  dlpg__buf_free(&c->wbuf);
  dlpg__buf_free(&replies);
  free(c);
  dlpg__kv_free(&s.kv);
  dlpg__widx_free(&s.waiters);
  close(s.ep_fd);
  close(sv[0]);
  close(sv[1]);
  return 0;
}
