/* Progress of a pair (pair.h, layout in pair_seg.h). One pass, under the pair's lock, does
 * whatever can be done without waiting:
 *   1. receives posted since the last pass take the oldest unexpected message of their tag;
 *   2. sends enter the ring in issue order: a small one whole (it is then done), a large
 *      one as an announcement (it then waits for the receiver's clear-to-send);
 *   3. ring entries from the peer are drained: each meets the oldest posted receive of its
 *      tag, or waits as unexpected (a small one copied out, up to stage_cap bytes);
 *   4. the receiver clears one matched large message at a time to stream (cts), once the
 *      sender acknowledged the previous one (ack): one stream per direction;
 *   5. chunks stream through DLPG__PAIR_DATA slots in each direction, so a message of any
 *      size moves while both ranks copy;
 *   6. deadlines, the peer's state and life are checked (every 50 ms while work is pending).
 * Invariant after step 1: for any tag, posted receives or unexpected messages, never both,
 * so each side's n-th message of a tag meets the other's n-th operation of that tag. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/status.h"
#include "core/lines/tensor.h"
#include "shm/pair_seg.h"

#define DLPG__PAIR_SLICE_S 0.1
#define DLPG__PAIR_CHECK_S 0.05

static void dlpg__pair_futex_wait(_Atomic uint32_t *w, uint32_t v, double s, int private_) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  syscall(SYS_futex, (uint32_t *)w, private_ ? FUTEX_WAIT_PRIVATE : FUTEX_WAIT, v, &ts, NULL, 0);
}
static void dlpg__pair_futex_wake(_Atomic uint32_t *w, int private_) {
  syscall(SYS_futex, (uint32_t *)w, private_ ? FUTEX_WAKE_PRIVATE : FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void dlpg__pair_ring_bell(dlpg__pair_side_t *s) {
  atomic_fetch_add(&s->bell, 1);
  if (atomic_load(&s->bell_waiters)) dlpg__pair_futex_wake(&s->bell, 0);
}

size_t dlpg__shm_pair_eager_bytes(const dlpg__shm_pair_t *p) {
  (void)p;
  return DLPG__PAIR_EAGER_MAX;
}

/* "400 bytes (100 x float32)" */
static const char *dlpg__pair_bytes(char *out, size_t cap, uint64_t bytes, uint32_t dtype) {
  size_t es = dtype < DLPG__DT_COUNT ? dlpg__dtype_size((dlpg__dtype_t)dtype) : 0;
  if (es)
    snprintf(out, cap, "%llu bytes (%llu x %s)", (unsigned long long)bytes,
             (unsigned long long)(bytes / es), dlpg__dtype_name((dlpg__dtype_t)dtype));
  else
    snprintf(out, cap, "%llu bytes", (unsigned long long)bytes);
  return out;
}

/* ------------------------------------------------------------------ completion */

/* Finished transfers wait on this list (linked through next) until the pass has let go of
 * the lock: their callbacks may take other locks. */
typedef struct dlpg__pair_done { dlpg__shm_xfer_t *head, *tail; } dlpg__pair_done_t;

static void dlpg__pair_finish(dlpg__pair_done_t *d, dlpg__shm_xfer_t *x, dlpg_status_t st,
                              const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void dlpg__pair_finish(dlpg__pair_done_t *d, dlpg__shm_xfer_t *x, dlpg_status_t st,
                              const char *fmt, ...) {
  x->st = st;
  x->msg[0] = '\0';
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->msg, sizeof x->msg, fmt, ap);
    va_end(ap);
  }
  x->next = NULL;
  if (d->tail) d->tail->next = x;
  else d->head = x;
  d->tail = x;
}

static void dlpg__pair_flush(dlpg__shm_pair_t *p, dlpg__pair_done_t *d) {
  int woke = 0;
  for (dlpg__shm_xfer_t *x = d->head, *n; x; x = n) {
    n = x->next;
    int inl = x->inl;
    if (x->done) x->done(x, x->st, x->st == DLPG_OK ? NULL : x->msg);
    /* An inline transfer lives on its runner's stack until it sees finished. */
    if (inl) {
      __atomic_store_n(&x->finished, 1, __ATOMIC_RELEASE);
      woke = 1;
    }
  }
  /* A runner sleeping on this side's bell whose transfer another thread completed. */
  if (woke) dlpg__pair_ring_bell(&p->sides[p->side]);
}

