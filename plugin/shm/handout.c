/* The segment owner's side of a hand-out (handout.h): a poll over the listening socket and
 * every connection whose hello is still due. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/status.h"
#include "shm/handout.h"
#include "shm/params.h"

dlpg_status_t dlpg__shm_handout_init(dlpg__shm_handout_t *h, int lfd, int memfd,
                                     const uint8_t token[16], int me, int lo, int hi) {
  memset(h, 0, sizeof *h);
  h->lfd = lfd;
  h->memfd = memfd;
  h->token = token;
  h->me = me;
  h->lo = lo;
  h->hi = hi;
  h->served = calloc(hi > lo ? (size_t)(hi - lo) : 1, 1);
  if (!h->served) return dlpg__error(DLPG_ERR_SYSTEM, "shm rank %d: out of memory", me);
  return DLPG_OK;
}

/* 1 the first time for *flag: a stranger that connects again and again is logged once. */
static int dlpg__shm_first(int *flag) {
  int first = !*flag;
  *flag = 1;
  return first;
}

static void dlpg__shm_handout_drop(dlpg__shm_handout_t *h, int i) {
  close(h->conns[i].fd);
  h->conns[i] = h->conns[--h->nconns];
}

/* Reads what has come of connection c's hello without waiting; every fd that came with it
 * is closed. 1: the hello is whole; 0: more is due; -1: the peer closed or failed. */
static int dlpg__shm_handout_read(dlpg__shm_handout_conn_t *c) {
  while (c->have < sizeof c->hello) {
    ssize_t n = dlpg__shm_sock_recv_some(c->fd, (char *)&c->hello + c->have,
                                         sizeof c->hello - c->have, NULL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    if (n == 0) return -1;
    c->have += (size_t)n;
  }
  return 1;
}

/* A whole hello: the segment for a rank that holds the token and is due, else nothing.
 * Returns 1 when a rank was handed the segment (or told it is in another pid namespace). */
static int dlpg__shm_handout_answer(dlpg__shm_handout_t *h, const dlpg__shm_handout_conn_t *c) {
  const dlpg__shm_hello_t *m = &c->hello;
  if (memcmp(m->token, h->token, sizeof m->token) != 0) {
    if (dlpg__shm_first(&h->said_token))
      DLPG_WARN(SHM, h->me, "shm rank %d: closed a connection to its segment's socket from pid %d: "
                "its hello did not hold the segment's token (a process that is not a rank of this "
                "group)", h->me, (int)c->pid);
    return 0;
  }
  if (m->rank < h->lo || m->rank >= h->hi || h->served[m->rank - h->lo]) {
    DLPG_WARN(SHM, h->me, "shm rank %d: closed a connection from pid %d that claimed rank %d, %s",
              h->me, (int)c->pid, (int)m->rank,
              m->rank < h->lo || m->rank >= h->hi ? "which this socket does not serve"
                                                  : "which was handed the segment already");
    return 0;
  }
  /* The pid the kernel reports must be the one the rank sent: in another pid namespace it
   * differs, and the liveness checks would read the wrong process. */
  uint8_t ok = c->pid == m->pid ? 1 : 2;
  dlpg__shm_sock_send(c->fd, &ok, 1, ok == 1 ? h->memfd : -1);
  h->served[m->rank - h->lo] = 1;
  return 1;
}

/* Accepts what waits in the backlog. Another user's connection is closed unread; with the
 * table full, the connection that has waited longest for its hello makes room. */
static int dlpg__shm_handout_accept(dlpg__shm_handout_t *h, double now) {
  int handed = 0;
  for (;;) {
    int fd = accept4(h->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return handed; /* EAGAIN: the backlog is empty; other errors: the next round retries */
    }
    struct ucred cred = {0, (uid_t)-1, (gid_t)-1};
    socklen_t cl = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || cred.uid != getuid()) {
      if (dlpg__shm_first(&h->said_uid))
        DLPG_WARN(SHM, h->me, "shm rank %d: refused a connection to its segment's socket from "
                  "pid %d of uid %u: only this job's user (uid %u) may connect", h->me,
                  (int)cred.pid, (unsigned)cred.uid, (unsigned)getuid());
      close(fd);
      continue;
    }
    if (h->nconns == DLPG__SHM_HANDOUT_CONNS) {
      int oldest = 0;
      for (int i = 1; i < h->nconns; i++)
        if (h->conns[i].until < h->conns[oldest].until) oldest = i;
      dlpg__shm_handout_drop(h, oldest);
    }
    dlpg__shm_handout_conn_t *c = &h->conns[h->nconns++];
    memset(c, 0, sizeof *c);
    c->fd = fd;
    c->pid = cred.pid;
    c->until = now + DLPG__SHM_HELLO_S;
    /* A rank sends its hello right after connecting: it is usually here already. */
    int r = dlpg__shm_handout_read(c);
    if (r != 0) {
      if (r > 0) handed += dlpg__shm_handout_answer(h, c);
      dlpg__shm_handout_drop(h, h->nconns - 1);
    }
  }
}

int dlpg__shm_handout_step(dlpg__shm_handout_t *h, double wait_s) {
  struct pollfd pf[1 + DLPG__SHM_HANDOUT_CONNS];
  double now = dlpg__now(), wake = now + wait_s;
  pf[0] = (struct pollfd){h->lfd, POLLIN, 0};
  for (int i = 0; i < h->nconns; i++) {
    pf[1 + i] = (struct pollfd){h->conns[i].fd, POLLIN, 0};
    if (h->conns[i].until < wake) wake = h->conns[i].until;
  }
  int n = h->nconns, ms = wake > now ? (int)((wake - now) * 1000) + 1 : 0;
  if (poll(pf, (nfds_t)(1 + n), ms) < 0 && errno != EINTR) return 0;
  int handed = 0;
  now = dlpg__now();
  /* From the last: dropping connection i moves the last one into its place. */
  for (int i = n - 1; i >= 0; i--) {
    dlpg__shm_handout_conn_t *c = &h->conns[i];
    int r = pf[1 + i].revents ? dlpg__shm_handout_read(c) : 0;
    if (r > 0) handed += dlpg__shm_handout_answer(h, c);
    if (r == 0 && c->until > now) continue;
    if (r == 0 && dlpg__shm_first(&h->said_silent))
      DLPG_WARN(SHM, h->me, "shm rank %d: closed a connection to its segment's socket from pid %d "
                "that sent no whole hello within %g s", h->me, (int)c->pid, DLPG__SHM_HELLO_S);
    dlpg__shm_handout_drop(h, i);
  }
  if (pf[0].revents & POLLIN) handed += dlpg__shm_handout_accept(h, now);
  return handed;
}

void dlpg__shm_handout_end(dlpg__shm_handout_t *h) {
  while (h->nconns > 0) dlpg__shm_handout_drop(h, h->nconns - 1);
  free(h->served);
  h->served = NULL;
}
