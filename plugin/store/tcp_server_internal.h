/* Private to the TCP store server: the server and connection objects shared by the event
 * loop (tcp_server.c) and the request handlers (tcp_server_cmds.c). Only the server thread
 * touches them. */
#ifndef DLPG_STORE_TCP_SERVER_INTERNAL_H_
#define DLPG_STORE_TCP_SERVER_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>

#include "store/kv.h"
#include "store/store.h"
#include "store/tcp_proto.h"

typedef struct dlpg__conn {
  struct dlpg__conn *prev, *next;
  int fd;
  int dead;     /* closed at the end of the current loop iteration */
  int want_out; /* EPOLLOUT registered */
  dlpg__buf_t rbuf, wbuf;
  /* A parked WAIT: its keys (owned copies) and its deadline. */
  int waiting;
  uint8_t **wkeys;
  size_t *wlens;
  size_t nwkeys;
  double deadline;
} dlpg__conn_t;

struct dlpg__tcp_server {
  int listen_fd, ep_fd, wake_fd, port;
  atomic_int stop;
  int dirty; /* a key was set since the waiters were last checked */
  /* Out of descriptors: the listening socket leaves epoll for a moment, so a level-triggered
   * accept that keeps failing does not spin the thread. */
  double accept_resume_at; /* 0: not paused */
  pthread_t thread;
  dlpg__kv_t kv;
  dlpg__conn_t *conns;
};

/* Mark c for closing at the end of the loop iteration (why is logged at INFO). */
void dlpg__conn_kill(dlpg__conn_t *c, const char *why);
/* Drop a parked WAIT's keys. */
void dlpg__conn_clear_wait(dlpg__conn_t *c);
/* Write what the socket takes now; register for EPOLLOUT while something is left. */
void dlpg__conn_flush(dlpg__tcp_server_t *s, dlpg__conn_t *c);
/* Queue a reply frame on c and try to send it. */
void dlpg__srv_reply(dlpg__tcp_server_t *s, dlpg__conn_t *c, uint8_t type, size_t n,
                     const void *const *data, const size_t *lens);
/* Execute one parsed request. Returns -1 when it is malformed (the caller closes c). */
int dlpg__srv_handle(dlpg__tcp_server_t *s, dlpg__conn_t *c, uint8_t type,
                     const dlpg__field_t *f, size_t n);

#endif