/* "a send of 40 bytes with tag 7 to rank 1" */
static void dlpg__pair_what(const dlpg__shm_pair_t *p, const dlpg__shm_xfer_t *x, char *out,
                            size_t cap) {
  snprintf(out, cap, "a %s of %zu bytes with tag %d %s rank %d", x->send ? "send" : "receive",
           x->nbytes, x->tag, x->send ? "to" : "from", p->peer);
}

typedef void (*dlpg__pair_visit_fn)(dlpg__shm_pair_t *p, dlpg__shm_xfer_t *x, void *arg);

/* Every pending transfer, each once; the lists are emptied. */
static void dlpg__pair_take_all(dlpg__shm_pair_t *p, dlpg__pair_visit_fn f, void *arg) {
  for (dlpg__shm_xfer_t *x = p->sq, *n; x; x = n) { n = x->next; f(p, x, arg); }
  for (dlpg__shm_xfer_t *x = p->await, *n; x; x = n) { n = x->next; f(p, x, arg); }
  for (dlpg__shm_xfer_t *x = p->rq, *n; x; x = n) { n = x->next; f(p, x, arg); }
  for (dlpg__pair_match_t *m = p->mq, *n; m; m = n) { n = m->next; f(p, m->x, arg); free(m); }
  if (p->out) f(p, p->out, arg);
  if (p->in) { f(p, p->in->x, arg); free(p->in); }
  p->sq = p->sq_tail = p->await = p->rq = p->rq_tail = p->out = NULL;
  p->mq = p->mq_tail = p->in = NULL;
}

static void dlpg__pair_fail_one(dlpg__shm_pair_t *p, dlpg__shm_xfer_t *x, void *arg) {
  char what[160];
  dlpg__pair_what(p, x, what, sizeof what);
  dlpg__pair_finish(arg, x, p->broken, "%s: rank %d, %s: %s", x->fn, p->me, what, p->broken_msg);
}

/* The pair is broken (its protocol state can no longer be trusted): every pending and later
 * transfer fails with st and msg; the peer learns of it through this side's state. */
static void dlpg__pair_break(dlpg__shm_pair_t *p, dlpg__pair_done_t *d, dlpg_status_t st,
                             const char *msg) {
  if (p->broken == DLPG_OK) {
    p->broken = st;
    snprintf(p->broken_msg, sizeof p->broken_msg, "%s", msg);
    dlpg__pair_side_t *me = &p->sides[p->side];
    if (atomic_load(&me->state) == DLPG__SHM_ALIVE) {
      snprintf(me->reason, sizeof me->reason, "%.255s", msg);
      atomic_store(&me->state, st == DLPG_ERR_ABORTED ? DLPG__SHM_ABORTED : DLPG__SHM_FAILED);
    }
    dlpg__pair_ring_bell(&p->sides[1 - p->side]);
  }
  dlpg__pair_take_all(p, dlpg__pair_fail_one, d);
}

/* ------------------------------------------------------------------ the pass */

/* A receive posted to several pairs (its claim) may take a message only if no other pair's
 * message took it first: 1 when x may match now (it then belongs to this pair alone). */
static int dlpg__pair_claim(dlpg__shm_xfer_t *x) {
  int expect = 0;
  if (!x->claim) return 1;
  x->claimed = __atomic_compare_exchange_n(x->claim, &expect, 1, 0, __ATOMIC_ACQ_REL,
                                           __ATOMIC_ACQUIRE);
  return x->claimed;
}

static void dlpg__pair_finish_cancelled(dlpg__pair_done_t *d, dlpg__shm_xfer_t *x) {
  dlpg__pair_finish(d, x, DLPG_ERR_ABORTED, "%s: another rank's message matched it", x->fn);
}

