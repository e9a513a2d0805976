/* The store's authentication primitives (protocol in tcp_auth.h), all from libcrypto. */
#include "store/tcp_auth.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include "store/tcp_proto.h"

int dlpg__auth_random(uint8_t *p, size_t n) { return RAND_bytes(p, (int)n) == 1 ? 0 : -1; }

/* libcrypto's HMAC implementation, fetched once (the lookup costs more than a short MAC). */
static EVP_MAC *dlpg__hmac_impl;
static pthread_once_t dlpg__hmac_once = PTHREAD_ONCE_INIT;
static void dlpg__hmac_fetch(void) { dlpg__hmac_impl = EVP_MAC_fetch(NULL, "HMAC", NULL); }

/* HMAC-SHA256 over two pieces. */
static int dlpg__hmac2(const void *key, size_t klen, const void *a, size_t alen, const void *b,
                       size_t blen, uint8_t out[DLPG__AUTH_MAC]) {
  pthread_once(&dlpg__hmac_once, dlpg__hmac_fetch);
  EVP_MAC_CTX *ctx = dlpg__hmac_impl ? EVP_MAC_CTX_new(dlpg__hmac_impl) : NULL;
  char digest[] = "SHA256";
  OSSL_PARAM params[2] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                          OSSL_PARAM_construct_end()};
  size_t outl = 0;
  int ok = ctx && EVP_MAC_init(ctx, (const unsigned char *)key, klen, params) == 1 &&
           (!alen || EVP_MAC_update(ctx, (const unsigned char *)a, alen) == 1) &&
           (!blen || EVP_MAC_update(ctx, (const unsigned char *)b, blen) == 1) &&
           EVP_MAC_final(ctx, out, &outl, DLPG__AUTH_MAC) == 1 && outl == DLPG__AUTH_MAC;
  EVP_MAC_CTX_free(ctx);
  return ok ? 0 : -1;
}

int dlpg__auth_proof(const char *token, const char *label, const uint8_t cn[DLPG__AUTH_NONCE],
                     const uint8_t sn[DLPG__AUTH_NONCE], uint8_t out[DLPG__AUTH_MAC]) {
  char tag[48];
  size_t tlen = (size_t)snprintf(tag, sizeof tag, "dlpg-store v1 %s", label);
  uint8_t nonces[2 * DLPG__AUTH_NONCE];
  memcpy(nonces, cn, DLPG__AUTH_NONCE);
  memcpy(nonces + DLPG__AUTH_NONCE, sn, DLPG__AUTH_NONCE);
  return dlpg__hmac2(token, strlen(token), tag, tlen, nonces, sizeof nonces, out);
}

int dlpg__auth_start(dlpg__auth_session_t *s, const char *token, const uint8_t *cn,
                     const uint8_t *sn) {
  memset(s, 0, sizeof *s);
  if (dlpg__auth_proof(token, "session", cn, sn, s->key) != 0) return -1;
  s->on = 1;
  return 0;
}

int dlpg__auth_frame_mac(const dlpg__auth_session_t *s, int dir, uint64_t counter,
                         const uint8_t *frame, size_t len, uint8_t out[DLPG__AUTH_MAC]) {
  uint8_t head[9];
  head[0] = (uint8_t)dir;
  dlpg__put_u64(head + 1, counter);
  return dlpg__hmac2(s->key, sizeof s->key, head, sizeof head, frame, len, out);
}

int dlpg__auth_equal(const uint8_t *a, const uint8_t *b, size_t n) {
  return CRYPTO_memcmp(a, b, n) == 0;
}

void dlpg__auth_wipe(void *p, size_t n) { OPENSSL_cleanse(p, n); }
