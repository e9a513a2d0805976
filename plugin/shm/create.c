/* Creation of the engine: rank 0 makes the segment (an anonymous memfd), listens on an
 * abstract Unix socket whose name comes from the group's name, a random nonce and rank 0,
 * and publishes the nonce (with a separate secret token) in the store; every other rank
 * connects, proves it knows the token, and receives the memfd with SCM_RIGHTS. Each rank
 * then publishes whether it could join, and all read every rank's answer, so they agree:
 * all get a handle, or all fail -- with DLPG_ERR_UNSUPPORTED when the cause is that the
 * ranks do not share a host (socket unreachable, mapping refused, other pid namespace).
 *
 * Store keys, under "<keys>/shm/<size>.<n>/" where keys is the group's job scope (one job's,
 * agreed by its ranks: backend_abi.h) and n counts this rank's creations under it (each rank
 * counts its own, so they agree without meeting; an earlier job's keys are never read):
 *   nonce    rank 0: "<nonce hex> <token hex>"
 *   res/<r>  rank r: "ok" or "no <reason>" */
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
#include "shm/params.h"
#include "shm/pool.h"
#include "shm/seg.h"

#define DLPG__SHM_KEY_MAX 640 /* a job scope (a name of up to 512 bytes and more) and its keys */

/* The socket's name: group name (hashed, names may be long), nonce, the listening rank. */
static void dlpg__shm_sock_name(char *out, size_t cap, const char *name, uint64_t nonce) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
  snprintf(out, cap, "dlpg-shm-%016" PRIx64 "-%016" PRIx64 "-r0", h, nonce);
}

static void dlpg__shm_hex(char *out, const uint8_t *b, size_t n) {
  for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", b[i]);
}

static int dlpg__shm_create_aborted(const dlpg__shm_t *sh) {
  return sh->create_abort && __atomic_load_n(sh->create_abort, __ATOMIC_ACQUIRE);
}

/* A store read that waits until deadline in slices, so an abort of the creation ends it. */
static dlpg_status_t dlpg__shm_store_wait(dlpg__shm_t *sh, dlpg_store_t *store, const char *key,
                                          double deadline, void *buf, size_t cap, size_t *len) {
  for (;;) {
    if (dlpg__shm_create_aborted(sh))
      return dlpg__error(DLPG_ERR_ABORTED, "shm rank %d: the group was aborted while its "
                         "segment was being set up", sh->st.rank);
    double left = deadline - dlpg__now();
    double slice = left < 0.01 ? 0.01 : left < 0.25 ? left : 0.25;
    dlpg_status_t st = dlpg_store_get(store, key, slice, buf, cap, len);
    if (st != DLPG_ERR_TIMEOUT || left <= 0.25) return st;
  }
}

/* Rank 0: the memfd, mapped, its header and rank blocks initialised. */
static dlpg_status_t dlpg__shm_make_segment(dlpg__shm_t *sh, uint64_t nonce, int *memfd) {
  dlpg__shm_header_t h = {0};
  size_t end = dlpg__shm_layout(&h, sh->st.size, sh->st.slot_bytes);
  h.total_bytes = dlpg__shm_pool_layout(&h, end, sh->pool_areas, sh->st.size, sh->st.slot_bytes);
  int fd = memfd_create("dlpg-shm", MFD_CLOEXEC);
  if (fd < 0)
    return dlpg__error(DLPG_ERR_SYSTEM, "shm rank 0: memfd_create: %s", strerror(errno));
  if (ftruncate(fd, (off_t)h.total_bytes) != 0) {
    int e = errno;
    close(fd);
    return dlpg__error(DLPG_ERR_SYSTEM, "shm rank 0: ftruncate of the segment to %" PRIu64 " bytes: %s",
                       h.total_bytes, strerror(e));
  }
  void *p = mmap(NULL, h.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    return dlpg__error(DLPG_ERR_SYSTEM, "shm rank 0: mmap of %" PRIu64 " bytes: %s", h.total_bytes,
                       strerror(e));
  }
  /* A fresh memfd reads as zeros: counters, waiters and states start at 0 (JOINING). */
  h.magic = DLPG__SHM_MAGIC;
  h.version = DLPG__SHM_VERSION;
  h.nonce = nonce;
  memcpy(p, &h, sizeof h);
  dlpg__shm_bind(sh, p, h.total_bytes);
  *memfd = fd;
  return DLPG_OK;
}