/* The oldest posted receive of tag that may match; receives from any source that another
 * pair matched meanwhile leave the queue on the way. */
static dlpg__shm_xfer_t *dlpg__pair_take_recv(dlpg__shm_pair_t *p, dlpg__pair_done_t *d,
                                              int tag) {
  for (dlpg__shm_xfer_t **pp = &p->rq, *prev = NULL; *pp;) {
    dlpg__shm_xfer_t *x = *pp;
    if (x->tag != tag) { prev = x; pp = &x->next; continue; }
    *pp = x->next;
    if (p->rq_tail == x) p->rq_tail = prev;
    if (dlpg__pair_claim(x)) return x;
    dlpg__pair_finish_cancelled(d, x);
  }
  return NULL;
}

static void dlpg__pair_match_push(dlpg__shm_pair_t *p, dlpg__pair_done_t *d, dlpg__shm_xfer_t *x,
                                  uint32_t id, uint64_t total, uint32_t dtype) {
  dlpg__pair_match_t *m = malloc(sizeof *m);
  if (!m) {
    dlpg__pair_break(p, d, DLPG_ERR_SYSTEM, "out of memory matching a large message");
    dlpg__pair_finish(d, x, DLPG_ERR_SYSTEM, "%s: rank %d: out of memory", x->fn, p->me);
    return;
  }
  m->next = NULL;
  m->x = x;
  m->id = id;
  m->total = total;
  m->dtype = dtype;
  if (p->mq_tail) p->mq_tail->next = m;
  else p->mq = m;
  p->mq_tail = m;
}

/* A small message for receive x: its bytes, or the size mismatch. */
/* Receive x of this rank meets a message of total bytes of dtype: the mismatch, if any,
 * as x's failure (dlpg's sentence, as on Gloo). 1 when they match. */
static int dlpg__pair_fits(dlpg__shm_pair_t *p, dlpg__pair_done_t *d, dlpg__shm_xfer_t *x,
                           uint64_t total, uint32_t dtype) {
  if (total == x->nbytes && dtype == (uint32_t)x->dtype) return 1;
  char a[96], b[96];
  dlpg__pair_finish(d, x, DLPG_ERR_INVALID_ARGUMENT,
                    "%s: rank %d posted %s from rank %d, tag %d, but rank %d sent %s (the "
                    "message was dropped)", x->fn, p->me,
                    dlpg__pair_bytes(a, sizeof a, x->nbytes, (uint32_t)x->dtype), p->peer, x->tag,
                    p->peer, dlpg__pair_bytes(b, sizeof b, total, dtype));
  return 0;
}

static void dlpg__pair_deliver(dlpg__shm_pair_t *p, dlpg__pair_done_t *d, dlpg__shm_xfer_t *x,
                               const uint8_t *bytes, uint64_t total, uint32_t dtype) {
  if (!dlpg__pair_fits(p, d, x, total, dtype)) return;
  if (total) memcpy(x->buf, bytes, total);
  dlpg__pair_finish(d, x, DLPG_OK, NULL);
}

/* Step 1: posted receives against unexpected messages. */
static int dlpg__pair_match_posted(dlpg__shm_pair_t *p, dlpg__pair_done_t *d) {
  int prog = 0;
  dlpg__shm_xfer_t **pp = &p->rq, *prev = NULL;
  while (*pp && p->uq) {
    dlpg__shm_xfer_t *x = *pp;
    dlpg__pair_unexp_t **up = &p->uq, *uprev = NULL;
    while (*up && (*up)->tag != x->tag) { uprev = *up; up = &(*up)->next; }
    if (!*up) { prev = x; pp = &x->next; continue; }
    *pp = x->next;
    if (p->rq_tail == x) p->rq_tail = prev;
    if (!dlpg__pair_claim(x)) {
      /* Matched on another pair: the message waits for this pair's next receive. */
      dlpg__pair_finish_cancelled(d, x);
      prog++;
      continue;
    }
    dlpg__pair_unexp_t *u = *up;
    *up = u->next;
    if (p->uq_tail == u) p->uq_tail = uprev;
    if (u->type == DLPG__PAIR_EAGER) {
      dlpg__pair_deliver(p, d, x, u->data, u->total, u->dtype);
      p->staged -= u->total;
    } else {
      dlpg__pair_match_push(p, d, x, u->id, u->total, u->dtype);
    }
    free(u->data);
    free(u);
    prog++;
  }
  return prog;
}

