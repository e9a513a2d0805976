/* Private to the TCP store client: the client object, its pool of connections and the one
 * request/reply exchange (tcp_client_conn.c) that the operations (tcp_client.c) build on. */
#ifndef DLPG_STORE_TCP_CLIENT_INTERNAL_H_
#define DLPG_STORE_TCP_CLIENT_INTERNAL_H_

#include <pthread.h>

#include "store/store.h"
#include "store/tcp_auth.h"
#include "store/tcp_proto.h"

#define DLPG__TCP_POOL_MAX 8

/* One connection to the server and, on a store with a token, its session. */
typedef struct dlpg__tcp_conn {
  int fd;
  dlpg__auth_session_t auth;
} dlpg__tcp_conn_t;

typedef struct dlpg__tcp_store {
  pthread_mutex_t mu; /* guards idle/nidle */
  dlpg__tcp_conn_t idle[DLPG__TCP_POOL_MAX];
  int nidle;
  char *host; /* the host clients connect to */
  int port;
  char peer[300]; /* "host:port" for messages */
  double timeout_s;
  char *token; /* NULL: no authentication */
  dlpg__tcp_server_t *server; /* owned when this process serves */
} dlpg__tcp_store_t;

/* A reply: its type and fields (views into body, which also holds the length prefix). */
typedef struct dlpg__reply {
  uint8_t type;
  size_t n;
  dlpg__field_t *f;
  dlpg__buf_t body;
} dlpg__reply_t;

void dlpg__reply_free(dlpg__reply_t *r);
/* A new connection, authenticated when the store has a token (one attempt). */
dlpg_status_t dlpg__tcp_connect(dlpg__tcp_store_t *t, double deadline, dlpg__tcp_conn_t *c);
/* One CHECK of no keys on c (a store without a token, at open): the server then counts c as
 * a client's (it evicts connections that never completed a frame to admit new ones), and a
 * refusal (a connection limit) is heard now; *refused: the server answered with one. */
dlpg_status_t dlpg__tcp_ping(dlpg__tcp_store_t *t, dlpg__tcp_conn_t *c, double deadline,
                             int *refused);
/* Return a healthy connection to the pool (or close it when the pool is full). */
void dlpg__tcp_give(dlpg__tcp_store_t *t, dlpg__tcp_conn_t *c);
void dlpg__tcp_close_conn(dlpg__tcp_conn_t *c);
/* One request and its reply, before deadline. A pooled connection the server has closed
 * (idle timeout) is replaced, and the request resent when that is safe; BUSY is retried
 * until the deadline; AUTH_FAILED is DLPG_ERR_INVALID_ARGUMENT with the server's message. */
dlpg_status_t dlpg__tcp_call(dlpg__tcp_store_t *t, uint8_t type, size_t n,
                             const void *const *data, const size_t *lens, double deadline,
                             dlpg__reply_t *r);

#endif
