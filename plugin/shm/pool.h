/* The pool of sub-team areas in a segment (seg.h): the segments of child groups
 * (dlpg_group_split, dlpg_group_create_subset) inside their parent's, so that a child's first
 * operation needs no memfd, no socket hand-out and no store traffic (subteam.c).
 *
 * Claims: the child's rank 0, its leader, takes a free entry of the claim table (CAS), writes
 * the child's key (a hash of the child's key scope, which its members hold alike and no
 * other live child has), takes a free area (CAS) and lays it out for the child, then
 * publishes the entry: READY with its area, or OWN when no area was free (every member then
 * makes a segment of its own, as a created group does). The other members find the entry by
 * its key. Only the leader writes an entry, so the members never take two areas for one
 * child. The entry's joins word counts the members that found it and those still using it;
 * the last of all members to leave punches out the area's pages and returns the area and the
 * entry. A member that never comes (died first, never ran an operation on the child) keeps
 * the area taken until the segment goes with its last mapping. */
#ifndef DLPG_SHM_POOL_H_
#define DLPG_SHM_POOL_H_

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "shm/seg.h"

/* Areas of a group's segment: children alive at once (torch's benchmark of subgroups keeps
 * about 150 of 8 ranks). The virtual reservation is about 4 slots per area (1 GiB with the
 * default slots) whatever the parent's size; only touched pages take memory. */
#define DLPG__SHM_DEFAULT_POOL_AREAS 256
#define DLPG__SHM_POOL_AREAS_MAX 4096
/* Claim table entries per area: entries of children that went to their own segments stay
 * until each member saw them. */
#define DLPG__SHM_POOL_CLAIMS_PER_AREA 4
/* An area's slots are this many of the parent's slots, split between the child's ranks: a
 * pair keeps full slots, 4 ranks get half, 8 a quarter. */
#define DLPG__SHM_AREA_SLOT_UNITS 4
/* The most ranks of a child in an area: larger ones would get slots under an eighth of the
 * parent's, and take segments of their own. */
#define DLPG__SHM_AREA_RANKS_MAX 16

enum {
  DLPG__SHM_CLAIM_FREE = 0,
  DLPG__SHM_CLAIM_TAKING = 1, /* the leader is writing it */
  DLPG__SHM_CLAIM_READY = 2,  /* area is the child's */
  DLPG__SHM_CLAIM_OWN = 3     /* no area was free: segments of their own */
};

typedef struct dlpg__shm_claim {
  _Atomic uint32_t state;
  int32_t area;
  uint32_t size;
  uint32_t pad;
  uint64_t key[2];
  /* High 32 bits: members that found the entry (the leader included); low 32: of those,
   * the ones still in the area. One word, so the last one out is never mistaken. */
  _Atomic uint64_t joins;
  uint64_t pad2[3];
} dlpg__shm_claim_t;

/* Lay out a pool of areas areas after off (into h), for children of a segment of size ranks
 * and slots of slot bytes; returns the segment's end. areas <= 0: none. */
size_t dlpg__shm_pool_layout(dlpg__shm_header_t *h, size_t off, int areas, int size, size_t slot);
/* Bytes of each slot of a child of m ranks in an area of seg's pool; 0 when seg has no pool
 * or m ranks exceed an area. */
size_t dlpg__shm_pool_slot(const uint8_t *seg, int m);
/* The leader: an entry for key, published READY with an area laid out for m ranks with
 * slots of slot bytes (their rank blocks carry pids and starts, so peers can tell a member
 * that died before it came) or OWN; its index, or -1 when the table is full. */
int dlpg__shm_pool_take(uint8_t *seg, const uint64_t key[2], int m, size_t slot,
                        const int32_t *pids, const uint64_t *starts);
/* Another member: the index of the entry published under key, -1 while there is none. */
int dlpg__shm_pool_find(uint8_t *seg, const uint64_t key[2]);
/* Another member counts itself in entry i: its state (READY or OWN; the last to see an OWN
 * entry frees it). */
uint32_t dlpg__shm_pool_join(uint8_t *seg, int i);
/* A member of entry i's area leaves it: the last one out returns the area and the entry. */
void dlpg__shm_pool_leave(uint8_t *seg, int i);
dlpg__shm_claim_t *dlpg__shm_pool_entry(uint8_t *seg, int i);
uint8_t *dlpg__shm_pool_area(uint8_t *seg, int area);

#endif
