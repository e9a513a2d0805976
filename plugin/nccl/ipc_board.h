/* The hosts' meeting place of the IPC path's in-place collectives (ipc_board.c): plain C and
 * shared memory, no CUDA, so the agreement can be tested on any machine. */
#ifndef DLPG_NCCL_IPC_BOARD_H_
#define DLPG_NCCL_IPC_BOARD_H_

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most ranks of a group (ipc.h's DLPG__IPC_MAX_RANKS; ipc_direct.c checks they agree). */
#define DLPG__IPC_BOARD_RANKS 16

/* One tensor a rank offers its peers for an in-place collective: the allocation holding it,
 * as its owner sees it (cudaIpcMemHandle_t's bytes), and where in it the tensor starts. */
typedef struct dlpg__ipc_part {
  unsigned char handle[64];
  uint64_t base, size, id;   /* the owner's address, bytes and buffer id of the allocation */
  uint64_t off;              /* the tensor's offset in it */
} dlpg__ipc_part_t;
/* A rank's offer at one such collective: cap 0 when one of its tensors cannot be exported. */
typedef struct dlpg__ipc_offer {
  int32_t cap, pad;
  dlpg__ipc_part_t part[2];  /* input, output */
} dlpg__ipc_offer_t;

/* A group's boards as one rank sees them: its own and every peer's it mapped. */
typedef struct dlpg__ipc_boards {
  int rank, size;
  const char *group;          /* the group's name, for messages */
  double timeout_s;           /* how long a committed rank waits for the others' votes */
  const volatile int *abort;  /* non-zero once the group is aborted */
  struct dlpg__ipc_board *board[DLPG__IPC_BOARD_RANKS];
  char name[64];              /* this rank's board's name until a peer removes it */
} dlpg__ipc_boards_t;

/* This rank's board (a POSIX shared-memory object; its name goes to the peers in the rank's
 * record), a peer's (mapped by name; the last peer to map it removes the name), and
 * unmapping them all. */
dlpg_status_t dlpg__ipc_board_create(const char *fn, dlpg__ipc_boards_t *b);
dlpg_status_t dlpg__ipc_board_join(const char *fn, dlpg__ipc_boards_t *b, int q, const char *name);
void dlpg__ipc_board_free(dlpg__ipc_boards_t *b);

/* Why a collective runs staged (dlpg__ipc_board_meet's *why). */
enum { DLPG__MEET_OK, DLPG__MEET_CANNOT, DLPG__MEET_LATE, DLPG__MEET_STAGED, DLPG__MEET_UNMAPPED };
/* Offer mine for in-place operation n (numbered from 1, the same on every rank) and read
 * every peer's into theirs[q]: 1 when every rank offered and can, within window_s; else 0,
 * with rank *who and the reason *why (it cannot export, did not come in time, or ran the
 * operation staged already). */
int dlpg__ipc_board_meet(dlpg__ipc_boards_t *b, unsigned long long n, const dlpg__ipc_offer_t *mine,
                         dlpg__ipc_offer_t *theirs, double window_s, int *who, int *why);
/* Vote on operation n (commit: meet said 1 and this rank mapped what it reads); *direct
 * says whether every rank committed, which every rank learns alike. A committed rank waits
 * for its peers' votes: DLPG_ERR_TIMEOUT naming rank *who when one offered and never voted
 * within timeout_s, DLPG_ERR_ABORTED once the group is aborted. */
dlpg_status_t dlpg__ipc_board_vote(const char *fn, dlpg__ipc_boards_t *b, unsigned long long n,
                                   int commit, int *direct, int *who);

#ifdef __cplusplus
}
#endif
#endif
