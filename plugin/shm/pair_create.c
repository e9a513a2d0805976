/* Creation of a pair segment by its two ranks alone (pair.h): the lower rank makes an
 * anonymous memfd, listens on an abstract Unix socket named after the pair's key prefix
 * and a random nonce, and publishes the nonce with a secret token; the higher rank
 * connects, proves it holds the token, receives the memfd (SCM_RIGHTS) and maps it. Each
 * then publishes whether it could, and reads the other's answer, so they agree: both get
 * the pair, or both fail alike (DLPG_ERR_UNSUPPORTED when the segment cannot be passed or
 * mapped: the caller falls back to another transport for this pair on both ranks).
 *
 * Store keys under the caller's prefix: "nonce" (lower rank: "<nonce hex><token hex>", or
 * "x" when it has no segment), "res/<rank>" ("ok" or "no <status> <reason>"). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/status.h"
#include "shm/handout.h"
#include "shm/pair_seg.h"
#include "shm/params.h"

#define DLPG__PAIR_KEY_MAX 700


static size_t dlpg__pair_align(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }

void dlpg__pair_layout(dlpg__pair_header_t *h, size_t slot) {
  size_t off = dlpg__pair_align(sizeof *h, DLPG__SHM_LINE);
  h->off_side = off;
  off += dlpg__pair_align(2 * sizeof(dlpg__pair_side_t), DLPG__SHM_LINE);
  h->off_dir = off;
  off += dlpg__pair_align(2 * sizeof(dlpg__pair_dir_t), DLPG__SHM_LINE);
  off = dlpg__pair_align(off, 4096);
  h->off_ring = off;
  off += 2 * (size_t)DLPG__PAIR_RING * DLPG__PAIR_ENTRY;
  h->off_data = off;
  off += 2 * (size_t)DLPG__PAIR_DATA * slot;
  h->total_bytes = off;
  h->slot_bytes = slot;
}

void dlpg__pair_bind(dlpg__shm_pair_t *p, uint8_t *base, size_t bytes) {
  p->base = base;
  p->map_bytes = bytes;
  p->hdr = (dlpg__pair_header_t *)base;
  p->sides = (dlpg__pair_side_t *)(base + p->hdr->off_side);
  p->dirs = (dlpg__pair_dir_t *)(base + p->hdr->off_dir);
  p->ring = base + p->hdr->off_ring;
  p->data = base + p->hdr->off_data;
  p->slot_bytes = p->hdr->slot_bytes;
}

static int dlpg__pair_create_aborted(const int *flag) {
  return flag && __atomic_load_n(flag, __ATOMIC_ACQUIRE);
}

/* A store read until deadline, in slices, so an abort ends it. */
static dlpg_status_t dlpg__pair_store_wait(dlpg_store_t *store, const char *key, double deadline,
                                           const int *abort_flag, int rank, int peer,
                                           char *buf, size_t cap, size_t *len) {
  for (;;) {
    if (dlpg__pair_create_aborted(abort_flag))
      return dlpg__error(DLPG_ERR_ABORTED, "rank %d: the group was aborted while it connected "
                         "to rank %d for point-to-point", rank, peer);
    double left = deadline - dlpg__now();
    if (left <= 0)
      return dlpg__error(DLPG_ERR_TIMEOUT, "rank %d timed out waiting for rank %d to take part "
                         "in a send/recv with it (store key '%s'); did rank %d issue the "
                         "matching operation?", rank, peer, key, peer);
    double slice = left < 0.25 ? left : 0.25;
    dlpg_status_t st = dlpg_store_get(store, key, slice, buf, cap, len);
    if (st != DLPG_ERR_TIMEOUT) return st;
  }
}