/* Step 2: sends into the ring. */
static int dlpg__pair_ring_out(dlpg__shm_pair_t *p, dlpg__pair_done_t *d) {
  dlpg__pair_dir_t *dir = &p->dirs[p->side];
  int prog = 0;
  while (p->sq && p->ring_sent - atomic_load_explicit(&dir->ring_done, memory_order_acquire) <
                      DLPG__PAIR_RING) {
    dlpg__shm_xfer_t *x = p->sq;
    p->sq = x->next;
    if (!p->sq) p->sq_tail = NULL;
    uint8_t *e = dlpg__pair_ring_entry(p, p->side, p->ring_sent);
    dlpg__pair_entry_t h = {0, x->tag, 0, (uint32_t)x->dtype, x->nbytes};
    int eager = x->nbytes <= dlpg__shm_pair_eager_bytes(p);
    h.type = eager ? DLPG__PAIR_EAGER : DLPG__PAIR_RTS;
    if (!eager) h.id = x->id = ++p->next_id;
    memcpy(e, &h, sizeof h);
    if (eager && x->nbytes) memcpy(e + DLPG__PAIR_HEAD, x->buf, x->nbytes);
    atomic_store_explicit(&dir->ring_sent, ++p->ring_sent, memory_order_release);
    if (eager) {
      dlpg__pair_finish(d, x, DLPG_OK, NULL);
    } else {
      x->next = p->await;
      p->await = x;
    }
    prog++;
  }
  return prog;
}

/* Step 3: the peer's ring entries. */
static int dlpg__pair_ring_in(dlpg__shm_pair_t *p, dlpg__pair_done_t *d) {
  dlpg__pair_dir_t *dir = &p->dirs[1 - p->side];
  int prog = 0;
  while (p->ring_seen != atomic_load_explicit(&dir->ring_sent, memory_order_acquire)) {
    const uint8_t *e = dlpg__pair_ring_entry(p, 1 - p->side, p->ring_seen);
    dlpg__pair_entry_t h;
    memcpy(&h, e, sizeof h);
    dlpg__shm_xfer_t *x = dlpg__pair_take_recv(p, d, h.tag);
    if (x && h.type == DLPG__PAIR_EAGER) {
      dlpg__pair_deliver(p, d, x, e + DLPG__PAIR_HEAD, h.total, h.dtype);
    } else if (x) {
      dlpg__pair_match_push(p, d, x, h.id, h.total, h.dtype);
    } else {
      uint64_t bytes = h.type == DLPG__PAIR_EAGER ? h.total : 0;
      /* The staging bound: past it the entry stays in the ring (the sender waits). */
      if (bytes && p->staged + bytes > p->stage_cap) break;
      dlpg__pair_unexp_t *u = calloc(1, sizeof *u);
      uint8_t *copy = bytes ? malloc(bytes) : NULL;
      if (!u || (bytes && !copy)) {
        free(u);
        free(copy);
        break; /* no memory now: the entry stays, and a later pass retries */
      }
      if (bytes) memcpy(copy, e + DLPG__PAIR_HEAD, bytes);
      *u = (dlpg__pair_unexp_t){NULL, (int)h.type, h.tag, h.id, h.dtype, h.total, copy};
      p->staged += bytes;
      if (p->uq_tail) p->uq_tail->next = u;
      else p->uq = u;
      p->uq_tail = u;
    }
    atomic_store_explicit(&dir->ring_done, ++p->ring_seen, memory_order_release);
    prog++;
  }
  return prog;
}

