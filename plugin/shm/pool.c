/* The pool of sub-team areas (pool.h): its layout, the leader's claim, the members' search,
 * and the return of an area by the last member out. Every step is one or a few atomics on
 * the claim table: nothing here waits (subteam.c does, with the child's deadline). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <string.h>
#include <sys/mman.h>

#include "shm/pool.h"

/* Areas start and end on this boundary, so a punch of one covers whole pages of any size
 * up to it. */
#define DLPG__SHM_AREA_ALIGN ((size_t)64 << 10)

static size_t dlpg__shm_round(size_t n, size_t to) { return (n + to - 1) / to * to; }

size_t dlpg__shm_pool_layout(dlpg__shm_header_t *h, size_t off, int areas, int size, size_t slot) {
  h->pool_areas = 0;
  if (areas <= 0) return off;
  int ranks = size < DLPG__SHM_AREA_RANKS_MAX ? size : DLPG__SHM_AREA_RANKS_MAX;
  h->pool_areas = (uint32_t)areas;
  h->pool_claims = (uint32_t)areas * DLPG__SHM_POOL_CLAIMS_PER_AREA;
  h->off_pool = off;
  off += sizeof(dlpg__shm_claim_t) * h->pool_claims + sizeof(_Atomic uint32_t) * (size_t)areas;
  off = dlpg__shm_round(off, DLPG__SHM_AREA_ALIGN);
  h->off_areas = off;
  h->area_ranks = (uint64_t)ranks;
  h->area_slots_bytes = DLPG__SHM_AREA_SLOT_UNITS * slot;
  dlpg__shm_header_t a = {0};
  size_t head = dlpg__shm_layout(&a, ranks, 0); /* header and rank blocks, page-rounded */
  h->area_bytes = dlpg__shm_round(head + h->area_slots_bytes, DLPG__SHM_AREA_ALIGN);
  return off + h->area_bytes * (size_t)areas;
}

size_t dlpg__shm_pool_slot(const uint8_t *seg, int m) {
  const dlpg__shm_header_t *h = (const dlpg__shm_header_t *)seg;
  if (h->pool_areas == 0 || m < 1 || (uint64_t)m > h->area_ranks) return 0;
  size_t parent_slot = h->area_slots_bytes / DLPG__SHM_AREA_SLOT_UNITS;
  size_t s = (h->area_slots_bytes / (2 * (size_t)m)) & ~(size_t)(DLPG__SHM_LINE - 1);
  if (s > parent_slot) s = parent_slot;
  /* Room for each rank's share of a chunk, as a segment's own slots (handle_new.c). */
  if (s < (size_t)m * 256) return 0;
  return s;
}

dlpg__shm_claim_t *dlpg__shm_pool_entry(uint8_t *seg, int i) {
  const dlpg__shm_header_t *h = (const dlpg__shm_header_t *)seg;
  return (dlpg__shm_claim_t *)(seg + h->off_pool) + i;
}

static _Atomic uint32_t *dlpg__shm_pool_used(uint8_t *seg, int area) {
  const dlpg__shm_header_t *h = (const dlpg__shm_header_t *)seg;
  return (_Atomic uint32_t *)(void *)(seg + h->off_pool +
                                      sizeof(dlpg__shm_claim_t) * h->pool_claims) + area;
}

uint8_t *dlpg__shm_pool_area(uint8_t *seg, int area) {
  const dlpg__shm_header_t *h = (const dlpg__shm_header_t *)seg;
  return seg + h->off_areas + h->area_bytes * (size_t)area;
}

/* The area laid out for m ranks: a segment's header (its nonce the key) and rank blocks
 * zeroed but for each member's pid and start, which peers check until the member came. */
static void dlpg__shm_area_init(uint8_t *seg, int area, const uint64_t key[2], int m,
                                size_t slot, const int32_t *pids, const uint64_t *starts) {
  uint8_t *a = dlpg__shm_pool_area(seg, area);
  dlpg__shm_header_t h = {0};
  dlpg__shm_layout(&h, m, slot);
  h.magic = DLPG__SHM_MAGIC;
  h.version = DLPG__SHM_VERSION;
  h.nonce = key[0];
  /* A returned area was punched out (zeros), unless the punch failed: clear what a
   * previous child left in the rank blocks (counters, states). Slots need no clearing:
   * every step writes before it posts. */
  memset(a + h.off_ctl, 0, sizeof(dlpg__shm_rankctl_t) * (size_t)m);
  dlpg__shm_rankctl_t *ctl = (dlpg__shm_rankctl_t *)(a + h.off_ctl);
  for (int q = 0; q < m; q++) {
    ctl[q].pid = pids[q];
    ctl[q].starttime = starts[q];
    atomic_store_explicit(&ctl[q].cpu, -1, memory_order_relaxed);
  }
  memcpy(a, &h, sizeof h);
}