static dlpg_status_t dlpg__pair_make(dlpg__shm_pair_t *p, size_t slot, uint64_t nonce, int *memfd) {
  dlpg__pair_header_t h = {0};
  dlpg__pair_layout(&h, slot);
  int fd = memfd_create("dlpg-shm-pair", MFD_CLOEXEC);
  if (fd < 0) return dlpg__error(DLPG_ERR_SYSTEM, "rank %d: memfd_create: %s", p->me, strerror(errno));
  void *m = MAP_FAILED;
  if (ftruncate(fd, (off_t)h.total_bytes) == 0)
    m = mmap(NULL, h.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    int e = errno;
    close(fd);
    return dlpg__error(DLPG_ERR_SYSTEM, "rank %d: a pair segment of %" PRIu64 " bytes: %s", p->me,
                       h.total_bytes, strerror(e));
  }
  h.magic = DLPG__PAIR_MAGIC;
  h.version = DLPG__PAIR_VERSION;
  h.nonce = nonce;
  memcpy(m, &h, sizeof h);
  dlpg__pair_bind(p, m, h.total_bytes);
  *memfd = fd;
  return DLPG_OK;
}

static void dlpg__pair_sock_name(char *out, size_t cap, const char *prefix, uint64_t nonce) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (const char *c = prefix; *c; c++) h = (h ^ (uint8_t)*c) * 1099511628211ull;
  snprintf(out, cap, "dlpg-shm-pair-%016" PRIx64 "-%016" PRIx64, h, nonce);
}

/* Lower rank: hand the memfd to the peer once it proves the token; ends early when the
 * peer published that it cannot join (its res key). Connections are read side by side
 * (handout.h): a local process that is no rank delays nobody. */
static dlpg_status_t dlpg__pair_serve_fd(dlpg__shm_pair_t *p, dlpg_store_t *store,
                                         const char *reskey, int lfd, int memfd,
                                         const uint8_t token[16], double deadline,
                                         const int *abort_flag) {
  dlpg__shm_handout_t *ho = malloc(sizeof *ho);
  if (!ho) return dlpg__error(DLPG_ERR_SYSTEM, "rank %d: out of memory", p->me);
  dlpg_status_t st = dlpg__shm_handout_init(ho, lfd, memfd, token, p->me, p->peer, p->peer + 1);
  double next_check = 0;
  while (st == DLPG_OK) {
    if (dlpg__pair_create_aborted(abort_flag)) {
      st = dlpg__error(DLPG_ERR_ABORTED, "rank %d: the group was aborted while it connected "
                       "to rank %d for point-to-point", p->me, p->peer);
      break;
    }
    double now = dlpg__now();
    if (now >= deadline) {
      st = dlpg__error(DLPG_ERR_TIMEOUT, "rank %d timed out waiting for rank %d to take part "
                       "in a send/recv with it (it did not fetch the pair's segment); did rank "
                       "%d issue the matching operation?", p->me, p->peer, p->peer);
      break;
    }
    if (now >= next_check) {
      next_check = now + 0.05;
      int exists = 0;
      const char *k = reskey;
      if (dlpg_store_check(store, &k, 1, &exists) == DLPG_OK && exists) break;
    }
    if (dlpg__shm_handout_step(ho, 0.05) > 0) break;
  }
  dlpg__shm_handout_end(ho);
  free(ho);
  return st;
}

static uint64_t dlpg__pair_head_total(const void *head, const void *arg) {
  const dlpg__pair_header_t *h = head;
  return h->magic == DLPG__PAIR_MAGIC && h->version == DLPG__PAIR_VERSION &&
                 h->nonce == *(const uint64_t *)arg
             ? h->total_bytes
             : 0;
}

/* Higher rank: fetch and map the segment; UNSUPPORTED when it cannot. */
static dlpg_status_t dlpg__pair_join(dlpg__shm_pair_t *p, const char *sock, const uint8_t token[16],
                                     uint64_t nonce, double deadline) {
  dlpg__pair_header_t h = {0};
  dlpg__shm_join_t j = {sock, p->me, p->peer, token, deadline, "pair segment", &h, sizeof h,
                        dlpg__pair_head_total, &nonce};
  void *m = NULL;
  size_t bytes = 0;
  DLPG_CHECK(dlpg__shm_join_segment(&j, &m, &bytes));
  dlpg__pair_bind(p, m, bytes);
  return DLPG_OK;
}

