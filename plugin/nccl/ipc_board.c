/* The hosts' meeting place of the IPC path's in-place collectives (ipc_direct.c): one small
 * shared-memory board per rank and group, which its peers map. At such a collective each
 * rank writes an offer (its tensors' IPC handles, or that it has none) into the board's slot
 * of the operation, reads its peers', and votes: commit when every rank offered and it
 * mapped what it reads, abort otherwise. The collective reads in place only when every rank
 * committed, so the ranks never disagree:
 *
 *   - a rank that aborts goes on at once (staged); its vote alone decides;
 *   - a rank that commits saw every peer's offer, so every peer is at this operation and
 *     votes soon: it waits for their votes (bounded by the group's timeout);
 *   - a peer whose vote word has passed this operation voted on it already: it committed only
 *     if the collective ran in place, which its last_direct word says.
 *
 * A rank whose peers do not all offer within DLPG_NCCL_IPC_DIRECT_WAIT_US aborts, so a
 * collective never blocks on a peer's host busy with another group (which NCCL, queuing
 * without the host, would not either). Slots are a ring; a reader checks the slot's number
 * before and after copying it (a writer numbers it 0 while it writes). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "nccl/ipc_board.h"

#define DLPG__BOARD_SLOTS 8
#define DLPG__BOARD_MAGIC 0x646c7067626f6172ULL /* "dlpgboar" */
enum { DLPG__VOTE_COMMIT = 1, DLPG__VOTE_ABORT = 2 };

struct dlpg__ipc_board {
  uint64_t magic;
  uint32_t joined, pad;
  uint64_t vote;         /* operation << 2 | DLPG__VOTE_*: this rank's last vote */
  uint64_t last_direct;  /* the last operation that ran in place */
  char pad1[32];
  struct {
    uint64_t seq;        /* the operation whose offer this is; 0 while written */
    uint64_t pad[7];
    dlpg__ipc_offer_t offer;
  } slot[DLPG__BOARD_SLOTS];
};

