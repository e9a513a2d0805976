/* Request handlers of the TCP store server: SET, GET, ADD, CHECK, DELETE and WAIT on the
 * key-value table (protocol in tcp_proto.h). Each validates its fields strictly: a request
 * with the wrong number of fields or a key or value beyond the protocol's sizes is
 * malformed, and the event loop closes that connection. A request within the protocol but
 * over one of the server's limits (DLPG_STORE_MAX_*) is answered ERROR naming the limit;
 * the connection and every other client carry on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/tcp_server_internal.h"

/* GET replies up to this size are always sent; larger ones only while the server's queued
 * replies stay under DLPG_STORE_MAX_QUEUED_BYTES (else BUSY, and the client retries). */
#define DLPG__SMALL_REPLY 65536u

static void dlpg__reply_u8(dlpg__tcp_server_t *s, dlpg__conn_t *c, uint8_t v) {
  const void *d[1] = {&v};
  size_t l[1] = {1};
  dlpg__srv_reply(s, c, DLPG__REPLY_OK, 1, d, l);
}

static int dlpg__key_ok(const dlpg__field_t *f) {
  return f->len >= 1 && f->len <= DLPG_STORE_MAX_KEY_LEN;
}

/* Answer ERROR when a key of f[0..n) is over DLPG_STORE_MAX_KEY_BYTES; 1 when answered. */
static int dlpg__keys_over(dlpg__tcp_server_t *s, dlpg__conn_t *c, const dlpg__field_t *f,
                           size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (f[i].len > s->lim.max_key_bytes) {
      dlpg__srv_reply_msg(s, c, DLPG__REPLY_ERROR,
                          "a key of %u bytes exceeds DLPG_STORE_MAX_KEY_BYTES (%zu)", f[i].len,
                          s->lim.max_key_bytes);
      return 1;
    }
  return 0;
}

/* Answer ERROR when storing vlen bytes under key would break a storage limit; 1 when
 * answered. Replacing a value counts only the difference. */
static int dlpg__store_over(dlpg__tcp_server_t *s, dlpg__conn_t *c, const dlpg__field_t *key,
                            size_t vlen) {
  const dlpg__store_limits_t *l = &s->lim;
  if (vlen > l->max_value_bytes) {
    dlpg__srv_reply_msg(s, c, DLPG__REPLY_ERROR,
                        "a value of %zu bytes exceeds DLPG_STORE_MAX_VALUE_BYTES (%zu)", vlen,
                        l->max_value_bytes);
    return 1;
  }
  dlpg__kv_entry_t *e = dlpg__kv_find(&s->kv, key->data, key->len);
  if (!e && s->kv.count >= l->max_keys) {
    dlpg__srv_reply_msg(s, c, DLPG__REPLY_ERROR,
                        "the store holds %zu keys, its limit DLPG_STORE_MAX_KEYS", s->kv.count);
    return 1;
  }
  size_t after = s->kv.bytes + vlen + (e ? 0 : key->len) - (e ? e->vlen : 0);
  if (after > l->max_bytes && (!e || vlen > e->vlen)) {
    dlpg__srv_reply_msg(s, c, DLPG__REPLY_ERROR,
                        "storing %zu bytes would bring the store to %zu bytes, over "
                        "DLPG_STORE_MAX_BYTES (%zu)",
                        vlen, after, l->max_bytes);
    return 1;
  }
  return 0;
}

/* Parse a stored value as a decimal int64 (optional sign, digits only). */
static int dlpg__parse_i64(const uint8_t *p, size_t n, int64_t *out) {
  if (n == 0 || n > 20) return -1;
  size_t i = 0;
  int neg = 0;
  if (p[0] == '-' || p[0] == '+') {
    neg = p[0] == '-';
    i = 1;
    if (n == 1) return -1;
  }
  int64_t v = 0;
  for (; i < n; ++i) {
    if (p[i] < '0' || p[i] > '9') return -1;
    int d = p[i] - '0';
    if (__builtin_mul_overflow(v, 10, &v)) return -1;
    if (__builtin_add_overflow(v, neg ? -d : d, &v)) return -1;
  }
  *out = v;
  return 0;
}

