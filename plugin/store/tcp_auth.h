/* Authentication of the TCP store's connections with a shared secret (DLPG_STORE_TOKEN or
 * ?token=), on OpenSSL's libcrypto (HMAC-SHA256, RAND_bytes, CRYPTO_memcmp).
 *
 * Handshake, before any command (both sides hold the token):
 *   client -> HELLO  cn                      cn: 32 fresh random bytes
 *   server -> OK     sn, HMAC(token, "dlpg-store v1 server" | cn | sn)
 *   client -> AUTH   HMAC(token, "dlpg-store v1 client" | cn | sn)
 *   server -> OK (the first authenticated frame) | AUTH_FAILED and close
 * Each side checks the other's proof in constant time, so neither a client nor a server
 * without the token gets through, and a recorded handshake is useless (fresh nonces).
 * Session key K = HMAC(token, "dlpg-store v1 session" | cn | sn). Every later frame, both
 * ways, is followed by HMAC(K, direction | u64 counter | frame): a frame injected, replayed,
 * reordered or altered on the connection is detected and the connection dropped. The
 * contents travel in clear (integrity, not confidentiality). */
#ifndef DLPG_STORE_TCP_AUTH_H_
#define DLPG_STORE_TCP_AUTH_H_

#include <stddef.h>
#include <stdint.h>

#define DLPG__AUTH_NONCE 32u
#define DLPG__AUTH_MAC 32u
#define DLPG__AUTH_TOKEN_MAX 1024u

/* Directions, mixed into every frame's MAC. */
enum { DLPG__AUTH_TO_SERVER = 'C', DLPG__AUTH_TO_CLIENT = 'S' };

/* One authenticated connection's state on either side. */
typedef struct dlpg__auth_session {
  int on;
  uint8_t key[32];
  uint64_t sent, received; /* frames so far in each direction */
} dlpg__auth_session_t;

/* Fill p with n cryptographically random bytes; 0 on success. */
int dlpg__auth_random(uint8_t *p, size_t n);
/* proof = HMAC(token, label | cn | sn); label is "server", "client" or "session". 0 on
 * success. */
int dlpg__auth_proof(const char *token, const char *label, const uint8_t cn[DLPG__AUTH_NONCE],
                     const uint8_t sn[DLPG__AUTH_NONCE], uint8_t out[DLPG__AUTH_MAC]);
/* Start the session (key from token and the nonces, counters at 0). 0 on success. */
int dlpg__auth_start(dlpg__auth_session_t *s, const char *token, const uint8_t *cn,
                     const uint8_t *sn);
/* MAC of one frame (the u32 length and the body) sent in direction dir as its counter-th.
 * 0 on success. */
int dlpg__auth_frame_mac(const dlpg__auth_session_t *s, int dir, uint64_t counter,
                         const uint8_t *frame, size_t len, uint8_t out[DLPG__AUTH_MAC]);
/* Constant-time comparison of n bytes: 1 when equal. */
int dlpg__auth_equal(const uint8_t *a, const uint8_t *b, size_t n);
/* Wipe a secret from memory (not optimised away). */
void dlpg__auth_wipe(void *p, size_t n);

#endif