/* Step 4 and the receiving half of step 5. */
static int dlpg__pair_stream_in(dlpg__shm_pair_t *p, dlpg__pair_done_t *d) {
  dlpg__pair_dir_t *dir = &p->dirs[1 - p->side];
  int prog = 0;
  if (!p->in && p->mq && atomic_load_explicit(&dir->ack, memory_order_acquire) == p->last_cts) {
    dlpg__pair_match_t *m = p->mq;
    p->mq = m->next;
    if (!p->mq) p->mq_tail = NULL;
    int fits = dlpg__pair_fits(p, d, m->x, m->total, m->dtype);
    dir->cts_refused = fits ? 0 : 1;
    dir->cts_bytes = m->x->nbytes;
    dir->cts_dtype = (uint32_t)m->x->dtype;
    atomic_store_explicit(&dir->cts, m->id, memory_order_release);
    p->last_cts = m->id;
    if (fits) {
      m->x->off = 0;
      p->in = m;
    } else {
      free(m);
    }
    prog++;
  }
  while (p->in && p->data_recvd != atomic_load_explicit(&dir->data_sent, memory_order_acquire)) {
    dlpg__shm_xfer_t *x = p->in->x;
    size_t len = x->nbytes - x->off < p->slot_bytes ? x->nbytes - x->off : p->slot_bytes;
    memcpy((uint8_t *)x->buf + x->off, dlpg__pair_data_slot(p, 1 - p->side, p->data_recvd), len);
    x->off += len;
    atomic_store_explicit(&dir->data_done, ++p->data_recvd, memory_order_release);
    prog++;
    if (x->off == x->nbytes) {
      dlpg__pair_finish(d, x, DLPG_OK, NULL);
      free(p->in);
      p->in = NULL;
    }
  }
  return prog;
}

/* The sending half of steps 4 and 5. */
static int dlpg__pair_stream_out(dlpg__shm_pair_t *p, dlpg__pair_done_t *d) {
  dlpg__pair_dir_t *dir = &p->dirs[p->side];
  int prog = 0;
  uint32_t c = atomic_load_explicit(&dir->cts, memory_order_acquire);
  if (!p->out && c != p->seen_cts) {
    p->seen_cts = c;
    dlpg__shm_xfer_t **pp = &p->await;
    while (*pp && (*pp)->id != c) pp = &(*pp)->next;
    if (!*pp) {
      char m[160];
      snprintf(m, sizeof m, "rank %d cleared message %u, which rank %d never announced", p->peer,
               c, p->me);
      dlpg__pair_break(p, d, DLPG_ERR_INTERNAL, m);
      return 1;
    }
    dlpg__shm_xfer_t *x = *pp;
    *pp = x->next;
    if (dir->cts_refused) {
      atomic_store_explicit(&dir->ack, c, memory_order_release);
      char a[96], b[96];
      dlpg__pair_finish(d, x, DLPG_ERR_INVALID_ARGUMENT,
                        "%s: rank %d sent %s to rank %d, tag %d, but rank %d posted %s", x->fn,
                        p->me, dlpg__pair_bytes(a, sizeof a, x->nbytes, (uint32_t)x->dtype),
                        p->peer, x->tag, p->peer,
                        dlpg__pair_bytes(b, sizeof b, dir->cts_bytes, dir->cts_dtype));
    } else {
      x->off = 0;
      p->out = x;
    }
    prog++;
  }
  while (p->out && p->data_sent - atomic_load_explicit(&dir->data_done, memory_order_acquire) <
                       DLPG__PAIR_DATA) {
    dlpg__shm_xfer_t *x = p->out;
    size_t len = x->nbytes - x->off < p->slot_bytes ? x->nbytes - x->off : p->slot_bytes;
    memcpy(dlpg__pair_data_slot(p, p->side, p->data_sent), (const uint8_t *)x->buf + x->off, len);
    x->off += len;
    atomic_store_explicit(&dir->data_sent, ++p->data_sent, memory_order_release);
    prog++;
    if (x->off == x->nbytes) {
      atomic_store_explicit(&dir->ack, x->id, memory_order_release);
      dlpg__pair_finish(d, x, DLPG_OK, NULL);
      p->out = NULL;
    }
  }
  return prog;
}

