/* Socket helpers of the TCP store: listen, one deadline-bounded connect attempt, and
 * send/receive of whole buffers with poll() so that no call blocks past its deadline. All
 * sockets are non-blocking; sends use MSG_NOSIGNAL so a vanished peer is an error, not a
 * SIGPIPE. */
#include "store/tcp_proto.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/status.h"

static int dlpg__set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL, 0);
  if (fl < 0) return -1;
  return fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Milliseconds left until deadline for poll(), at least 0, at most a day. */
static int dlpg__ms_left(double deadline) {
  double left = deadline - dlpg__now();
  if (left <= 0) return 0;
  if (left > 86400.0) left = 86400.0;
  return (int)(left * 1000.0) + 1;
}

/* Bind and listen on the first usable address of host (NULL: the wildcard of family).
 * A wildcard IPv6 socket is made dual-stack, so it also accepts IPv4 clients. Returns the
 * descriptor, or -1 with *err set (*gai_err for a resolver failure). */
static int dlpg__try_listen(const char *host, const char *portstr, int family, int *err,
                            int *gai_err) {
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  *gai_err = getaddrinfo(host, portstr, &hints, &res);
  if (*gai_err != 0) return -1;
  int fd = -1;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      *err = errno;
      continue;
    }
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (!host && ai->ai_family == AF_INET6)
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 1024) == 0 &&
        dlpg__set_nonblock(fd) == 0)
      break;
    *err = errno;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  return fd;
}

dlpg_status_t dlpg__net_listen(const char *host, int port, int *out_fd, int *bound_port) {
  if (host && (!*host || strcmp(host, "*") == 0)) host = NULL;
  const char *shown = host ? host : "*";
  char portstr[16];
  snprintf(portstr, sizeof portstr, "%d", port);
  int err = EADDRNOTAVAIL, gai = 0, fd;
  if (host) {
    fd = dlpg__try_listen(host, portstr, AF_UNSPEC, &err, &gai);
  } else {
    /* Every interface: dual-stack IPv6 where the host has IPv6, else IPv4. */
    fd = dlpg__try_listen(NULL, portstr, AF_INET6, &err, &gai);
    if (fd < 0) fd = dlpg__try_listen(NULL, portstr, AF_INET, &err, &gai);
  }
  if (fd < 0 && gai != 0)
    return dlpg__error(DLPG_ERR_SYSTEM, "dlpg store server: cannot resolve %s:%d: %s", shown, port,
                       gai_strerror(gai));
  if (fd < 0 && err == EADDRINUSE)
    return dlpg__error(DLPG_ERR_SYSTEM, "dlpg store server: cannot listen on %s:%d: %s (the port "
                       "is taken: serve on another one, or on port 0 for a free one)", shown,
                       port, strerror(err));
  if (fd < 0)
    return dlpg__error(DLPG_ERR_SYSTEM, "dlpg store server: cannot listen on %s:%d: %s", shown,
                       port, strerror(err));
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
    err = errno;
    close(fd);
    return dlpg__error(DLPG_ERR_SYSTEM, "dlpg store server: getsockname on %s:%d: %s", shown, port,
                       strerror(err));
  }
  *bound_port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                         : ntohs(((struct sockaddr_in *)&ss)->sin_port);
  *out_fd = fd;
  return DLPG_OK;
}

dlpg_status_t dlpg__net_connect_once(const char *host, int port, double deadline, int *out_fd) {
  char portstr[16];
  snprintf(portstr, sizeof portstr, "%d", port);
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host, portstr, &hints, &res);
  /* The resolver's "no such name" is an answer, not an outage: retrying it until the
   * timeout only hides a typo. A failure to ask (EAI_AGAIN and the rest) may pass. */
  if (rc == EAI_NONAME)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "store server host \"%s\" is not a known host "
                       "name (%s); check its spelling (a name the resolver does not know is not "
                       "retried)", host, gai_strerror(rc));
  if (rc != 0)
    return dlpg__error(DLPG_ERR_SYSTEM, "cannot resolve store server %s:%d: %s", host, port,
                       gai_strerror(rc));
  int err = ECONNREFUSED, fd = -1;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    if (dlpg__set_nonblock(fd) != 0) {
      err = errno;
      close(fd);
      fd = -1;
      continue;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
    if (errno == EINPROGRESS) {
      struct pollfd p = {fd, POLLOUT, 0};
      int n;
      do {
        n = poll(&p, 1, dlpg__ms_left(deadline));
      } while (n < 0 && errno == EINTR);
      if (n > 0) {
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
        if (soerr == 0) break;
        err = soerr;
      } else {
        err = n == 0 ? ETIMEDOUT : errno;
      }
    } else {
      err = errno;
    }
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0)
    return dlpg__error(err == ETIMEDOUT ? DLPG_ERR_TIMEOUT : DLPG_ERR_SYSTEM,
                       "cannot connect to store server %s:%d: %s", host, port, strerror(err));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  *out_fd = fd;
  return DLPG_OK;
}

/* Wait until fd is ready for events or the deadline passes. */
static dlpg_status_t dlpg__net_poll(int fd, short events, double deadline, const char *peer,
                                    const char *what) {
  for (;;) {
    struct pollfd p = {fd, events, 0};
    int ms = dlpg__ms_left(deadline);
    if (ms == 0)
      return dlpg__error(DLPG_ERR_TIMEOUT, "timed out %s store server %s", what, peer);
    int n = poll(&p, 1, ms);
    if (n > 0) return DLPG_OK; /* readiness or error: the next call reports which */
    if (n < 0 && errno != EINTR)
      return dlpg__error(DLPG_ERR_SYSTEM, "poll on store server %s: %s", peer, strerror(errno));
  }
}

dlpg_status_t dlpg__net_send_all(int fd, const void *data, size_t len, double deadline,
                                 const char *peer) {
  const uint8_t *p = (const uint8_t *)data;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      DLPG_CHECK(dlpg__net_poll(fd, POLLOUT, deadline, peer, "sending to"));
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
      return dlpg__error(DLPG_ERR_REMOTE, "store server %s closed the connection", peer);
    return dlpg__error(DLPG_ERR_SYSTEM, "send to store server %s: %s", peer, strerror(errno));
  }
  return DLPG_OK;
}

dlpg_status_t dlpg__net_recv_all(int fd, void *data, size_t len, double deadline,
                                 const char *peer) {
  uint8_t *p = (uint8_t *)data;
  while (len > 0) {
    ssize_t n = recv(fd, p, len, 0);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n == 0 || (n < 0 && errno == ECONNRESET))
      return dlpg__error(DLPG_ERR_REMOTE, "store server %s closed the connection", peer);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      DLPG_CHECK(dlpg__net_poll(fd, POLLIN, deadline, peer, "waiting for a reply from"));
      continue;
    }
    return dlpg__error(DLPG_ERR_SYSTEM, "recv from store server %s: %s", peer, strerror(errno));
  }
  return DLPG_OK;
}
