/* Private to the TCP store server: the server and connection objects shared by the event
 * loop (tcp_server.c), the connection I/O (tcp_server_conn.c) and the request handlers
 * (tcp_server_cmds.c). Only the server thread touches them. */
#ifndef DLPG_STORE_TCP_SERVER_INTERNAL_H_
#define DLPG_STORE_TCP_SERVER_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>

#include "store/kv.h"
#include "store/store.h"
#include "store/tcp_auth.h"
#include "store/tcp_proto.h"
#include "store/wait_index.h"

/* The server's limits (DLPG_STORE_* parameters, read when the server starts). */
typedef struct dlpg__store_limits {
  size_t max_conns, max_conns_per_peer, max_reply_bytes, max_queued_bytes, max_bytes, max_keys,
      max_key_bytes, max_value_bytes, max_wait_keys, max_pending_bytes;
  double max_wait_s, frame_timeout_s, idle_timeout_s, first_frame_timeout_s;
} dlpg__store_limits_t;

void dlpg__store_limits_load(dlpg__store_limits_t *l);

/* Where a connection stands in the handshake. */
enum { DLPG__AUTH_WANT_HELLO, DLPG__AUTH_WANT_PROOF, DLPG__AUTH_DONE };

typedef struct dlpg__conn {
  struct dlpg__conn *prev, *next;
  struct dlpg__conn *rnext; /* on the server's ready list (a WAIT answered) */
  struct dlpg__conn *dnext; /* on the server's dead list (closed at the end of the loop) */
  /* On the server's list of unproven connections (no complete frame yet), oldest first. */
  struct dlpg__conn *uprev, *unext;
  int fd;
  int dead;        /* closed at the end of the current loop iteration */
  int on_ready;
  int proven;      /* has completed a frame (with a token: the handshake) */
  unsigned events; /* epoll interest registered */
  /* rbuf holds only what cannot run yet (an unfinished frame, or frames behind a parked
   * WAIT), counted in the server's pending total; it is freed once empty, like wbuf. */
  dlpg__buf_t rbuf, wbuf;
  size_t discard; /* bytes still to drop of a request refused for the pending limit */
  size_t counted;  /* wbuf bytes counted in the server's queued total */
  char peer[64];   /* "address" for messages and the per-peer count */
  double opened;            /* accepted at (the handshake must end in time) */
  double last_in, last_out; /* last progress receiving / sending */
  double frame_start;       /* first byte of the incomplete frame in rbuf (0: none) */
  int auth_stage;
  uint8_t cn[DLPG__AUTH_NONCE], sn[DLPG__AUTH_NONCE];
  dlpg__auth_session_t auth;
  /* A parked WAIT: its keys (in the server's index) and its deadline. */
  int waiting;
  dlpg__wait_list_t wait;
  double deadline;
} dlpg__conn_t;

struct dlpg__tcp_server {
  int listen_fd, ep_fd, wake_fd, port;
  char address[96]; /* the bound address, "host:port" or "[v6]:port" */
  atomic_int stop;
  /* Out of descriptors: the listening socket leaves epoll for a moment, so a level-triggered
   * accept that keeps failing does not spin the thread. */
  double accept_resume_at; /* 0: not paused */
  double nearest_wait;     /* a parked WAIT's deadline is no earlier (0: none parked) */
  double next_sweep;       /* next check of frame, handshake and idle timeouts */
  double last_warn;        /* refusals and failed handshakes warn at most once a second */
  unsigned long warns_dropped;
  pthread_t thread;
  char *token; /* NULL: no authentication */
  dlpg__store_limits_t lim;
  dlpg__kv_t kv;
  dlpg__kv_t peers; /* address -> open connections from it (a size_t value) */
  dlpg__widx_t waiters;
  size_t nconns, queued; /* open connections; unsent reply bytes of all of them */
  size_t ndying;         /* of nconns, those marked dead and not yet freed */
  size_t pending;        /* bytes of all connections' read buffers (capacity) */
  dlpg__conn_t *conns;
  dlpg__conn_t *unproven_old, *unproven_new; /* connections without a complete frame */
  dlpg__conn_t *ready; /* connections whose WAIT was just answered */
  dlpg__conn_t *dead;  /* connections to close at the end of the loop iteration */
  /* Every recv lands here; only the bytes that cannot run at once are copied out. */
  uint8_t scratch[65536];
};

/* Whether a warning about a refused or failed client may be logged now (at most one a
 * second, so a flood of them cannot flood the log; the rest are counted). */
int dlpg__srv_may_warn(dlpg__tcp_server_t *s);
/* Mark c for closing at the end of the loop iteration (why is logged at INFO). */
void dlpg__conn_kill(dlpg__tcp_server_t *s, dlpg__conn_t *c, const char *why);
/* c has completed a frame: it leaves the unproven list (never evicted or reaped for it). */
void dlpg__conn_prove(dlpg__tcp_server_t *s, dlpg__conn_t *c);
/* Put a new connection on the unproven list (newest end). */
void dlpg__conn_list_unproven(dlpg__tcp_server_t *s, dlpg__conn_t *c);
/* Free c's read buffer and take it out of the server's pending total. */
void dlpg__conn_rbuf_free(dlpg__tcp_server_t *s, dlpg__conn_t *c);
/* Drop a parked WAIT's keys. */
void dlpg__conn_clear_wait(dlpg__tcp_server_t *s, dlpg__conn_t *c);
/* Write what the socket takes now, then update c's epoll interest. */
void dlpg__conn_flush(dlpg__tcp_server_t *s, dlpg__conn_t *c);
/* Whether c may run its next request now: not closing, no parked WAIT, fewer unread reply
 * bytes than the limit (the back-pressure rule). */
int dlpg__conn_can_run(const dlpg__tcp_server_t *s, const dlpg__conn_t *c);
/* Read what the socket has and run the complete frames (tcp_server_frames.c). */
void dlpg__conn_read(dlpg__tcp_server_t *s, dlpg__conn_t *c);
/* Run the complete frames buffered on c while it may (tcp_server_frames.c). */
void dlpg__conn_process(dlpg__tcp_server_t *s, dlpg__conn_t *c);
/* Register exactly the events c can act on now (reading only while it may process). */
void dlpg__conn_update_events(dlpg__tcp_server_t *s, dlpg__conn_t *c);
/* Queue a reply frame on c (with its MAC on an authenticated connection) and send it. */
void dlpg__srv_reply(dlpg__tcp_server_t *s, dlpg__conn_t *c, uint8_t type, size_t n,
                     const void *const *data, const size_t *lens);
/* A one-field reply carrying a message (ERROR, BUSY, AUTH_FAILED). */
void dlpg__srv_reply_msg(dlpg__tcp_server_t *s, dlpg__conn_t *c, uint8_t type, const char *fmt,
                         ...) __attribute__((format(printf, 4, 5)));
/* Execute one parsed request. Returns -1 when it is malformed (the caller closes c). */
int dlpg__srv_handle(dlpg__tcp_server_t *s, dlpg__conn_t *c, uint8_t type,
                     const dlpg__field_t *f, size_t n);
/* A key was set: answer the WAITs it completes. */
void dlpg__srv_key_set(dlpg__tcp_server_t *s, const uint8_t *key, size_t klen);

#endif