/* Rank 0: serve the memfd to the other ranks until each has it, one has published that it
 * cannot join (its res key exists before it was served), or the deadline. Returns 0 when
 * every rank was served; a peer's refusal is left to the consensus to report. Connections
 * are read side by side (handout.h): a local process that is no rank delays nobody. */
static dlpg_status_t dlpg__shm_serve(dlpg__shm_t *sh, dlpg_store_t *store, const char *prefix,
                                     int lfd, int memfd, const uint8_t token[16], double deadline) {
  dlpg__shm_handout_t *ho = malloc(sizeof *ho);
  if (!ho) return dlpg__error(DLPG_ERR_SYSTEM, "shm rank 0: out of memory");
  dlpg_status_t st = dlpg__shm_handout_init(ho, lfd, memfd, token, 0, 1, sh->st.size);
  if (st != DLPG_OK) {
    free(ho);
    return st;
  }
  int nserved = 0;
  double next_check = dlpg__now() + 0.05; /* a peer that cannot connect needs a moment to say so */
  while (nserved < sh->st.size - 1) {
    if (dlpg__shm_create_aborted(sh)) {
      st = dlpg__error(DLPG_ERR_ABORTED, "shm rank 0: the group was aborted while its segment "
                       "was being set up");
      break;
    }
    double now = dlpg__now();
    if (now >= deadline) {
      int missing = -1;
      for (int q = 1; q < sh->st.size && missing < 0; q++) if (!ho->served[q - 1]) missing = q;
      st = dlpg__error(DLPG_ERR_TIMEOUT, "shm rank 0: rank %d did not fetch the segment within %g s",
                       missing, sh->timeout_s);
      break;
    }
    if (now >= next_check) { /* a rank that cannot connect says so in the store */
      next_check = now + 0.05;
      int failed = 0;
      for (int q = 1; q < sh->st.size && !failed; q++) {
        if (ho->served[q - 1]) continue;
        char key[DLPG__SHM_KEY_MAX + 32];
        snprintf(key, sizeof key, "%s/res/%d", prefix, q);
        const char *k = key;
        int exists = 0;
        if (dlpg_store_check(store, &k, 1, &exists) == DLPG_OK && exists) failed = 1;
      }
      if (failed) break;
    }
    nserved += dlpg__shm_handout_step(ho, 0.05);
  }
  dlpg__shm_handout_end(ho);
  free(ho);
  return st;
}

/* The expected header of this creation's segment (dlpg__shm_join_t's total). */
typedef struct dlpg__shm_expect {
  uint64_t nonce;
  int size;
} dlpg__shm_expect_t;

static uint64_t dlpg__shm_head_total(const void *head, const void *arg) {
  const dlpg__shm_header_t *h = head;
  const dlpg__shm_expect_t *x = arg;
  return h->magic == DLPG__SHM_MAGIC && h->version == DLPG__SHM_VERSION && h->nonce == x->nonce &&
                 h->size == (uint32_t)x->size
             ? h->total_bytes
             : 0;
}

/* Ranks > 0: fetch and map the segment. DLPG_ERR_UNSUPPORTED when it is unreachable from
 * here (another host as far as the engine is concerned). */
static dlpg_status_t dlpg__shm_join(dlpg__shm_t *sh, const char *sock, const uint8_t token[16],
                                    uint64_t nonce, double deadline) {
  dlpg__shm_header_t h = {0};
  dlpg__shm_expect_t x = {nonce, sh->st.size};
  dlpg__shm_join_t j = {sock, sh->st.rank, 0, token, deadline, "segment", &h, sizeof h,
                        dlpg__shm_head_total, &x};
  void *p = NULL;
  size_t bytes = 0;
  DLPG_CHECK(dlpg__shm_join_segment(&j, &p, &bytes));
  dlpg__shm_bind(sh, p, bytes);
  sh->st.slot_bytes = h.slot_bytes;
  return DLPG_OK;
}