/* Publish mine, read the peer's: the first refusal decides both. */
static dlpg_status_t dlpg__pair_agree(dlpg__shm_pair_t *p, dlpg_store_t *store, const char *prefix,
                                      dlpg_status_t mine, double deadline, const int *abort_flag) {
  char key[DLPG__PAIR_KEY_MAX + 32], val[600], why[512];
  snprintf(why, sizeof why, "%s", dlpg__last_error());
  snprintf(val, sizeof val, mine == DLPG_OK ? "ok" : "no %d %s", (int)mine, why);
  snprintf(key, sizeof key, "%s/res/%d", prefix, p->me);
  DLPG_CHECK(dlpg_store_set(store, key, val, strlen(val)));
  if (mine != DLPG_OK) return dlpg__error(mine, "%s", why);
  snprintf(key, sizeof key, "%s/res/%d", prefix, p->peer);
  size_t len = 0;
  DLPG_CHECK(dlpg__pair_store_wait(store, key, deadline, abort_flag, p->me, p->peer, val,
                                   sizeof val - 1, &len));
  val[len < sizeof val - 1 ? len : sizeof val - 1] = '\0';
  if (strcmp(val, "ok") == 0) return DLPG_OK;
  int code = DLPG_ERR_UNSUPPORTED, off = 0;
  sscanf(val, "no %d %n", &code, &off);
  return dlpg__error((dlpg_status_t)code, "%s", val + off);
}

static dlpg_status_t dlpg__pair_connect(dlpg__shm_pair_t *p, dlpg_store_t *store,
                                        const char *prefix, size_t slot, double deadline,
                                        const int *abort_flag) {
  char key[DLPG__PAIR_KEY_MAX + 32], reskey[DLPG__PAIR_KEY_MAX + 32], sock[100];
  uint8_t secret[24]; /* nonce (8) + token (16) */
  char hex[2 * sizeof secret + 2];
  uint64_t nonce = 0;
  dlpg_status_t mine = DLPG_OK;
  int lfd = -1, memfd = -1;
  snprintf(key, sizeof key, "%s/nonce", prefix);
  if (p->side == 0) {
    if (getrandom(secret, sizeof secret, 0) != (ssize_t)sizeof secret) {
      mine = dlpg__error(DLPG_ERR_SYSTEM, "rank %d: getrandom: %s", p->me, strerror(errno));
    } else {
      memcpy(&nonce, secret, 8);
      dlpg__pair_sock_name(sock, sizeof sock, prefix, nonce);
      mine = dlpg__pair_make(p, slot, nonce, &memfd);
      if (mine == DLPG_OK && (lfd = dlpg__shm_sock_listen(sock)) < 0)
        mine = dlpg__error(DLPG_ERR_SYSTEM, "rank %d: listening on @%s: %s", p->me, sock,
                           strerror(errno));
    }
    if (mine == DLPG_OK)
      for (size_t i = 0; i < sizeof secret; i++) sprintf(hex + 2 * i, "%02x", secret[i]);
    else
      snprintf(hex, sizeof hex, "x");
    dlpg_status_t st = dlpg_store_set(store, key, hex, strlen(hex));
    if (st != DLPG_OK && mine == DLPG_OK) mine = st;
    snprintf(reskey, sizeof reskey, "%s/res/%d", prefix, p->peer);
    if (mine == DLPG_OK)
      mine = dlpg__pair_serve_fd(p, store, reskey, lfd, memfd, secret + 8, deadline, abort_flag);
  } else {
    size_t len = 0;
    mine = dlpg__pair_store_wait(store, key, deadline, abort_flag, p->me, p->peer, hex,
                                 sizeof hex - 1, &len);
    if (mine == DLPG_OK) {
      hex[len < sizeof hex - 1 ? len : sizeof hex - 1] = '\0';
      if (strcmp(hex, "x") == 0) {
        mine = dlpg__error(DLPG_ERR_UNSUPPORTED, "rank %d could not make the pair segment", p->peer);
      } else {
        for (size_t i = 0; i < sizeof secret; i++) {
          unsigned v = 0;
          if (sscanf(hex + 2 * i, "%2x", &v) != 1) v = 0;
          secret[i] = (uint8_t)v;
        }
        memcpy(&nonce, secret, 8);
        dlpg__pair_sock_name(sock, sizeof sock, prefix, nonce);
        mine = dlpg__pair_join(p, sock, secret + 8, nonce, deadline);
      }
    }
  }
  if (mine == DLPG_OK) {
    dlpg__pair_side_t *s = &p->sides[p->side];
    s->pid = (int32_t)getpid();
    s->starttime = dlpg__shm_pid_starttime(getpid());
  }
  /* Timeouts and aborts are not answers the peer waits for: it has its own deadline. */
  dlpg_status_t st = mine == DLPG_ERR_TIMEOUT || mine == DLPG_ERR_ABORTED
                         ? mine : dlpg__pair_agree(p, store, prefix, mine, deadline, abort_flag);
  if (lfd >= 0) close(lfd);
  if (memfd >= 0) close(memfd);
  return st;
}