static int dlpg__pair_pending(const dlpg__shm_pair_t *p) {
  return p->sq || p->rq || p->await || p->mq || p->in || p->out;
}

/* Why the peer can no longer take part (its state, its life), or DLPG_OK. */
static dlpg_status_t dlpg__pair_peer_gone(dlpg__shm_pair_t *p, int check_pid, char *msg,
                                          size_t cap) {
  dlpg__pair_side_t *s = &p->sides[1 - p->side];
  int32_t state = atomic_load(&s->state);
  if (state == DLPG__SHM_LEFT) {
    snprintf(msg, cap, "rank %d (pid %d) left the group (destroyed it)", p->peer, s->pid);
    return DLPG_ERR_REMOTE;
  }
  if (state == DLPG__SHM_ABORTED) {
    snprintf(msg, cap, "rank %d (pid %d) was aborted", p->peer, s->pid);
    return DLPG_ERR_REMOTE;
  }
  if (state == DLPG__SHM_FAILED) {
    snprintf(msg, cap, "rank %d (pid %d) failed: %.256s", p->peer, s->pid, s->reason);
    return DLPG_ERR_REMOTE;
  }
  if (check_pid && !dlpg__shm_pid_alive(s->pid, s->starttime)) {
    snprintf(msg, cap, "rank %d (pid %d) died", p->peer, s->pid);
    return DLPG_ERR_REMOTE;
  }
  return DLPG_OK;
}

/* Step 6: transfers past their deadline, and a peer that is gone. A transfer that has not
 * touched the protocol yet (not in the ring, not matched) ends alone; one that has breaks
 * the pair, since the two sides no longer agree on what comes next. */
static void dlpg__pair_checks(dlpg__shm_pair_t *p, dlpg__pair_done_t *d, double now) {
  char m[400];
  dlpg_status_t gone = dlpg__pair_peer_gone(p, 1, m, sizeof m);
  if (gone != DLPG_OK) {
    dlpg__pair_break(p, d, gone, m);
    return;
  }
  for (dlpg__shm_xfer_t **pp = &p->rq, *prev = NULL; *pp;) {
    dlpg__shm_xfer_t *x = *pp;
    if (now < x->deadline) { prev = x; pp = &x->next; continue; }
    *pp = x->next;
    if (p->rq_tail == x) p->rq_tail = prev;
    dlpg__pair_finish(d, x, DLPG_ERR_TIMEOUT,
                      "%s: rank %d timed out waiting for rank %d's send with tag %d (%zu bytes); "
                      "did rank %d issue the matching dlpg_send?", x->fn, p->me, p->peer, x->tag,
                      x->nbytes, p->peer);
  }
  for (dlpg__shm_xfer_t **pp = &p->sq, *prev = NULL; *pp;) {
    dlpg__shm_xfer_t *x = *pp;
    if (now < x->deadline) { prev = x; pp = &x->next; continue; }
    *pp = x->next;
    if (p->sq_tail == x) p->sq_tail = prev;
    dlpg__pair_finish(d, x, DLPG_ERR_TIMEOUT,
                      "%s: rank %d timed out sending %zu bytes with tag %d: rank %d took none of "
                      "this rank's earlier messages off the pair's ring", x->fn, p->me,
                      x->nbytes, x->tag, p->peer);
  }
  const dlpg__shm_xfer_t *late = NULL;
  for (const dlpg__shm_xfer_t *x = p->await; x && !late; x = x->next)
    if (now >= x->deadline) late = x;
  for (const dlpg__pair_match_t *q = p->mq; q && !late; q = q->next)
    if (now >= q->x->deadline) late = q->x;
  if (!late && p->out && now >= p->out->deadline) late = p->out;
  if (!late && p->in && now >= p->in->x->deadline) late = p->in->x;
  if (late) {
    snprintf(m, sizeof m, "timed out: rank %d did not take its part in %s %s with tag %d "
             "(%zu bytes) in time", p->peer, late->send ? "the send" : "the receive",
             late->send ? "to it" : "from it", late->tag, late->nbytes);
    dlpg__pair_break(p, d, DLPG_ERR_TIMEOUT, m);
  }
}

