/* Parked WAITs of the TCP store server, indexed by key: a SET or ADD touches only the
 * waiters of its own key, so an event costs what it wakes, not every parked key. Each
 * connection's waiters also form a list in request order (for the TIMEOUT reply, which names
 * the keys still missing). Single-threaded, like the rest of the server. */
#ifndef DLPG_STORE_WAIT_INDEX_H_
#define DLPG_STORE_WAIT_INDEX_H_

#include <stddef.h>
#include <stdint.h>

struct dlpg__conn;

typedef struct dlpg__waiter {
  struct dlpg__waiter *bnext, **bpprev; /* bucket chain (bpprev NULL once fired) */
  struct dlpg__waiter *cnext;           /* the connection's list, in request order */
  struct dlpg__conn *conn;
  uint64_t hash;
  size_t klen;
  uint8_t key[]; /* klen bytes */
} dlpg__waiter_t;

/* One connection's parked keys. */
typedef struct dlpg__wait_list {
  dlpg__waiter_t *first, *last;
  size_t missing; /* keys not set yet */
} dlpg__wait_list_t;

typedef struct dlpg__widx {
  dlpg__waiter_t **buckets;
  size_t nbuckets, count;
} dlpg__widx_t;

void dlpg__widx_free(dlpg__widx_t *w);
/* Park conn on key (copied), appending to list. 0, or -1 when out of memory. */
int dlpg__widx_add(dlpg__widx_t *w, dlpg__wait_list_t *list, struct dlpg__conn *conn,
                   const void *key, size_t klen);
/* key was set: every waiter on it leaves the index (staying on its connection's list) and
 * fired(conn, ctx) is called once per waiter, to count the key as found. */
void dlpg__widx_fire(dlpg__widx_t *w, const void *key, size_t klen,
                     void (*fired)(struct dlpg__conn *conn, void *ctx), void *ctx);
/* Drop every waiter of list (answered, timed out or closed). */
void dlpg__widx_clear(dlpg__widx_t *w, dlpg__wait_list_t *list);

#endif
