/* Framing of the dlpg TCP store protocol (layout documented in tcp_proto.h): growable
 * buffers, big-endian integers, building and parsing frames with strict size checks. */
#include "store/tcp_proto.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

void dlpg__buf_free(dlpg__buf_t *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

int dlpg__buf_reserve(dlpg__buf_t *b, size_t cap) {
  if (cap <= b->cap) return 0;
  size_t ncap = b->cap ? b->cap : 256;
  while (ncap < cap) ncap *= 2;
  uint8_t *p = (uint8_t *)realloc(b->data, ncap);
  if (!p) return -1;
  b->data = p;
  b->cap = ncap;
  return 0;
}

int dlpg__buf_append(dlpg__buf_t *b, const void *data, size_t len) {
  if (dlpg__buf_reserve(b, b->len + len) != 0) return -1;
  if (len) memcpy(b->data + b->len, data, len);
  b->len += len;
  return 0;
}

void dlpg__buf_consume(dlpg__buf_t *b, size_t n) {
  if (n >= b->len) {
    b->len = 0;
  } else {
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
  }
  /* Give back the memory of a large value once it has gone through. */
  if (b->len == 0 && b->cap > (1u << 20)) dlpg__buf_free(b);
}

void dlpg__put_u32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

uint32_t dlpg__get_u32(const uint8_t *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

void dlpg__put_u64(uint8_t *p, uint64_t v) {
  dlpg__put_u32(p, (uint32_t)(v >> 32));
  dlpg__put_u32(p + 4, (uint32_t)v);
}

uint64_t dlpg__get_u64(const uint8_t *p) {
  return ((uint64_t)dlpg__get_u32(p) << 32) | dlpg__get_u32(p + 4);
}

int dlpg__frame_append(dlpg__buf_t *b, uint8_t type, size_t nfields, const void *const *data,
                       const size_t *lens) {
  if (nfields > DLPG__PROTO_MAX_FIELDS) return -1;
  size_t body = DLPG__PROTO_BODY_HEAD;
  for (size_t i = 0; i < nfields; ++i) {
    if (lens[i] > DLPG__PROTO_MAX_BODY) return -1;
    body += 4 + lens[i];
    if (body > DLPG__PROTO_MAX_BODY) return -1;
  }
  if (dlpg__buf_reserve(b, b->len + DLPG__PROTO_HEADER + body) != 0) return -1;
  uint8_t *p = b->data + b->len;
  dlpg__put_u32(p, (uint32_t)body);
  p[4] = type;
  dlpg__put_u32(p + 5, (uint32_t)nfields);
  p += DLPG__PROTO_HEADER + DLPG__PROTO_BODY_HEAD;
  for (size_t i = 0; i < nfields; ++i) {
    dlpg__put_u32(p, (uint32_t)lens[i]);
    if (lens[i]) memcpy(p + 4, data[i], lens[i]);
    p += 4 + lens[i];
  }
  b->len += DLPG__PROTO_HEADER + body;
  return 0;
}

int dlpg__frame_parse(const uint8_t *body, size_t body_len, uint8_t *type, size_t *nfields,
                      dlpg__field_t **fields) {
  *fields = NULL;
  *nfields = 0;
  if (body_len < DLPG__PROTO_BODY_HEAD || body_len > DLPG__PROTO_MAX_BODY) return -1;
  uint32_t n = dlpg__get_u32(body + 1);
  if (n > DLPG__PROTO_MAX_FIELDS) return -1;
  /* Each field needs at least its 4-byte length; reject impossible counts before
   * allocating anything. */
  if ((size_t)n * 4u > body_len - DLPG__PROTO_BODY_HEAD) return -1;
  dlpg__field_t *f = NULL;
  if (n) {
    f = (dlpg__field_t *)malloc(sizeof(*f) * n);
    if (!f) return -2;
  }
  size_t off = DLPG__PROTO_BODY_HEAD;
  for (uint32_t i = 0; i < n; ++i) {
    if (body_len - off < 4) goto bad;
    uint32_t len = dlpg__get_u32(body + off);
    off += 4;
    if (len > body_len - off) goto bad;
    f[i].data = body + off;
    f[i].len = len;
    off += len;
  }
  if (off != body_len) goto bad;
  *type = body[0];
  *nfields = n;
  *fields = f;
  return 0;
bad:
  free(f);
  return -1;
}