static int dlpg__pair_pass(dlpg__shm_pair_t *p, dlpg__pair_done_t *d) {
  if (p->broken != DLPG_OK) {
    dlpg__pair_take_all(p, dlpg__pair_fail_one, d);
    return 0;
  }
  if (atomic_load(&p->aborted)) {
    char m[128];
    snprintf(m, sizeof m, "the group was aborted on rank %d", p->me);
    dlpg__pair_break(p, d, DLPG_ERR_ABORTED, m);
    return 1;
  }
  int prog = dlpg__pair_match_posted(p, d);
  prog += dlpg__pair_ring_out(p, d);
  prog += dlpg__pair_ring_in(p, d);
  prog += dlpg__pair_match_posted(p, d);
  prog += dlpg__pair_stream_in(p, d);
  prog += dlpg__pair_stream_out(p, d);
  if (dlpg__pair_pending(p)) {
    double now = dlpg__now();
    /* A peer that failed or left says so in its state: no need to wait for the slice. */
    char m[400];
    if (now >= p->next_check || dlpg__pair_peer_gone(p, 0, m, sizeof m) != DLPG_OK) {
      p->next_check = now + DLPG__PAIR_CHECK_S;
      dlpg__pair_checks(p, d, now);
    }
  }
  if (prog) dlpg__pair_ring_bell(&p->sides[1 - p->side]);
  return prog;
}

/* One pass and its completions; the count of things done. *pending (may be NULL): whether
 * transfers are left. */
static int dlpg__pair_progress(dlpg__shm_pair_t *p, int *pending) {
  dlpg__pair_done_t d = {NULL, NULL};
  pthread_mutex_lock(&p->mu);
  int prog = dlpg__pair_pass(p, &d);
  if (pending) *pending = dlpg__pair_pending(p);
  pthread_mutex_unlock(&p->mu);
  if (d.head) prog++;
  dlpg__pair_flush(p, &d);
  return prog;
}