dlpg_status_t dlpg__shm_pair_create(dlpg_store_t *store, const char *prefix, int rank, int peer,
                                    const dlpg__shm_pair_config_t *cfg, dlpg__shm_pair_t **out) {
  DLPG_ARG_CHECK(store && prefix && out, "dlpg__shm_pair_create: store, prefix and out must not be NULL");
  DLPG_ARG_CHECK(rank != peer && rank >= 0 && peer >= 0,
                 "dlpg__shm_pair_create: ranks %d and %d do not make a pair", rank, peer);
  DLPG_ARG_CHECK(strlen(prefix) < DLPG__PAIR_KEY_MAX - 64,
                 "dlpg__shm_pair_create: prefix is %zu bytes long", strlen(prefix));
  *out = NULL;
  dlpg__shm_pair_t *p = calloc(1, sizeof *p);
  if (!p) return dlpg__error(DLPG_ERR_SYSTEM, "dlpg__shm_pair_create: out of memory");
  p->me = rank;
  p->peer = peer;
  p->side = rank < peer ? 0 : 1;
  size_t slot = cfg && cfg->slot_bytes ? cfg->slot_bytes : DLPG__SHM_DEFAULT_P2P_SLOT_BYTES;
  slot = dlpg__pair_align(slot < 256 ? 256 : slot, DLPG__SHM_LINE);
  p->stage_cap = cfg && cfg->stage_bytes ? cfg->stage_bytes : DLPG__SHM_DEFAULT_P2P_STAGE_BYTES;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  /* Ranks that outnumber the CPUs (two ranks' threads each on a busy machine) spin little. */
  p->spin = cfg && cfg->spin >= 0 ? cfg->spin : (ncpu > 0 && ncpu <= 2 ? 64 : 4000);
  pthread_mutex_init(&p->mu, NULL);
  double timeout = cfg && cfg->timeout_s > 0 ? cfg->timeout_s : 300;
  dlpg_status_t st = dlpg__pair_connect(p, store, prefix, slot, dlpg__now() + timeout,
                                        cfg ? cfg->abort_flag : NULL);
  if (st != DLPG_OK) {
    if (p->base) munmap(p->base, p->map_bytes);
    pthread_mutex_destroy(&p->mu);
    free(p);
    return st;
  }
  atomic_store(&p->sides[p->side].state, DLPG__SHM_ALIVE);
  DLPG_INFO(SHM, rank, "shm: pair segment with rank %d mapped (%zu bytes, chunks of %zu bytes)",
            peer, p->map_bytes, p->slot_bytes);
  *out = p;
  return DLPG_OK;
}
