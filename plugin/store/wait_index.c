/* The server's waiter index (see wait_index.h): chained hashing on the key table's hash,
 * doubled when it holds twice as many waiters as buckets. */
#include "store/wait_index.h"

#include <stdlib.h>
#include <string.h>

#include "store/kv.h"

static void dlpg__widx_link(dlpg__waiter_t **bucket, dlpg__waiter_t *x) {
  x->bnext = *bucket;
  if (x->bnext) x->bnext->bpprev = &x->bnext;
  x->bpprev = bucket;
  *bucket = x;
}

static void dlpg__widx_unlink(dlpg__widx_t *w, dlpg__waiter_t *x) {
  if (!x->bpprev) return;
  *x->bpprev = x->bnext;
  if (x->bnext) x->bnext->bpprev = x->bpprev;
  x->bpprev = NULL;
  x->bnext = NULL;
  w->count--;
}

static int dlpg__widx_grow(dlpg__widx_t *w) {
  size_t nb = w->nbuckets ? w->nbuckets * 2 : 64;
  dlpg__waiter_t **b = (dlpg__waiter_t **)calloc(nb, sizeof *b);
  if (!b) return -1;
  for (size_t i = 0; i < w->nbuckets; ++i) {
    dlpg__waiter_t *x = w->buckets[i];
    while (x) {
      dlpg__waiter_t *next = x->bnext;
      dlpg__widx_link(&b[x->hash % nb], x);
      x = next;
    }
  }
  free(w->buckets);
  w->buckets = b;
  w->nbuckets = nb;
  return 0;
}

void dlpg__widx_free(dlpg__widx_t *w) {
  free(w->buckets);
  memset(w, 0, sizeof *w);
}

int dlpg__widx_add(dlpg__widx_t *w, dlpg__wait_list_t *list, struct dlpg__conn *conn,
                   const void *key, size_t klen) {
  if (w->count >= 2 * w->nbuckets && dlpg__widx_grow(w) != 0) return -1;
  dlpg__waiter_t *x = (dlpg__waiter_t *)malloc(sizeof *x + klen);
  if (!x) return -1;
  memcpy(x->key, key, klen);
  x->klen = klen;
  x->hash = dlpg__kv_hash(key, klen);
  x->conn = conn;
  x->cnext = NULL;
  dlpg__widx_link(&w->buckets[x->hash % w->nbuckets], x);
  w->count++;
  if (list->last) list->last->cnext = x;
  else list->first = x;
  list->last = x;
  list->missing++;
  return 0;
}

void dlpg__widx_fire(dlpg__widx_t *w, const void *key, size_t klen,
                     void (*fired)(struct dlpg__conn *conn, void *ctx), void *ctx) {
  if (!w->count) return;
  uint64_t h = dlpg__kv_hash(key, klen);
  dlpg__waiter_t *x = w->buckets[h % w->nbuckets];
  while (x) {
    dlpg__waiter_t *next = x->bnext;
    if (x->hash == h && x->klen == klen && memcmp(x->key, key, klen) == 0) {
      dlpg__widx_unlink(w, x);
      fired(x->conn, ctx);
    }
    x = next;
  }
}

void dlpg__widx_clear(dlpg__widx_t *w, dlpg__wait_list_t *list) {
  dlpg__waiter_t *x = list->first;
  while (x) {
    dlpg__waiter_t *next = x->cnext;
    dlpg__widx_unlink(w, x);
    free(x);
    x = next;
  }
  memset(list, 0, sizeof *list);
}