/* How long past the creation's deadline a rank waits for the others' answers: a rank whose
 * own step ran into the deadline (rank 0 serving a rank that never came) publishes its
 * answer just after it, and that answer names the culprit. */
#define DLPG__SHM_ANSWER_GRACE_S 0.5

/* Publish this rank's outcome, read everyone's: the first rank that could not join
 * decides the status of all. */
static dlpg_status_t dlpg__shm_agree(dlpg__shm_t *sh, dlpg_store_t *store, const char *prefix,
                                     dlpg_status_t mine, double deadline) {
  char key[DLPG__SHM_KEY_MAX + 32], val[600], own[512];
  snprintf(own, sizeof own, "%s", mine == DLPG_OK ? "" : dlpg__last_error());
  snprintf(val, sizeof val, mine == DLPG_OK ? "ok" : "no %d %s", (int)mine, own);
  snprintf(key, sizeof key, "%s/res/%d", prefix, sh->st.rank);
  DLPG_CHECK(dlpg_store_set(store, key, val, strlen(val)));
  for (int q = 0; q < sh->st.size; q++) {
    if (q == sh->st.rank) {
      /* The ranks before it all joined: this rank's own failure is the outcome. */
      if (mine != DLPG_OK) return dlpg__error(mine, "%s", own);
      continue;
    }
    snprintf(key, sizeof key, "%s/res/%d", prefix, q);
    size_t len = 0;
    dlpg_status_t st = dlpg__shm_store_wait(sh, store, key, deadline + DLPG__SHM_ANSWER_GRACE_S,
                                            val, sizeof val - 1, &len);
    if (st != DLPG_OK)
      return dlpg__error(st, "shm rank %d: rank %d did not say whether it joined the segment: %s",
                         sh->st.rank, q, dlpg__last_error());
    val[len < sizeof val - 1 ? len : sizeof val - 1] = '\0';
    if (strcmp(val, "ok") != 0) {
      int code = DLPG_ERR_UNSUPPORTED, off = 0;
      sscanf(val, "no %d %n", &code, &off);
      return dlpg__error((dlpg_status_t)code, "shm rank %d: as rank %d reports: %s", sh->st.rank, q,
                         val + off);
    }
  }
  return DLPG_OK;
}

