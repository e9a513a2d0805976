/* The pair segment's layout and the pair engine's handle (pair.h), shared by its creation
 * (pair_create.c) and its progress (pair.c). Side 0 is the lower rank, side 1 the higher;
 * direction d carries side d's messages to side 1 - d. Each counter is written by one side
 * only, on a cache line of its own:
 *   header | side blocks [2] | direction blocks [2] | rings [2][RING] | data slots [2][DATA]
 * A side's bell is bumped by the other side after every change it must look at, and is
 * the one futex word that side's progress sleeps on. */
#ifndef DLPG_SHM_PAIR_SEG_H_
#define DLPG_SHM_PAIR_SEG_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "shm/pair.h"
#include "shm/seg.h"

#define DLPG__PAIR_MAGIC 0x317269617067706cull /* "lpgpair1" */
#define DLPG__PAIR_VERSION 1u
#define DLPG__PAIR_RING 16        /* ring entries per direction */
#define DLPG__PAIR_DATA 4         /* data slots per direction: the pipeline's depth */
#define DLPG__PAIR_HEAD 64        /* a ring entry's head; the eager payload follows */
#define DLPG__PAIR_EAGER_MAX 4096 /* the largest message sent whole (eagerly) */
#define DLPG__PAIR_ENTRY (DLPG__PAIR_HEAD + DLPG__PAIR_EAGER_MAX)

enum { DLPG__PAIR_EAGER = 1, DLPG__PAIR_RTS = 2 };

typedef struct dlpg__pair_entry {
  uint32_t type;  /* DLPG__PAIR_EAGER or DLPG__PAIR_RTS */
  int32_t tag;
  uint32_t id;    /* RTS: the message's number in its direction */
  uint32_t dtype; /* the sender's dlpg__dtype_t */
  uint64_t total; /* bytes of the message */
} dlpg__pair_entry_t;

typedef struct dlpg__pair_side {
  _Alignas(DLPG__SHM_LINE) _Atomic uint32_t bell;
  _Atomic uint32_t bell_waiters;
  _Atomic int32_t state; /* DLPG__SHM_JOINING .. DLPG__SHM_FAILED (seg.h) */
  int32_t pid;
  uint64_t starttime;
  char reason[256];      /* why it failed, written before state */
} dlpg__pair_side_t;

typedef struct dlpg__pair_dir {
  _Alignas(DLPG__SHM_LINE) _Atomic uint32_t ring_sent; /* src: entries written */
  _Atomic uint32_t data_sent;                          /* src: chunks written */
  _Atomic uint32_t ack;      /* src: the last large message it finished or refused */
  _Alignas(DLPG__SHM_LINE) _Atomic uint32_t ring_done; /* dst: entries consumed */
  _Atomic uint32_t data_done;                          /* dst: chunks consumed */
  _Atomic uint32_t cts;      /* dst: the large message it is ready for (its id) */
  uint32_t cts_refused;      /* dst, written before cts: 1 when the receive does not fit */
  uint64_t cts_bytes;        /* dst, before cts: bytes of the receive it matched */
  uint32_t cts_dtype;        /* dst, before cts: its dtype */
} dlpg__pair_dir_t;

typedef struct dlpg__pair_header {
  uint64_t magic, nonce;
  uint32_t version, pad;
  uint64_t slot_bytes, total_bytes;
  uint64_t off_side, off_dir, off_ring, off_data;
} dlpg__pair_header_t;

/* A message that arrived before its receive. */
typedef struct dlpg__pair_unexp {
  struct dlpg__pair_unexp *next;
  int type, tag;
  uint32_t id, dtype;
  uint64_t total;
  uint8_t *data; /* EAGER: a copy of its bytes (total of them) */
} dlpg__pair_unexp_t;

/* A matched receive waiting for its turn to stream, or refused. */
typedef struct dlpg__pair_match {
  struct dlpg__pair_match *next;
  dlpg__shm_xfer_t *x;
  uint32_t id, dtype;
  uint64_t total;
} dlpg__pair_match_t;

struct dlpg__shm_pair {
  int me, peer;            /* group ranks */
  int side;                /* 0: lower rank */
  uint8_t *base;
  size_t map_bytes, slot_bytes, stage_cap;
  int spin;
  dlpg__pair_header_t *hdr;
  dlpg__pair_side_t *sides;    /* [2] */
  dlpg__pair_dir_t *dirs;      /* [2]: dirs[side] is what this rank sends */
  uint8_t *ring, *data;
  atomic_int aborted;
  atomic_int drivers;          /* callers progressing a blocking transfer */
  _Atomic uint32_t posted;     /* bumped at each post: the idle serving thread sleeps on it */
  pthread_mutex_t mu;          /* everything below; one progress pass at a time */
  /* Sending. */
  dlpg__shm_xfer_t *sq, *sq_tail;       /* not yet in the ring, in issue order */
  dlpg__shm_xfer_t *await;              /* announced, waiting for the receiver */
  dlpg__shm_xfer_t *out;                /* streaming */
  uint32_t next_id, ring_sent, data_sent, seen_cts;
  /* Receiving. */
  dlpg__shm_xfer_t *rq, *rq_tail;       /* posted, not matched, in issue order */
  dlpg__pair_unexp_t *uq, *uq_tail;     /* arrived, not matched, in arrival order */
  dlpg__pair_match_t *mq, *mq_tail;     /* matched large ones, in match order */
  dlpg__pair_match_t *in;               /* the one streaming in (cts issued) */
  uint32_t ring_seen, data_recvd, last_cts;
  int cts_issued;
  size_t staged;
  double next_check;
  dlpg_status_t broken;
  char broken_msg[512];
};

static inline uint8_t *dlpg__pair_ring_entry(const dlpg__shm_pair_t *p, int dir, uint32_t n) {
  return p->ring + ((size_t)dir * DLPG__PAIR_RING + (n % DLPG__PAIR_RING)) * DLPG__PAIR_ENTRY;
}
static inline uint8_t *dlpg__pair_data_slot(const dlpg__shm_pair_t *p, int dir, uint32_t n) {
  return p->data + ((size_t)dir * DLPG__PAIR_DATA + (n % DLPG__PAIR_DATA)) * p->slot_bytes;
}

/* Offsets of the parts for chunk size slot (pair_create.c). */
void dlpg__pair_layout(dlpg__pair_header_t *h, size_t slot);
/* Point p's parts into the mapping at base. */
void dlpg__pair_bind(dlpg__shm_pair_t *p, uint8_t *base, size_t bytes);

#endif