/* Store value under key and wake the WAITs it completes; 0, or -1 when out of memory. */
static int dlpg__set_key(dlpg__tcp_server_t *s, const dlpg__field_t *key, const void *value,
                         size_t vlen) {
  if (dlpg__kv_set(&s->kv, key->data, key->len, value, vlen) != 0) return -1;
  dlpg__srv_key_set(s, key->data, key->len);
  return 0;
}

static void dlpg__cmd_add(dlpg__tcp_server_t *s, dlpg__conn_t *c, const dlpg__field_t *f) {
  int64_t delta = (int64_t)dlpg__get_u64(f[1].data), cur = 0, next;
  dlpg__kv_entry_t *e = dlpg__kv_find(&s->kv, f[0].data, f[0].len);
  const char *err = NULL;
  if (e && dlpg__parse_i64(e->value, e->vlen, &cur) != 0)
    err = "the value is not a decimal integer";
  else if (__builtin_add_overflow(cur, delta, &next))
    err = "the sum overflows int64";
  if (err) {
    dlpg__srv_reply_msg(s, c, DLPG__REPLY_ERROR, "%s", err);
    return;
  }
  char text[32];
  int tn = snprintf(text, sizeof text, "%lld", (long long)next);
  if (dlpg__store_over(s, c, &f[0], (size_t)tn)) return;
  if (dlpg__set_key(s, &f[0], text, (size_t)tn) != 0) {
    dlpg__conn_kill(s, c, "out of memory");
    return;
  }
  uint8_t out[8];
  dlpg__put_u64(out, (uint64_t)next);
  const void *d[1] = {out};
  size_t l[1] = {8};
  dlpg__srv_reply(s, c, DLPG__REPLY_OK, 1, d, l);
}

static void dlpg__cmd_get(dlpg__tcp_server_t *s, dlpg__conn_t *c, const dlpg__field_t *key) {
  dlpg__kv_entry_t *e = dlpg__kv_find(&s->kv, key->data, key->len);
  if (!e) {
    dlpg__srv_reply(s, c, DLPG__REPLY_NOT_FOUND, 0, NULL, NULL);
    return;
  }
  if (e->vlen > DLPG__SMALL_REPLY && s->queued + e->vlen > s->lim.max_queued_bytes) {
    dlpg__srv_reply_msg(s, c, DLPG__REPLY_BUSY,
                        "%zu bytes of replies are queued unread, the server's limit "
                        "DLPG_STORE_MAX_QUEUED_BYTES (%zu) leaves no room for %zu more",
                        s->queued, s->lim.max_queued_bytes, e->vlen);
    return;
  }
  const void *d[1] = {e->value};
  size_t l[1] = {e->vlen};
  dlpg__srv_reply(s, c, DLPG__REPLY_OK, 1, d, l);
}

/* One parked key was set: answer the WAIT once it has all its keys. */
static void dlpg__waiter_fired(dlpg__conn_t *c, void *ctx) {
  dlpg__tcp_server_t *s = (dlpg__tcp_server_t *)ctx;
  if (--c->wait.missing > 0 || c->dead) return;
  dlpg__conn_clear_wait(s, c);
  dlpg__srv_reply(s, c, DLPG__REPLY_OK, 0, NULL, NULL);
  /* Frames it sent meanwhile run from the event loop, not from inside another request. */
  if (!c->on_ready) {
    c->on_ready = 1;
    c->rnext = s->ready;
    s->ready = c;
  }
}

void dlpg__srv_key_set(dlpg__tcp_server_t *s, const uint8_t *key, size_t klen) {
  dlpg__widx_fire(&s->waiters, key, klen, dlpg__waiter_fired, s);
}