/* Sleep until this side's bell moves from v (spinning first), at most a slice. */
static void dlpg__pair_sleep(dlpg__shm_pair_t *p, uint32_t v) {
  dlpg__pair_side_t *me = &p->sides[p->side];
  for (int i = 0; i < p->spin; i++) {
    if (atomic_load_explicit(&me->bell, memory_order_acquire) != v) return;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  atomic_fetch_add(&me->bell_waiters, 1);
  if (atomic_load(&me->bell) == v && !atomic_load(&p->aborted))
    dlpg__pair_futex_wait(&me->bell, v, DLPG__PAIR_SLICE_S, 0);
  atomic_fetch_sub(&me->bell_waiters, 1);
}

/* ------------------------------------------------------------------ the entry points */

static void dlpg__pair_enqueue(dlpg__shm_pair_t *p, dlpg__shm_xfer_t *x) {
  dlpg__pair_done_t d = {NULL, NULL};
  x->next = NULL;
  x->off = 0;
  __atomic_store_n(&x->finished, 0, __ATOMIC_RELAXED);
  pthread_mutex_lock(&p->mu);
  if (p->broken != DLPG_OK) {
    char what[160];
    dlpg__pair_what(p, x, what, sizeof what);
    dlpg__pair_finish(&d, x, p->broken, "%s: rank %d, %s: the pair failed earlier: %s", x->fn,
                      p->me, what, p->broken_msg);
  } else if (x->claim && __atomic_load_n(x->claim, __ATOMIC_ACQUIRE)) {
    dlpg__pair_finish_cancelled(&d, x); /* another pair matched it before it got here */
  } else if (x->send) {
    if (p->sq_tail) p->sq_tail->next = x;
    else p->sq = x;
    p->sq_tail = x;
  } else {
    if (p->rq_tail) p->rq_tail->next = x;
    else p->rq = x;
    p->rq_tail = x;
  }
  pthread_mutex_unlock(&p->mu);
  dlpg__pair_flush(p, &d);
}

void dlpg__shm_pair_post(dlpg__shm_pair_t *p, dlpg__shm_xfer_t *x) {
  x->inl = 0;
  dlpg__pair_enqueue(p, x);
  /* The serving thread, asleep on posted while it had nothing to do. */
  atomic_fetch_add(&p->posted, 1);
  dlpg__pair_futex_wake(&p->posted, 1);
}

void dlpg__shm_pair_run(dlpg__shm_pair_t *p, dlpg__shm_xfer_t *x) {
  x->inl = 1;
  atomic_fetch_add(&p->drivers, 1);
  dlpg__pair_enqueue(p, x);
  dlpg__pair_side_t *me = &p->sides[p->side];
  while (!__atomic_load_n(&x->finished, __ATOMIC_ACQUIRE)) {
    uint32_t v = atomic_load(&me->bell);
    if (dlpg__pair_progress(p, NULL)) continue;
    if (__atomic_load_n(&x->finished, __ATOMIC_ACQUIRE)) break;
    dlpg__pair_sleep(p, v);
  }
  /* The serving thread takes over whatever else is pending. */
  if (atomic_fetch_sub(&p->drivers, 1) == 1)
    dlpg__pair_futex_wake((_Atomic uint32_t *)&p->drivers, 1);
}

void dlpg__shm_pair_serve(dlpg__shm_pair_t *p, const int *stop) {
  dlpg__pair_side_t *me = &p->sides[p->side];
  while (!__atomic_load_n(stop, __ATOMIC_ACQUIRE)) {
    int drivers = atomic_load(&p->drivers);
    if (drivers) {
      dlpg__pair_futex_wait((_Atomic uint32_t *)&p->drivers, (uint32_t)drivers, DLPG__PAIR_SLICE_S, 1);
      continue;
    }
    uint32_t v = atomic_load(&me->bell), w = atomic_load(&p->posted);
    int pending = 0;
    if (dlpg__pair_progress(p, &pending)) continue;
    /* Nothing of this rank's pending: the peer's messages can wait in the ring for the
     * receive that takes them (a blocking call progresses on its own thread), so sleep
     * until something is posted here rather than at every change the peer makes. */
    if (!pending)
      dlpg__pair_futex_wait(&p->posted, w, DLPG__PAIR_SLICE_S, 1);
    else
      dlpg__pair_sleep(p, v);
  }
}

void dlpg__shm_pair_cancel(dlpg__shm_pair_t *p, dlpg__shm_xfer_t *x) {
  dlpg__pair_done_t d = {NULL, NULL};
  pthread_mutex_lock(&p->mu);
  for (dlpg__shm_xfer_t **pp = &p->rq, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next)
    if (*pp == x) {
      *pp = x->next;
      if (p->rq_tail == x) p->rq_tail = prev;
      dlpg__pair_finish_cancelled(&d, x);
      break;
    }
  pthread_mutex_unlock(&p->mu);
  dlpg__pair_flush(p, &d);
}

void dlpg__shm_pair_kick(dlpg__shm_pair_t *p) {
  atomic_fetch_add(&p->posted, 1);
  dlpg__pair_futex_wake(&p->posted, 1);
  dlpg__pair_ring_bell(&p->sides[p->side]);
  dlpg__pair_futex_wake((_Atomic uint32_t *)&p->drivers, 1);
}

void dlpg__shm_pair_abort(dlpg__shm_pair_t *p) {
  atomic_store(&p->aborted, 1);
  dlpg__shm_pair_kick(p);
}

void dlpg__shm_pair_destroy(dlpg__shm_pair_t *p) {
  if (!p) return;
  dlpg__pair_side_t *me = &p->sides[p->side];
  int32_t alive = DLPG__SHM_ALIVE;
  atomic_compare_exchange_strong(&me->state, &alive, DLPG__SHM_LEFT);
  dlpg__pair_ring_bell(&p->sides[1 - p->side]);
  for (dlpg__pair_unexp_t *u = p->uq, *n; u; u = n) {
    n = u->next;
    free(u->data);
    free(u);
  }
  munmap(p->base, p->map_bytes);
  pthread_mutex_destroy(&p->mu);
  free(p);
}