int dlpg__shm_pool_take(uint8_t *seg, const uint64_t key[2], int m, size_t slot,
                        const int32_t *pids, const uint64_t *starts) {
  const dlpg__shm_header_t *h = (const dlpg__shm_header_t *)seg;
  uint32_t n = h->pool_claims;
  int i = -1;
  for (uint32_t k = 0; k < n && i < 0; k++) {
    uint32_t j = (uint32_t)((key[0] + k) % n), free_ = DLPG__SHM_CLAIM_FREE;
    if (atomic_compare_exchange_strong(&dlpg__shm_pool_entry(seg, (int)j)->state, &free_,
                                       DLPG__SHM_CLAIM_TAKING))
      i = (int)j;
  }
  if (i < 0) return -1;
  dlpg__shm_claim_t *e = dlpg__shm_pool_entry(seg, i);
  int area = -1;
  for (uint32_t k = 0; k < h->pool_areas && area < 0; k++) {
    uint32_t a = (uint32_t)((key[1] + k) % h->pool_areas), zero = 0;
    if (atomic_compare_exchange_strong(dlpg__shm_pool_used(seg, (int)a), &zero, 1)) area = (int)a;
  }
  if (area >= 0) dlpg__shm_area_init(seg, area, key, m, slot, pids, starts);
  e->area = area;
  e->size = (uint32_t)m;
  e->key[0] = key[0];
  e->key[1] = key[1];
  /* The leader found it, and is in the area when there is one. */
  atomic_store(&e->joins, ((uint64_t)1 << 32) | (area >= 0 ? 1u : 0u));
  if (area < 0 && m == 1) {
    atomic_store(&e->state, DLPG__SHM_CLAIM_FREE); /* nobody else will look */
    return i;
  }
  /* Release: a member that sees the state sees the key, the area and its layout. */
  atomic_store_explicit(&e->state, area >= 0 ? DLPG__SHM_CLAIM_READY : DLPG__SHM_CLAIM_OWN,
                        memory_order_release);
  return i;
}

int dlpg__shm_pool_find(uint8_t *seg, const uint64_t key[2]) {
  const dlpg__shm_header_t *h = (const dlpg__shm_header_t *)seg;
  uint32_t n = h->pool_claims;
  for (uint32_t k = 0; k < n; k++) {
    uint32_t j = (uint32_t)((key[0] + k) % n);
    dlpg__shm_claim_t *e = dlpg__shm_pool_entry(seg, (int)j);
    uint32_t st = atomic_load_explicit(&e->state, memory_order_acquire);
    if ((st == DLPG__SHM_CLAIM_READY || st == DLPG__SHM_CLAIM_OWN) && e->key[0] == key[0] &&
        e->key[1] == key[1])
      return (int)j;
  }
  return -1;
}

uint32_t dlpg__shm_pool_join(uint8_t *seg, int i) {
  dlpg__shm_claim_t *e = dlpg__shm_pool_entry(seg, i);
  uint32_t st = atomic_load_explicit(&e->state, memory_order_acquire);
  if (st == DLPG__SHM_CLAIM_READY) {
    atomic_fetch_add(&e->joins, ((uint64_t)1 << 32) | 1u);
    return st;
  }
  uint64_t v = atomic_fetch_add(&e->joins, (uint64_t)1 << 32) + ((uint64_t)1 << 32);
  if ((v >> 32) == e->size) atomic_store(&e->state, DLPG__SHM_CLAIM_FREE);
  return st;
}

void dlpg__shm_pool_leave(uint8_t *seg, int i) {
  dlpg__shm_claim_t *e = dlpg__shm_pool_entry(seg, i);
  uint64_t v = atomic_fetch_sub(&e->joins, 1) - 1;
  if ((v & 0xffffffffu) != 0 || (v >> 32) != e->size) return;
  /* The last one out: nobody reads the area any more. Its pages go back to the system
   * (the next child then reads zeros); the rank blocks are cleared at the next claim in
   * case the punch fails. */
  const dlpg__shm_header_t *h = (const dlpg__shm_header_t *)seg;
  int area = e->area;
  madvise(dlpg__shm_pool_area(seg, area), h->area_bytes, MADV_REMOVE);
  atomic_store(&e->state, DLPG__SHM_CLAIM_FREE);
  atomic_store(dlpg__shm_pool_used(seg, area), 0);
}
