/* The rendezvous socket of the engine's creation: an abstract-namespace Unix socket
 * (Linux), so no file is created anywhere and nothing is left when its owner dies, and it
 * is reachable only from the same network namespace -- which is what tells the ranks that
 * they share a kernel. Rank 0 passes the segment's memfd over it with SCM_RIGHTS. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/clock.h"
#include "shm/seg.h"

/* sun_path = "\0" + name: the abstract namespace (no filesystem entry). */
static socklen_t dlpg__shm_sock_addr(const char *name, struct sockaddr_un *a) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  size_t n = strlen(name);
  if (n > sizeof a->sun_path - 1) n = sizeof a->sun_path - 1;
  memcpy(a->sun_path + 1, name, n);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

int dlpg__shm_sock_listen(const char *name) {
  struct sockaddr_un a;
  socklen_t len = dlpg__shm_sock_addr(name, &a);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  if (bind(fd, (struct sockaddr *)&a, len) != 0 || listen(fd, 128) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

int dlpg__shm_sock_connect(const char *name) {
  struct sockaddr_un a;
  socklen_t len = dlpg__shm_sock_addr(name, &a);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  /* A listening Unix socket accepts into its backlog at once or refuses: no retry, since
   * rank 0 listens before it publishes the name. */
  if (connect(fd, (struct sockaddr *)&a, len) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

int dlpg__shm_sock_send(int fd, const void *buf, size_t len, int pass_fd) {
  struct iovec iov = {(void *)buf, len};
  union {
    char b[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } ctl;
  struct msghdr m = {0};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  if (pass_fd >= 0) {
    memset(&ctl, 0, sizeof ctl);
    m.msg_control = ctl.b;
    m.msg_controllen = sizeof ctl.b;
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  }
  /* Small messages on a fresh Unix stream socket go in one piece. MSG_NOSIGNAL: a peer
   * that went away is an error here, never a SIGPIPE. */
  ssize_t n;
  do n = sendmsg(fd, &m, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  return n == (ssize_t)len ? 0 : -1;
}

ssize_t dlpg__shm_sock_recv_some(int fd, void *buf, size_t len, int *keep_fd) {
  struct iovec iov = {buf, len};
  union {
    char b[CMSG_SPACE(4 * sizeof(int))];
    struct cmsghdr align;
  } ctl;
  struct msghdr m = {0};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = ctl.b;
  m.msg_controllen = sizeof ctl.b;
  ssize_t n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  if (n < 0) return n;
  /* The first fd is kept when asked for; any other is not, and is closed. */
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t k = 0; k < nfd; k++) {
      int f;
      memcpy(&f, CMSG_DATA(c) + k * sizeof(int), sizeof f);
      if (keep_fd && *keep_fd < 0)
        *keep_fd = f;
      else
        close(f);
    }
  }
  return n;
}

int dlpg__shm_sock_recv(int fd, void *buf, size_t len, int *got_fd, double deadline) {
  size_t have = 0;
  *got_fd = -1;
  while (have < len) {
    double left = deadline - dlpg__now();
    if (left <= 0) {
      errno = ETIMEDOUT;
      return -1;
    }
    struct pollfd p = {fd, POLLIN, 0};
    int pr = poll(&p, 1, (int)(left * 1000) + 1);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    ssize_t n = dlpg__shm_sock_recv_some(fd, (char *)buf + have, len - have, got_fd);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      if (n == 0) errno = ECONNRESET;
      return -1;
    }
    have += (size_t)n;
  }
  return 0;
}

int dlpg__shm_sock_fetch(const char *name, const void *hello, size_t len, double deadline, int *fd,
                         int *err) {
  *fd = -1;
  *err = 0;
  int c = dlpg__shm_sock_connect(name);
  if (c < 0) {
    *err = errno;
    return DLPG__SHM_FETCH_UNREACHABLE;
  }
  uint8_t ok = 0;
  if (dlpg__shm_sock_send(c, hello, len, -1) != 0 || dlpg__shm_sock_recv(c, &ok, 1, fd, deadline) != 0) {
    *err = errno;
    close(c);
    if (*fd >= 0) close(*fd);
    *fd = -1;
    return DLPG__SHM_FETCH_FAILED;
  }
  close(c);
  if (ok != 1 || *fd < 0) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
    return DLPG__SHM_FETCH_REFUSED;
  }
  return 0;
}
