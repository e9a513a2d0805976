/* Request handlers of the TCP store server: SET, GET, ADD, CHECK, DELETE and WAIT on the
 * key-value table (protocol in tcp_proto.h). Each validates its fields strictly: a request
 * with the wrong number of fields, an empty or over-long key or an over-long value is
 * malformed, and the event loop closes that connection. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/tcp_server_internal.h"

void dlpg__srv_reply(dlpg__tcp_server_t *s, dlpg__conn_t *c, uint8_t type, size_t n,
                     const void *const *data, const size_t *lens) {
  if (dlpg__frame_append(&c->wbuf, type, n, data, lens) != 0) {
    dlpg__conn_kill(c, "out of memory for a reply");
    return;
  }
  dlpg__conn_flush(s, c);
}

static void dlpg__reply_u8(dlpg__tcp_server_t *s, dlpg__conn_t *c, uint8_t v) {
  const void *d[1] = {&v};
  size_t l[1] = {1};
  dlpg__srv_reply(s, c, DLPG__REPLY_OK, 1, d, l);
}

static int dlpg__key_ok(const dlpg__field_t *f) {
  return f->len >= 1 && f->len <= DLPG_STORE_MAX_KEY_LEN;
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

static void dlpg__cmd_add(dlpg__tcp_server_t *s, dlpg__conn_t *c, const dlpg__field_t *f) {
  int64_t delta = (int64_t)dlpg__get_u64(f[1].data), cur = 0, next;
  dlpg__kv_entry_t *e = dlpg__kv_find(&s->kv, f[0].data, f[0].len);
  const char *err = NULL;
  if (e && dlpg__parse_i64(e->value, e->vlen, &cur) != 0)
    err = "the value is not a decimal integer";
  else if (__builtin_add_overflow(cur, delta, &next))
    err = "the sum overflows int64";
  if (err) {
    const void *d[1] = {err};
    size_t l[1] = {strlen(err)};
    dlpg__srv_reply(s, c, DLPG__REPLY_ERROR, 1, d, l);
    return;
  }
  char text[32];
  int tn = snprintf(text, sizeof text, "%lld", (long long)next);
  if (dlpg__kv_set(&s->kv, f[0].data, f[0].len, text, (size_t)tn) != 0) {
    dlpg__conn_kill(c, "out of memory");
    return;
  }
  s->dirty = 1;
  uint8_t out[8];
  dlpg__put_u64(out, (uint64_t)next);
  const void *d[1] = {out};
  size_t l[1] = {8};
  dlpg__srv_reply(s, c, DLPG__REPLY_OK, 1, d, l);
}

/* Park a WAIT whose keys are not all there yet (f[0] is the timeout). */
static void dlpg__cmd_wait(dlpg__tcp_server_t *s, dlpg__conn_t *c, const dlpg__field_t *f,
                           size_t n) {
  int all = 1;
  for (size_t i = 1; i < n && all; ++i)
    if (!dlpg__kv_find(&s->kv, f[i].data, f[i].len)) all = 0;
  if (all) {
    dlpg__srv_reply(s, c, DLPG__REPLY_OK, 0, NULL, NULL);
    return;
  }
  uint64_t ms = dlpg__get_u64(f[0].data);
  c->wkeys = (uint8_t **)calloc(n - 1, sizeof *c->wkeys);
  c->wlens = (size_t *)calloc(n - 1, sizeof *c->wlens);
  if (!c->wkeys || !c->wlens) goto oom;
  for (size_t i = 1; i < n; ++i) {
    c->wkeys[i - 1] = (uint8_t *)malloc(f[i].len);
    if (!c->wkeys[i - 1]) goto oom;
    memcpy(c->wkeys[i - 1], f[i].data, f[i].len);
    c->wlens[i - 1] = f[i].len;
    c->nwkeys = i;
  }
  c->waiting = 1;
  c->deadline = dlpg__now() + (double)ms / 1000.0;
  return;
oom:
  dlpg__conn_clear_wait(c);
  dlpg__conn_kill(c, "out of memory");
}

/* Execute one request. Returns -1 when it is malformed (the caller closes the connection). */
int dlpg__srv_handle(dlpg__tcp_server_t *s, dlpg__conn_t *c, uint8_t type,
                     const dlpg__field_t *f, size_t n) {
  size_t first_key = 0;
  switch (type) {
    case DLPG__CMD_SET:
    case DLPG__CMD_ADD:
      if (n != 2 || !dlpg__key_ok(&f[0])) return -1;
      if (type == DLPG__CMD_ADD) {
        if (f[1].len != 8) return -1;
        dlpg__cmd_add(s, c, f);
        return 0;
      }
      if (f[1].len > DLPG_STORE_MAX_VALUE_LEN) return -1;
      if (dlpg__kv_set(&s->kv, f[0].data, f[0].len, f[1].data, f[1].len) != 0) {
        dlpg__conn_kill(c, "out of memory");
        return 0;
      }
      s->dirty = 1;
      dlpg__srv_reply(s, c, DLPG__REPLY_OK, 0, NULL, NULL);
      return 0;
    case DLPG__CMD_GET: {
      if (n != 1 || !dlpg__key_ok(&f[0])) return -1;
      dlpg__kv_entry_t *e = dlpg__kv_find(&s->kv, f[0].data, f[0].len);
      if (!e) {
        dlpg__srv_reply(s, c, DLPG__REPLY_NOT_FOUND, 0, NULL, NULL);
      } else {
        const void *d[1] = {e->value};
        size_t l[1] = {e->vlen};
        dlpg__srv_reply(s, c, DLPG__REPLY_OK, 1, d, l);
      }
      return 0;
    }
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
    default:
      return -1;
  }
}
