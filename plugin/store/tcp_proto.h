/* The wire protocol of the dlpg TCP store, shared by the server (tcp_server.c) and the
 * client (tcp_client.c), plus the socket helpers both need.
 *
 * Frame layout (every integer big-endian):
 *
 *   u32  body_len                 bytes that follow; 5 <= body_len <= DLPG__PROTO_MAX_BODY
 *   u8   type                     request command or reply status (below)
 *   u32  nfields                  0 <= nfields <= DLPG__PROTO_MAX_FIELDS
 *   nfields times:
 *     u32  len                    field length
 *     u8   bytes[len]
 *
 * The field lengths must add up to exactly body_len - 5; anything else is malformed and the
 * server closes that connection (and only that one).
 *
 * Requests (type, fields):
 *   SET    key, value             -> OK
 *   GET    key                    -> OK value | NOT_FOUND          (never blocks)
 *   ADD    key, i64 delta (8 B)   -> OK i64 (8 B) | ERROR message  (value not an integer)
 *   CHECK  key...                 -> OK u8 all_exist
 *   DELETE key                    -> OK u8 deleted
 *   WAIT   u64 timeout_ms, key... -> OK once all keys exist | TIMEOUT missing_key...
 *   HELLO  client nonce           -> OK server nonce, server proof | AUTH_FAILED message
 *   AUTH   client proof           -> OK (authenticated) | AUTH_FAILED message
 * Keys are 1..DLPG_STORE_MAX_KEY_LEN bytes, values 0..DLPG_STORE_MAX_VALUE_LEN bytes; the
 * server's own limits (DLPG_STORE_MAX_*) may be lower, and a request over one is answered
 * ERROR with a message naming the limit. BUSY (a message) asks the client to retry: the
 * server's queued replies are at DLPG_STORE_MAX_QUEUED_BYTES.
 *
 * A server with a token (tcp_auth.h) takes HELLO and AUTH first, and after them every frame
 * both ways is followed by a 32-byte MAC. Without a token, no handshake and no MACs.
 */
#ifndef DLPG_STORE_TCP_PROTO_H_
#define DLPG_STORE_TCP_PROTO_H_

#include <stddef.h>
#include <stdint.h>

#include "base/clock.h"
#include "dlpg/dlpg.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  DLPG__CMD_SET = 1,
  DLPG__CMD_GET = 2,
  DLPG__CMD_ADD = 3,
  DLPG__CMD_CHECK = 4,
  DLPG__CMD_DELETE = 5,
  DLPG__CMD_WAIT = 6,
  DLPG__CMD_HELLO = 7,
  DLPG__CMD_AUTH = 8
};

enum {
  DLPG__REPLY_OK = 0,
  DLPG__REPLY_NOT_FOUND = 1,
  DLPG__REPLY_TIMEOUT = 2,
  DLPG__REPLY_ERROR = 3,
  DLPG__REPLY_AUTH_FAILED = 4,
  DLPG__REPLY_BUSY = 5
};

#define DLPG__PROTO_HEADER 4u                       /* the u32 body_len */
#define DLPG__PROTO_BODY_HEAD 5u                    /* type + nfields */
#define DLPG__PROTO_MAX_FIELDS 65536u               /* keys in one WAIT/CHECK, plus one */
/* The largest body: a SET of the longest key and the longest value, or a WAIT/CHECK whose
 * keys add up to as much. */
#define DLPG__PROTO_MAX_BODY \
  (DLPG__PROTO_BODY_HEAD + 2u * 4u + DLPG_STORE_MAX_KEY_LEN + DLPG_STORE_MAX_VALUE_LEN)

/* The largest body before authentication (HELLO, AUTH): a stranger cannot make the server
 * buffer more. */
#define DLPG__PROTO_MAX_AUTH_BODY 256u

/* One parsed field: a view into the frame buffer. */
typedef struct dlpg__field {
  const uint8_t *data;
  uint32_t len;
} dlpg__field_t;

/* A growable byte buffer (frames are built and received in it). */
typedef struct dlpg__buf {
  uint8_t *data;
  size_t len, cap;
} dlpg__buf_t;

void dlpg__buf_free(dlpg__buf_t *b);
/* 0 on success, -1 when out of memory. */
int dlpg__buf_reserve(dlpg__buf_t *b, size_t cap);
int dlpg__buf_append(dlpg__buf_t *b, const void *data, size_t len);
/* Drop the first n bytes. */
void dlpg__buf_consume(dlpg__buf_t *b, size_t n);

void dlpg__put_u32(uint8_t *p, uint32_t v);
uint32_t dlpg__get_u32(const uint8_t *p);
void dlpg__put_u64(uint8_t *p, uint64_t v);
uint64_t dlpg__get_u64(const uint8_t *p);

/* Append a frame of type with nfields fields (data[i], lens[i]) to b. Returns 0, or -1
 * when out of memory or over the protocol's limits. */
int dlpg__frame_append(dlpg__buf_t *b, uint8_t type, size_t nfields, const void *const *data,
                       const size_t *lens);

/* Parse one body (the bytes after body_len). On success returns 0 and sets *type,
 * *nfields and *fields (malloc'ed array of views into body, caller frees). Returns -1 for a
 * malformed body, -2 when out of memory. */
int dlpg__frame_parse(const uint8_t *body, size_t body_len, uint8_t *type, size_t *nfields,
                      dlpg__field_t **fields);

/* Sockets. Every blocking step waits with poll() until the absolute deadline (on
 * dlpg__now, base/clock.h), then fails; none blocks forever. */

/* Listen on host:port (host NULL or "" = every interface; port 0 = ephemeral) with
 * SO_REUSEADDR, non-blocking. Sets *fd and *bound_port. Errors name host:port. */
dlpg_status_t dlpg__net_listen(const char *host, int port, int *fd, int *bound_port);
/* One connection attempt to host:port within the deadline (TCP_NODELAY set). Returns OK,
 * or a status with a message (not retried here): DLPG_ERR_INVALID_ARGUMENT for a host name the
 * resolver does not know (final), DLPG_ERR_SYSTEM otherwise. */
dlpg_status_t dlpg__net_connect_once(const char *host, int port, double deadline, int *fd);
/* Send/receive exactly len bytes before deadline. Return OK, DLPG_ERR_TIMEOUT,
 * DLPG_ERR_REMOTE (peer closed) or DLPG_ERR_SYSTEM, with a message naming what. */
dlpg_status_t dlpg__net_send_all(int fd, const void *data, size_t len, double deadline,
                                 const char *peer);
dlpg_status_t dlpg__net_recv_all(int fd, void *data, size_t len, double deadline,
                                 const char *peer);

#ifdef __cplusplus
}
#endif
#endif
