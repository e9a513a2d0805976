/* The segment owner's side of a hand-out, one for the group's segment (create.c) and a
 * pair's (pair_create.c). The owner's abstract socket is visible to every local process
 * (/proc/net/unix), so anyone may connect: a connection from another user is closed at
 * once, before a byte is read; every other connection's hello is read side by side with
 * the rest, each within DLPG__SHM_HELLO_S, so one that stays silent holds nobody back; and
 * every fd a connection sends is closed, whatever becomes of it. */
#ifndef DLPG_SHM_HANDOUT_H_
#define DLPG_SHM_HANDOUT_H_

#include <stddef.h>
#include <stdint.h>

#include "dlpg/dlpg.h"
#include "shm/seg.h"

/* How long a connection may take to send its hello. A rank sends it as soon as it has
 * connected; only a stranger's connection runs this out, and it delays nobody meanwhile. */
#define DLPG__SHM_HELLO_S 5.0
/* Connections read at once; a further one waits in the backlog for the oldest to end. */
#define DLPG__SHM_HANDOUT_CONNS 64

typedef struct dlpg__shm_handout_conn {
  int fd;
  int32_t pid;  /* the peer's, as the kernel says (SO_PEERCRED) */
  double until; /* its hello must have come by then */
  size_t have;  /* bytes of the hello received */
  dlpg__shm_hello_t hello;
} dlpg__shm_handout_conn_t;

typedef struct dlpg__shm_handout {
  int lfd, memfd;
  const uint8_t *token; /* 16 bytes */
  int me, lo, hi;       /* the owner's rank; it serves ranks lo..hi-1, each once */
  uint8_t *served;      /* hi - lo flags */
  int nconns;
  dlpg__shm_handout_conn_t conns[DLPG__SHM_HANDOUT_CONNS];
  int said_uid, said_token, said_silent; /* each kind of stranger is logged once */
} dlpg__shm_handout_t;

dlpg_status_t dlpg__shm_handout_init(dlpg__shm_handout_t *h, int lfd, int memfd,
                                     const uint8_t token[16], int me, int lo, int hi);
/* Waits up to wait_s for connections or bytes, accepts, reads and answers what came; returns
 * how many ranks were handed the segment in this round. */
int dlpg__shm_handout_step(dlpg__shm_handout_t *h, double wait_s);
/* Closes the connections still open and frees what init took. */
void dlpg__shm_handout_end(dlpg__shm_handout_t *h);

#endif
