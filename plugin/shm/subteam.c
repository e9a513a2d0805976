/* A child group's engine in an area of its parent's segment (shm.h, pool.h): the seed taken
 * when the child is made, and the claim at its first operation. The child's rank 0 takes the
 * area and lays it out; the other members find it in the claim table (polling, with the
 * child's deadline, its abort flag and rank 0's life checked between looks), and all bind
 * their handles to it. A member that has not come yet is in the area's rank blocks with
 * the pid its parent's segment knew, so the first operation waits for it, or names it dead
 * or late, as for any segment. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/status.h"
#include "shm/params.h"
#include "shm/pool.h"
#include "shm/seg.h"

struct dlpg__shm_seed {
  dlpg__shm_map_t *map; /* the parent's mapping, referenced */
  int rank, size;
  int32_t *pids;        /* [size], of the child's ranks */
  uint64_t *starts;
};

dlpg__shm_seed_t *dlpg__shm_seed_new(dlpg__shm_t *parent, int rank, int n, const int *members) {
  if (!parent || !parent->map || n < 1 || rank < 0 || rank >= n) return NULL;
  if (((const dlpg__shm_header_t *)parent->map->base)->pool_areas == 0) return NULL;
  dlpg__shm_seed_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->pids = calloc((size_t)n, sizeof *s->pids);
  s->starts = calloc((size_t)n, sizeof *s->starts);
  if (!s->pids || !s->starts) {
    dlpg__shm_seed_free(s);
    return NULL;
  }
  for (int i = 0; i < n; i++) {
    if (members[i] < 0 || members[i] >= parent->st.size) {
      dlpg__shm_seed_free(s);
      return NULL;
    }
    /* Written by each parent rank before the parent's creation ended: fixed since. */
    s->pids[i] = parent->ctl[members[i]].pid;
    s->starts[i] = parent->ctl[members[i]].starttime;
  }
  s->rank = rank;
  s->size = n;
  dlpg__shm_map_ref(parent->map);
  s->map = parent->map;
  return s;
}

void dlpg__shm_seed_free(dlpg__shm_seed_t *s) {
  if (!s) return;
  dlpg__shm_map_unref(s->map);
  free(s->pids);
  free(s->starts);
  free(s);
}

/* Two FNV-1a hashes of the key scope and the size, never 0: the child's name in the claim
 * table. */
static void dlpg__shm_sub_key(const char *key, int m, uint64_t out[2]) {
  uint64_t a = 1469598103934665603ull, b = 0x9e3779b97f4a7c15ull;
  for (const char *p = key; *p; p++) {
    a = (a ^ (uint8_t)*p) * 1099511628211ull;
    b = (b ^ (uint8_t)*p) * 0x100000001b3ull + 0x632be59bd9b4e019ull;
  }
  a = (a ^ (uint64_t)m) * 1099511628211ull;
  b ^= (uint64_t)m << 32;
  out[0] = a ? a : 1;
  out[1] = b ? b : 1;
}

static int dlpg__shm_sub_aborted(const dlpg__shm_config_t *cfg) {
  return cfg && cfg->abort_flag && __atomic_load_n(cfg->abort_flag, __ATOMIC_ACQUIRE);
}

/* A pause between looks at the table: yields first (rank 0 may be waiting for this CPU),
 * then sleeps up to a millisecond. */
static void dlpg__shm_sub_pause(int round) {
  if (round < 64) {
    sched_yield();
    return;
  }
  long us = round < 128 ? 50 : 1000;
  struct timespec ts = {0, us * 1000};
  nanosleep(&ts, NULL);
}

/* Rank 0's claim (the table full: wait for an entry, it is not the area that is missing),
 * or another member's search; *entry the claim's index. */
