/* The key-value table of the TCP store server: byte-string keys and values (both may hold
 * NULs), chained hashing, owned copies. Single-threaded: only the server thread uses it. */
#ifndef DLPG_STORE_KV_H_
#define DLPG_STORE_KV_H_

#include <stddef.h>
#include <stdint.h>

typedef struct dlpg__kv_entry {
  struct dlpg__kv_entry *next;
  uint64_t hash;
  uint8_t *key;
  size_t klen;
  uint8_t *value;
  size_t vlen;
} dlpg__kv_entry_t;

typedef struct dlpg__kv {
  dlpg__kv_entry_t **buckets;
  size_t nbuckets, count;
  size_t bytes; /* key and value bytes held (the store's quota counts these) */
} dlpg__kv_t;

/* The table's hash (FNV-1a, 64 bit); the waiter index (wait_index.c) uses it too. */
uint64_t dlpg__kv_hash(const void *p, size_t n);

void dlpg__kv_free(dlpg__kv_t *kv);
/* The entry of key, or NULL. */
dlpg__kv_entry_t *dlpg__kv_find(const dlpg__kv_t *kv, const void *key, size_t klen);
/* Insert or replace (the value is copied). 0 on success, -1 when out of memory. */
int dlpg__kv_set(dlpg__kv_t *kv, const void *key, size_t klen, const void *value, size_t vlen);
/* 1 when key existed and was removed, else 0. */
int dlpg__kv_delete(dlpg__kv_t *kv, const void *key, size_t klen);

#endif