/* Park a WAIT whose keys are not all there yet (f[0] is the timeout in ms). */
static void dlpg__cmd_wait(dlpg__tcp_server_t *s, dlpg__conn_t *c, const dlpg__field_t *f,
                           size_t n) {
  uint64_t ms = dlpg__get_u64(f[0].data);
  if ((double)ms > s->lim.max_wait_s * 1000.0) {
    dlpg__srv_reply_msg(s, c, DLPG__REPLY_ERROR,
                        "a WAIT of %.3f s exceeds DLPG_STORE_MAX_WAIT_S (%g s)",
                        (double)ms / 1000.0, s->lim.max_wait_s);
    return;
  }
  for (size_t i = 1; i < n; ++i) {
    if (dlpg__kv_find(&s->kv, f[i].data, f[i].len)) continue;
    if (dlpg__widx_add(&s->waiters, &c->wait, c, f[i].data, f[i].len) != 0) {
      dlpg__conn_clear_wait(s, c);
      dlpg__conn_kill(s, c, "out of memory");
      return;
    }
  }
  if (!c->wait.missing) {
    dlpg__conn_clear_wait(s, c);
    dlpg__srv_reply(s, c, DLPG__REPLY_OK, 0, NULL, NULL);
    return;
  }
  c->waiting = 1;
  c->deadline = dlpg__now() + (double)ms / 1000.0;
  if (!s->nearest_wait || c->deadline < s->nearest_wait) s->nearest_wait = c->deadline;
}

/* Execute one request. Returns -1 when it is malformed (the caller closes the connection). */
int dlpg__srv_handle(dlpg__tcp_server_t *s, dlpg__conn_t *c, uint8_t type,
                     const dlpg__field_t *f, size_t n) {
  size_t first_key = 0;
  switch (type) {
    case DLPG__CMD_SET:
    case DLPG__CMD_ADD:
      if (n != 2 || !dlpg__key_ok(&f[0])) return -1;
      if (dlpg__keys_over(s, c, f, 1)) return 0;
      if (type == DLPG__CMD_ADD) {
        if (f[1].len != 8) return -1;
        dlpg__cmd_add(s, c, f);
        return 0;
      }
      if (f[1].len > DLPG_STORE_MAX_VALUE_LEN) return -1;
      if (dlpg__store_over(s, c, &f[0], f[1].len)) return 0;
      if (dlpg__set_key(s, &f[0], f[1].data, f[1].len) != 0) {
        dlpg__conn_kill(s, c, "out of memory");
        return 0;
      }
      dlpg__srv_reply(s, c, DLPG__REPLY_OK, 0, NULL, NULL);
      return 0;
    case DLPG__CMD_GET:
      if (n != 1 || !dlpg__key_ok(&f[0])) return -1;
      if (!dlpg__keys_over(s, c, f, 1)) dlpg__cmd_get(s, c, &f[0]);
      return 0;
    case DLPG__CMD_DELETE:
      if (n != 1 || !dlpg__key_ok(&f[0])) return -1;
      dlpg__reply_u8(s, c, (uint8_t)dlpg__kv_delete(&s->kv, f[0].data, f[0].len));
      return 0;
    case DLPG__CMD_WAIT:
      if (n < 1 || f[0].len != 8) return -1;
      first_key = 1;
      /* fall through */
    case DLPG__CMD_CHECK: {
      for (size_t i = first_key; i < n; ++i)
        if (!dlpg__key_ok(&f[i])) return -1;
      if (n - first_key > s->lim.max_wait_keys) {
        dlpg__srv_reply_msg(s, c, DLPG__REPLY_ERROR,
                            "%zu keys in one %s exceed DLPG_STORE_MAX_WAIT_KEYS (%zu)",
                            n - first_key, first_key ? "WAIT" : "CHECK", s->lim.max_wait_keys);
        return 0;
      }
      /* (CHECK may have no keys: f is then NULL, and NULL + 0 is undefined in C.) */
      if (n > first_key && dlpg__keys_over(s, c, f + first_key, n - first_key)) return 0;
      if (type == DLPG__CMD_WAIT) {
        dlpg__cmd_wait(s, c, f, n);
        return 0;
      }
      int all = 1;
      for (size_t i = 0; i < n && all; ++i)
        if (!dlpg__kv_find(&s->kv, f[i].data, f[i].len)) all = 0;
      dlpg__reply_u8(s, c, (uint8_t)all);
      return 0;
    }
    case DLPG__CMD_HELLO:
      /* A client with a token, on a store without one: refuse rather than run unprotected. */
      dlpg__srv_reply_msg(s, c, DLPG__REPLY_AUTH_FAILED,
                          "authentication failed: the client has a token but this store server "
                          "has none (start it with DLPG_STORE_TOKEN or ?token=)");
      dlpg__conn_kill(s, c, "a token on the client only");
      return 0;
    default:
      return -1;
  }
}
