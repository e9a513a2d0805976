/* Chained hash table behind the TCP store server (see kv.h). The table doubles when it
 * holds twice as many entries as buckets, so lookups stay O(1) with many keys. */
#include "store/kv.h"

#include <stdlib.h>
#include <string.h>

/* FNV-1a, 64 bit. */
uint64_t dlpg__kv_hash(const void *data, size_t n) {
  const uint8_t *p = (const uint8_t *)data;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

void dlpg__kv_free(dlpg__kv_t *kv) {
  for (size_t b = 0; b < kv->nbuckets; ++b) {
    dlpg__kv_entry_t *e = kv->buckets[b];
    while (e) {
      dlpg__kv_entry_t *next = e->next;
      free(e->key);
      free(e->value);
      free(e);
      e = next;
    }
  }
  free(kv->buckets);
  memset(kv, 0, sizeof *kv);
}

dlpg__kv_entry_t *dlpg__kv_find(const dlpg__kv_t *kv, const void *key, size_t klen) {
  if (!kv->nbuckets) return NULL;
  uint64_t h = dlpg__kv_hash(key, klen);
  for (dlpg__kv_entry_t *e = kv->buckets[h % kv->nbuckets]; e; e = e->next)
    if (e->hash == h && e->klen == klen && memcmp(e->key, key, klen) == 0) return e;
  return NULL;
}

static int dlpg__kv_grow(dlpg__kv_t *kv) {
  size_t nb = kv->nbuckets ? kv->nbuckets * 2 : 64;
  dlpg__kv_entry_t **nbk = (dlpg__kv_entry_t **)calloc(nb, sizeof *nbk);
  if (!nbk) return -1;
  for (size_t b = 0; b < kv->nbuckets; ++b) {
    dlpg__kv_entry_t *e = kv->buckets[b];
    while (e) {
      dlpg__kv_entry_t *next = e->next;
      e->next = nbk[e->hash % nb];
      nbk[e->hash % nb] = e;
      e = next;
    }
  }
  free(kv->buckets);
  kv->buckets = nbk;
  kv->nbuckets = nb;
  return 0;
}

int dlpg__kv_set(dlpg__kv_t *kv, const void *key, size_t klen, const void *value, size_t vlen) {
  /* malloc(0) may return NULL; keep one byte so an empty value is still a valid pointer. */
  uint8_t *v = (uint8_t *)malloc(vlen ? vlen : 1);
  if (!v) return -1;
  if (vlen) memcpy(v, value, vlen);
  dlpg__kv_entry_t *e = dlpg__kv_find(kv, key, klen);
  if (e) {
    free(e->value);
    kv->bytes = kv->bytes - e->vlen + vlen;
    e->value = v;
    e->vlen = vlen;
    return 0;
  }
  if (kv->count >= 2 * kv->nbuckets && dlpg__kv_grow(kv) != 0) goto oom;
  e = (dlpg__kv_entry_t *)calloc(1, sizeof *e);
  if (!e) goto oom;
  e->key = (uint8_t *)malloc(klen ? klen : 1);
  if (!e->key) {
    free(e);
    goto oom;
  }
  memcpy(e->key, key, klen);
  e->klen = klen;
  e->hash = dlpg__kv_hash(key, klen);
  e->value = v;
  e->vlen = vlen;
  e->next = kv->buckets[e->hash % kv->nbuckets];
  kv->buckets[e->hash % kv->nbuckets] = e;
  kv->count++;
  kv->bytes += klen + vlen;
  return 0;
oom:
  free(v);
  return -1;
}

int dlpg__kv_delete(dlpg__kv_t *kv, const void *key, size_t klen) {
  if (!kv->nbuckets) return 0;
  uint64_t h = dlpg__kv_hash(key, klen);
  dlpg__kv_entry_t **pp = &kv->buckets[h % kv->nbuckets];
  for (; *pp; pp = &(*pp)->next) {
    dlpg__kv_entry_t *e = *pp;
    if (e->hash == h && e->klen == klen && memcmp(e->key, key, klen) == 0) {
      *pp = e->next;
      kv->bytes -= e->klen + e->vlen;
      free(e->key);
      free(e->value);
      free(e);
      kv->count--;
      return 1;
    }
  }
  return 0;
}