dlpg_status_t dlpg__shm_create(dlpg_store_t *store, const char *name, int rank, int size,
                               const dlpg__shm_config_t *cfg, dlpg__shm_t **out) {
  DLPG_ARG_CHECK(store && name && out, "dlpg__shm_create: store, name and out must not be NULL");
  DLPG_ARG_CHECK(size >= 1 && rank >= 0 && rank < size,
                 "dlpg__shm_create: rank %d of size %d is out of range", rank, size);
  DLPG_ARG_CHECK(strlen(name) < DLPG__SHM_KEY_MAX - 64,
                 "dlpg__shm_create: name is %zu bytes long (at most %d)", strlen(name),
                 DLPG__SHM_KEY_MAX - 65);
  *out = NULL;
  dlpg__shm_t *sh = dlpg__shm_alloc(rank, size, cfg);
  if (!sh) return dlpg__error(DLPG_ERR_SYSTEM, "dlpg__shm_create: out of memory");
  double deadline = dlpg__now() + sh->timeout_s;
  char prefix[DLPG__SHM_KEY_MAX], key[DLPG__SHM_KEY_MAX + 32], sock[100];
  dlpg_status_t st = DLPG_OK, mine = DLPG_OK;
  int lfd = -1, memfd = -1;
  int64_t gen = 0;
  /* Per size too: a creation involves every rank of its size, so each rank's count of
   * them is the same, but groups of another size under the same name count apart. */
  snprintf(key, sizeof key, "%s/shm/gen/%d/%d", name, size, rank);
  DLPG_CHECK_GOTO(dlpg_store_add(store, key, 1, &gen), st, fail);
  snprintf(prefix, sizeof prefix, "%s/shm/%d.%" PRId64, name, size, gen);

  uint8_t secret[24]; /* nonce (8) + token (16) */
  char hex[2 * sizeof secret + 2];
  uint64_t nonce = 0;
  snprintf(key, sizeof key, "%s/nonce", prefix);
  if (rank == 0) {
    if (getrandom(secret, sizeof secret, 0) != (ssize_t)sizeof secret) {
      st = dlpg__error(DLPG_ERR_SYSTEM, "shm rank 0: getrandom: %s", strerror(errno));
      goto fail;
    }
    memcpy(&nonce, secret, 8);
    dlpg__shm_sock_name(sock, sizeof sock, name, nonce);
    mine = dlpg__shm_make_segment(sh, nonce, &memfd);
    if (mine == DLPG_OK && size > 1 && (lfd = dlpg__shm_sock_listen(sock)) < 0)
      mine = dlpg__error(DLPG_ERR_SYSTEM, "shm rank 0: listening on @%s: %s", sock, strerror(errno));
    /* "x": rank 0 has no segment; the peers then learn its reason from its res key. */
    if (mine == DLPG_OK)
      dlpg__shm_hex(hex, secret, sizeof secret);
    else
      snprintf(hex, sizeof hex, "x");
    DLPG_CHECK_GOTO(dlpg_store_set(store, key, hex, strlen(hex)), st, fail);
    if (mine == DLPG_OK && size > 1)
      mine = dlpg__shm_serve(sh, store, prefix, lfd, memfd, secret + 8, deadline);
  } else {
    size_t len = 0;
    st = dlpg__shm_store_wait(sh, store, key, deadline, hex, sizeof hex - 1, &len);
    if (st == DLPG_ERR_TIMEOUT)
      st = dlpg__error(st, "shm rank %d: rank 0 did not set up the segment within %g s (has it "
                       "reached this first collective?): %s", rank, sh->timeout_s,
                       dlpg__last_error());
    if (st != DLPG_OK) goto fail;
    hex[len < sizeof hex - 1 ? len : sizeof hex - 1] = '\0';
    if (strcmp(hex, "x") == 0) {
      mine = dlpg__error(DLPG_ERR_SYSTEM, "rank 0 could not create the segment");
      goto agree;
    }
    for (size_t i = 0; i < sizeof secret; i++) {
      unsigned v = 0;
      if (sscanf(hex + 2 * i, "%2x", &v) != 1) v = 0;
      secret[i] = (uint8_t)v;
    }
    memcpy(&nonce, secret, 8);
    dlpg__shm_sock_name(sock, sizeof sock, name, nonce);
    mine = dlpg__shm_join(sh, sock, secret + 8, nonce, deadline);
  }
agree:
  if (mine == DLPG_OK) {
    sh->st.piece_bytes = (sh->st.slot_bytes / (size_t)size) & ~(size_t)(DLPG__SHM_LINE - 1);
    sh->ctl[rank].pid = (int32_t)getpid();
    sh->ctl[rank].starttime = dlpg__shm_pid_starttime(getpid());
    atomic_store_explicit(&sh->ctl[rank].cpu, -1, memory_order_relaxed);
  }
  /* A rank that cannot join still answers, so the others fail with its reason, not at
   * their deadline. */
  DLPG_CHECK_GOTO(dlpg__shm_agree(sh, store, prefix, mine, deadline), st, fail);
  if (lfd >= 0) close(lfd);
  if (memfd >= 0) close(memfd);
  /* Shared with the handles of children in the pool's areas, which may outlive this one. */
  sh->map = dlpg__shm_map_new(sh->base, sh->map_bytes);
  if (!sh->map) {
    st = dlpg__error(DLPG_ERR_SYSTEM, "dlpg__shm_create: out of memory");
    goto fail;
  }
  atomic_store(&sh->ctl[rank].state, DLPG__SHM_ALIVE);
  DLPG_INFO(SHM, rank, "shm: segment of %zu bytes for %d ranks mapped (slots of %zu bytes; %u "
            "areas for children)", sh->map_bytes, size, sh->st.slot_bytes, sh->hdr->pool_areas);
  *out = sh;
  return DLPG_OK;
fail:
  if (lfd >= 0) close(lfd);
  if (memfd >= 0) close(memfd);
  if (sh->base) munmap(sh->base, sh->map_bytes);
  free(sh->st.copies);
  free(sh->vscratch);
  free(sh);
  return st;
}