static dlpg_status_t dlpg__shm_sub_claim(dlpg__shm_seed_t *s, const uint64_t key[2], size_t slot,
                                         const dlpg__shm_config_t *cfg, double timeout_s,
                                         int *entry) {
  uint8_t *seg = s->map->base;
  double start = dlpg__now(), deadline = start + timeout_s, next_life = start + 0.1;
  for (int round = 0;; round++) {
    int i = s->rank == 0 ? dlpg__shm_pool_take(seg, key, s->size, slot, s->pids, s->starts)
                         : dlpg__shm_pool_find(seg, key);
    if (i >= 0) {
      *entry = i;
      return DLPG_OK;
    }
    if (dlpg__shm_sub_aborted(cfg))
      return dlpg__error(DLPG_ERR_ABORTED, "shm rank %d: the group was aborted while it looked "
                         "for its area of the parent's segment", s->rank);
    double now = dlpg__now();
    if (now >= deadline) {
      if (s->rank == 0)
        return dlpg__error(DLPG_ERR_TIMEOUT, "shm rank 0: the claim table of the parent's "
                           "segment stayed full for %g s (children of the parent alive or "
                           "being made)", timeout_s);
      return dlpg__error(DLPG_ERR_TIMEOUT, "shm rank %d: rank 0 (pid %d) did not reach the "
                         "group's first operation within %g s (it sets up the group's area of "
                         "the parent's segment)", s->rank, (int)s->pids[0], timeout_s);
    }
    if (s->rank != 0 && now >= next_life) {
      next_life = now + 0.1;
      if (!dlpg__shm_pid_alive(s->pids[0], s->starts[0]))
        return dlpg__error(DLPG_ERR_REMOTE, "shm rank %d: rank 0 (pid %d) died before it set up "
                           "the group's area of the parent's segment", s->rank, (int)s->pids[0]);
    }
    dlpg__shm_sub_pause(round);
  }
}

dlpg_status_t dlpg__shm_create_sub(dlpg__shm_seed_t *s, const char *key,
                                   const dlpg__shm_config_t *cfg, dlpg__shm_t **out) {
  *out = NULL;
  if (!s || !key) {
    dlpg__shm_seed_free(s);
    return DLPG_OK;
  }
  int rank = s->rank, m = s->size;
  size_t slot = dlpg__shm_pool_slot(s->map->base, m);
  if (!slot) {
    DLPG_INFO(SHM, rank, "shm: a group of %d ranks is larger than an area of its parent's "
              "segment holds (at most %u ranks): it makes a segment of its own", m,
              (unsigned)((const dlpg__shm_header_t *)s->map->base)->area_ranks);
    dlpg__shm_seed_free(s);
    return DLPG_OK;
  }
  dlpg__shm_t *sh = dlpg__shm_alloc(rank, m, cfg);
  if (!sh) {
    dlpg__shm_seed_free(s);
    return dlpg__error(DLPG_ERR_SYSTEM, "dlpg__shm_create_sub: out of memory");
  }
  uint64_t k[2];
  dlpg__shm_sub_key(key, m, k);
  int i = -1;
  dlpg_status_t st = dlpg__shm_sub_claim(s, k, slot, cfg, sh->timeout_s, &i);
  uint8_t *seg = s->map->base;
  uint32_t state = st != DLPG_OK  ? DLPG__SHM_CLAIM_FREE
                   : rank == 0    ? atomic_load(&dlpg__shm_pool_entry(seg, i)->state)
                                  : dlpg__shm_pool_join(seg, i);
  if (st != DLPG_OK || state != DLPG__SHM_CLAIM_READY) {
    if (st == DLPG_OK)
      DLPG_INFO(SHM, rank, "shm: the %u areas of the parent's segment are taken: this group of %d "
                "ranks makes a segment of its own", ((const dlpg__shm_header_t *)seg)->pool_areas, m);
    free(sh->st.copies);
    free(sh);
    dlpg__shm_seed_free(s);
    return st;
  }
  dlpg__shm_claim_t *e = dlpg__shm_pool_entry(seg, i);
  uint8_t *a = dlpg__shm_pool_area(seg, e->area);
  const dlpg__shm_header_t *h = (const dlpg__shm_header_t *)a;
  /* The layout rank 0 wrote (the entry's release made it visible). */
  sh->st.slot_bytes = h->slot_bytes;
  dlpg__shm_bind(sh, a, h->total_bytes);
  sh->map = s->map;
  s->map = NULL; /* the seed's reference is the handle's now */
  sh->claim = i;
  sh->st.piece_bytes = (sh->st.slot_bytes / (size_t)m) & ~(size_t)(DLPG__SHM_LINE - 1);
  sh->ctl[rank].pid = (int32_t)getpid();
  sh->ctl[rank].starttime = dlpg__shm_pid_starttime(getpid());
  atomic_store_explicit(&sh->ctl[rank].cpu, -1, memory_order_relaxed);
  atomic_store(&sh->ctl[rank].state, DLPG__SHM_ALIVE);
  DLPG_INFO(SHM, rank, "shm: group of %d ranks in area %d of its parent's segment (slots of %zu "
            "bytes)", m, e->area, sh->st.slot_bytes);
  dlpg__shm_seed_free(s);
  *out = sh;
  return DLPG_OK;
}
