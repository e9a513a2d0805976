/* The store object behind dlpg_store_t: a reference-counted handle over one of several
 * implementations (TCP client [+ embedded server], host callbacks, and those registered by
 * scheme from outside, such as Gloo's FileStore). */
#ifndef DLPG_STORE_STORE_H_
#define DLPG_STORE_STORE_H_

#include "dlpg/dlpg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Implementation table. Every function may be called from several threads; the
 * implementation serialises as it needs. Errors are recorded with dlpg__error. timeout_s
 * arguments are already resolved (> 0). */
typedef struct dlpg__store_vtbl {
  const char *kind; /* "tcp", "redis", "file", "ops" */
  dlpg_status_t (*set)(void *impl, const char *key, const void *value, size_t len);
  dlpg_status_t (*get)(void *impl, const char *key, double timeout_s, void *buf, size_t cap,
                       size_t *len);
  dlpg_status_t (*add)(void *impl, const char *key, int64_t delta, int64_t *result);
  dlpg_status_t (*wait)(void *impl, const char *const *keys, size_t nkeys, double timeout_s);
  dlpg_status_t (*check)(void *impl, const char *const *keys, size_t nkeys, int *all_exist);
  dlpg_status_t (*delete_key)(void *impl, const char *key, int *deleted);
  int (*port)(void *impl); /* -1 when not a TCP store */
  void (*destroy)(void *impl);
} dlpg__store_vtbl_t;

/* struct dlpg_store (dlpg_store_t) is defined in store.c only; the rest of the plugin sees
 * it through the functions below. */

/* Wrap impl (takes ownership; destroy is called when the last reference goes). */
dlpg_status_t dlpg__store_new(const dlpg__store_vtbl_t *vt, void *impl, double timeout_s,
                              const char *host, dlpg_store_t **out);
void dlpg__store_retain(dlpg_store_t *s);
void dlpg__store_release(dlpg_store_t *s);
/* Accessors for the backends. host: the address clients reach a TCP store at (Gloo binds
 * its listening socket to the local address that routes there); NULL for other stores.
 * timeout: the store's default timeout in seconds (> 0). */
const char *dlpg__store_host(const dlpg_store_t *s);
double dlpg__store_timeout(const dlpg_store_t *s);

/* A cap on the deadline of every store request the calling thread makes (an absolute
 * dlpg__now() time; 0: none), for a caller whose own deadline is shorter than the store's
 * timeout (the failure records written after an operation failed must not keep a rank that
 * lost its network for the store's whole timeout). Returns the previous cap, to restore. */
double dlpg__store_cap_deadline(double deadline);
/* now + timeout_s, or the calling thread's cap if that is earlier. */
double dlpg__store_call_deadline(double timeout_s);

/* URL schemes served outside plugin/store (file:// by the Gloo island) register an opener
 * here, typically from a static constructor, so the store never depends on its backends.
 * scheme includes "://" ("file://"); open receives the whole URL and reports a malformed
 * one as DLPG_ERR_INVALID_ARGUMENT (dlpg_store_open prefixes the URL). Registering a
 * scheme twice replaces the opener; at most DLPG__STORE_MAX_SCHEMES are kept. */
#define DLPG__STORE_MAX_SCHEMES 8
typedef dlpg_status_t (*dlpg__store_opener_t)(const char *url, double timeout_s,
                                              dlpg_store_t **out);
dlpg_status_t dlpg__store_register_scheme(const char *scheme, dlpg__store_opener_t open);

/* Implementations (each in its own file). */
dlpg_status_t dlpg__tcp_store_open(const char *host, int port, int serve, const char *token,
                                   double timeout_s, dlpg_store_t **out);
/* The general TCP opener behind dlpg__tcp_store_open and env://: connect to
 * connect_host:port; when bind_host is non-NULL also serve on bind_host:port (port 0:
 * ephemeral, then the client uses the bound port). store_host (NULL: connect_host) is
 * recorded as the store's host, the address other machines reach. token (NULL or "": none)
 * authenticates every connection (tcp_auth.h) and is required by the embedded server. */
dlpg_status_t dlpg__tcp_store_open_ex(const char *connect_host, int port, const char *bind_host,
                                      const char *token, double timeout_s,
                                      const char *store_host, dlpg_store_t **out);

/* A store on the Redis server host:port, database db; token (NULL: none) is sent with AUTH. */
dlpg_status_t dlpg__redis_store_open(const char *host, int port, int db, const char *token,
                                     double timeout_s, dlpg_store_t **out);

/* Standalone server (dlpg-store command, embedded server). */
typedef struct dlpg__tcp_server dlpg__tcp_server_t;
/* Bind host:port (host "" or "*": every interface; port 0: ephemeral) and serve on a
 * background thread. token (NULL or "": none) is required of every client; the server's
 * limits come from the DLPG_STORE_* parameters. */
dlpg_status_t dlpg__tcp_server_start(const char *host, int port, const char *token,
                                     dlpg__tcp_server_t **out);
int dlpg__tcp_server_port(const dlpg__tcp_server_t *s);
/* The address actually bound: "127.0.0.1:29501", "[::]:29501". */
const char *dlpg__tcp_server_address(const dlpg__tcp_server_t *s);
void dlpg__tcp_server_stop(dlpg__tcp_server_t *s);

#ifdef __cplusplus
}
#endif
#endif
