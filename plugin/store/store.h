/* The store object behind dlpg_store_t: a reference-counted handle over one of several
 * implementations (TCP client [+ embedded server], Gloo FileStore, host callbacks). */
#ifndef DLPG_STORE_STORE_H_
#define DLPG_STORE_STORE_H_

#include <stdatomic.h>
#include "dlpg/dlpg.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Implementation table. Every function may be called from several threads; the
 * implementation serialises as it needs. Errors are recorded with dlpg__error. timeout_s
 * arguments are already resolved (> 0). */
typedef struct dlpg__store_vtbl {
  const char *kind; /* "tcp", "file", "ops" */
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

struct dlpg_store {
  const dlpg__store_vtbl_t *vt;
  void *impl;
  double timeout_s;
  atomic_int refs;
  char *host; /* for TCP stores: the host clients reach (Gloo binds to the matching route) */
};

/* Wrap impl (takes ownership; destroy is called when the last reference goes). */
dlpg_status_t dlpg__store_new(const dlpg__store_vtbl_t *vt, void *impl, double timeout_s,
                              const char *host, dlpg_store_t **out);
void dlpg__store_retain(dlpg_store_t *s);
void dlpg__store_release(dlpg_store_t *s);
/* Get the whole value of key (timeout_s <= 0: the store's timeout) into a malloc'ed buffer
 * that grows until the value fits; the caller frees *value. For internal users (Gloo's
 * store adapter, the NCCL unique-id exchange) that do not know the length in advance. */
dlpg_status_t dlpg__store_get_alloc(dlpg_store_t *s, const char *key, double timeout_s,
                                    void **value, size_t *len);

/* Implementations (each in its own file). */
dlpg_status_t dlpg__tcp_store_open(const char *host, int port, int serve, double timeout_s,
                                   dlpg_store_t **out);
dlpg_status_t dlpg__file_store_open(const char *path, double timeout_s, dlpg_store_t **out); /* gloo/ */
/* The general TCP opener behind dlpg__tcp_store_open and env://: connect to
 * connect_host:port; when bind_host is non-NULL also serve on bind_host:port (port 0:
 * ephemeral, then the client uses the bound port). store_host (NULL: connect_host) is
 * recorded as the store's host, the address other machines reach. */
dlpg_status_t dlpg__tcp_store_open_ex(const char *connect_host, int port, const char *bind_host,
                                      double timeout_s, const char *store_host,
                                      dlpg_store_t **out);

/* Standalone server (dlpg-store command, embedded server). */
typedef struct dlpg__tcp_server dlpg__tcp_server_t;
/* Bind host:port (port 0: ephemeral) and serve on a background thread. */
dlpg_status_t dlpg__tcp_server_start(const char *host, int port, dlpg__tcp_server_t **out);
int dlpg__tcp_server_port(const dlpg__tcp_server_t *s);
void dlpg__tcp_server_stop(dlpg__tcp_server_t *s);

#ifdef __cplusplus
}
#endif
#endif