static uint64_t dlpg__ld(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static void dlpg__st(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

dlpg_status_t dlpg__ipc_board_create(const char *fn, dlpg__ipc_boards_t *b) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  char *name = b->name;
  snprintf(name, sizeof b->name, "/dlpg-ipc-%d-%lx-%d", (int)getpid(),
           (unsigned long)(t.tv_nsec ^ ((unsigned long)t.tv_sec << 20) ^ (unsigned long)(uintptr_t)b),
           b->rank);
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    int e = errno;
    name[0] = 0;
    return dlpg__error(DLPG_ERR_SYSTEM, "%s: group '%s': rank %d cannot create its CUDA IPC "
                       "board in /dev/shm: %s", fn, b->group, b->rank, strerror(e));
  }
  struct dlpg__ipc_board *m = MAP_FAILED;
  if (ftruncate(fd, sizeof *m) == 0) m = mmap(NULL, sizeof *m, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (m == MAP_FAILED) {
    shm_unlink(name);
    name[0] = 0;
    return dlpg__error(DLPG_ERR_SYSTEM, "%s: group '%s': rank %d cannot map its CUDA IPC board: "
                       "%s", fn, b->group, b->rank, strerror(e));
  }
  m->magic = DLPG__BOARD_MAGIC;
  b->board[b->rank] = m;
  return DLPG_OK;
}

dlpg_status_t dlpg__ipc_board_join(const char *fn, dlpg__ipc_boards_t *b, int q, const char *name) {
  int fd = shm_open(name, O_RDWR, 0);
  struct dlpg__ipc_board *m = MAP_FAILED;
  int e = errno;
  if (fd >= 0) {
    m = mmap(NULL, sizeof *m, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    e = errno;
    close(fd);
  }
  if (m == MAP_FAILED || m->magic != DLPG__BOARD_MAGIC) {
    if (m != MAP_FAILED) munmap(m, sizeof *m);
    return dlpg__error(DLPG_ERR_UNSUPPORTED, "%s: group '%s': rank %d cannot map rank %d's CUDA "
                       "IPC board %s: %s (do the two processes share /dev/shm?)", fn, b->group,
                       b->rank, q, name, m == MAP_FAILED ? strerror(e) : "not a board");
  }
  /* The last peer to map it removes the name: the mappings keep the memory, and a crash
   * later leaves nothing behind in /dev/shm. */
  if (__atomic_add_fetch(&m->joined, 1, __ATOMIC_ACQ_REL) == (uint32_t)b->size - 1) shm_unlink(name);
  b->board[q] = m;
  return DLPG_OK;
}

void dlpg__ipc_board_free(dlpg__ipc_boards_t *b) {
  for (int q = 0; q < b->size; q++) {
    if (b->board[q]) munmap(b->board[q], sizeof *b->board[q]);
    b->board[q] = NULL;
  }
  /* Peers that never mapped it (a group that never ran a collective) left the name. */
  if (b->name[0]) shm_unlink(b->name);
  b->name[0] = 0;
}

/* Rank q's offer for operation n: 1 when read, 0 when not there yet, -1 when q aborted n
 * (it voted so, or has passed n, which in place would have needed this rank's vote). A
 * peer that committed keeps its offer until this rank votes. */
static int dlpg__board_read(const struct dlpg__ipc_board *b, unsigned long long n,
                            dlpg__ipc_offer_t *out) {
  uint64_t v = dlpg__ld(&b->vote);
  const uint64_t *seq = &b->slot[n % DLPG__BOARD_SLOTS].seq;
  if ((v >> 2) > n || v == ((uint64_t)n << 2 | DLPG__VOTE_ABORT)) {
    /* Its offer, when still there, says whether it could not export (the reason to log). */
    out->cap = 1;
    if (dlpg__ld(seq) == n) out->cap = __atomic_load_n(&b->slot[n % DLPG__BOARD_SLOTS].offer.cap, __ATOMIC_RELAXED);
    return -1;
  }
  if (dlpg__ld(seq) != n) return 0;
  memcpy(out, (const void *)&b->slot[n % DLPG__BOARD_SLOTS].offer, sizeof *out);
  __atomic_thread_fence(__ATOMIC_ACQUIRE);
  return dlpg__ld(seq) == n ? 1 : 0;
}

int dlpg__ipc_board_meet(dlpg__ipc_boards_t *b, unsigned long long n, const dlpg__ipc_offer_t *mine,
                         dlpg__ipc_offer_t *theirs, double window_s, int *who, int *why) {
  struct dlpg__ipc_board *m = b->board[b->rank];
  uint64_t *seq = &m->slot[n % DLPG__BOARD_SLOTS].seq;
  dlpg__st(seq, 0);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  memcpy((void *)&m->slot[n % DLPG__BOARD_SLOTS].offer, mine, sizeof *mine);
  dlpg__st(seq, n);
  int all = mine->cap;
  *who = b->rank;
  *why = all ? DLPG__MEET_OK : DLPG__MEET_CANNOT;
  unsigned char got[DLPG__IPC_BOARD_RANKS] = {0};
  got[b->rank] = 1;
  double end = dlpg__now() + window_s;
  for (int left = b->size - 1; all && left > 0;) {
    for (int q = 0; q < b->size && all; q++) {
      if (got[q]) continue;
      int r = dlpg__board_read(b->board[q], n, &theirs[q]);
      if (r < 0 || (r > 0 && !theirs[q].cap)) {
        all = 0;
        *who = q;
        *why = r < 0 && theirs[q].cap ? DLPG__MEET_STAGED : DLPG__MEET_CANNOT;
      }
      if (r > 0) {
        got[q] = 1;
        left--;
      }
    }
    if (all && left > 0) {
      if (dlpg__now() <= end) {
        sched_yield();
        continue;
      }
      all = 0;
      *why = DLPG__MEET_LATE;
      for (int q = b->size - 1; q >= 0; q--)
        if (!got[q]) *who = q;
    }
  }
  return all;
}

dlpg_status_t dlpg__ipc_board_vote(const char *fn, dlpg__ipc_boards_t *b, unsigned long long n,
                                   int commit, int *direct, int *who) {
  struct dlpg__ipc_board *m = b->board[b->rank];
  dlpg__st(&m->vote, (uint64_t)n << 2 | (commit ? DLPG__VOTE_COMMIT : DLPG__VOTE_ABORT));
  *direct = 0;
  *who = -1;
  if (!commit) return DLPG_OK;
  double end = dlpg__now() + b->timeout_s;
  int all = 1;
  for (int q = 0; q < b->size && all; q++) {
    if (q == b->rank) continue;
    for (;;) {
      uint64_t v = dlpg__ld(&b->board[q]->vote);
      if ((v >> 2) == n) {
        all = (v & 3) == DLPG__VOTE_COMMIT;
        break;
      }
      if ((v >> 2) > n) {
        all = dlpg__ld(&b->board[q]->last_direct) >= n;
        break;
      }
      if (b->abort && *b->abort)
        return dlpg__error(DLPG_ERR_ABORTED, "%s: group '%s' was aborted", fn, b->group);
      if (dlpg__now() > end) {
        *who = q;
        return dlpg__error(DLPG_ERR_TIMEOUT, "%s: group '%s': rank %d offered its tensors for an "
                           "in-place CUDA IPC collective and did not vote on it within %g s "
                           "(rank %d waited); the group's CUDA operations fail from then on",
                           fn, b->group, q, b->timeout_s, b->rank);
      }
      sched_yield();
    }
  }
  if (all) dlpg__st(&m->last_direct, n);
  *direct = all;
  return DLPG_OK;
}
