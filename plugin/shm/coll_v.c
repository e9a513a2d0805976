/* The rooted and uneven collectives (gather, scatter, allgatherv, alltoallv,
 * reduce_scatter_v) through the ranks' slots (step.h). Each rank's outgoing bytes form one
 * stream -- its blocks back to back in destination order (gather, allgatherv: its input;
 * scatter: the root's whole input) -- and step s carries bytes [s W, (s + 1) W) of every
 * rank's stream in that rank's slot (W = slot_bytes): a rank copies its window in, posts,
 * and each reader copies the parts of the windows that are its blocks out, so every byte is
 * copied once into the segment and once out, with no per-pair exchange, and a skewed rank's
 * long stream only adds steps. Every rank knows every stream's layout: gather's and
 * scatter's from the block size (compared in the first step's descriptor), the v-forms'
 * from the counts each rank publishes at the head of its slot in the first step, ahead of
 * its first window, which every rank judges alike (core/group/vcounts.h), so a
 * disagreement fails every rank with the same words after the same step and leaves the
 * handle usable. alltoallv: each stream starts with the block for the next rank, so the
 * ranks take from different streams in each window. reduce_scatter_v: the
 * streams share one layout, so rank r reduces its block at the same slot offset of every
 * slot, in rank order (every rank's result from one reduction order, as the other reducing
 * collectives). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "core/group/op_kind.h"
#include "core/group/vcounts.h"
#include "shm/copy_out.h"
#include "shm/reduce.h"
#include "shm/reduce_slots.h"
#include "shm/seg.h"
#include "shm/step.h"

/* A run of bytes of one rank's stream: at stream offset off, len bytes, to or from p. */
typedef struct dlpg__shm_run {
  int rank;          /* whose stream */
  size_t off, len;
  uint8_t *p;        /* outgoing: the source (const in spirit); incoming: the destination */
} dlpg__shm_run_t;

/* The layout of one call: this rank's outgoing runs, its incoming runs, and the longest
 * stream (every rank computes the same). */
typedef struct dlpg__shm_layout {
  dlpg__shm_run_t *outs, *ins;
  size_t nouts, nins;
  size_t longest;
  /* alltoallv: this rank's block for itself, copied directly (self.p the destination) */
  dlpg__shm_run_t self;
  const uint8_t *self_src;
} dlpg__shm_layout_t;

static size_t dlpg__shm_vmin(size_t a, size_t b) { return a < b ? a : b; }

/* The layout of c on this rank into L's runs (room for N each); pub[q]: rank q's
 * published counts (v-forms). */
static dlpg_status_t dlpg__shm_vlayout(const dlpg__shm_vcall_t *c, int N, int me,
                                       const int64_t *const *pub, dlpg__shm_layout_t *L) {
  size_t E = c->elem;
  L->nouts = L->nins = L->longest = 0;
  L->self = (dlpg__shm_run_t){0};
  const uint8_t *in = c->in;
  uint8_t *out = c->out;
  size_t block = (size_t)c->block * E;
  switch (c->kind) {
    case DLPG__OP_GATHER:
      L->outs[L->nouts++] = (dlpg__shm_run_t){me, 0, block, (uint8_t *)(uintptr_t)in};
      if (me == c->root)
        for (int q = 0; q < N; q++)
          L->ins[L->nins++] = (dlpg__shm_run_t){q, 0, block, out + (size_t)q * block};
      L->longest = block;
      break;
    case DLPG__OP_SCATTER:
      if (me == c->root)
        L->outs[L->nouts++] = (dlpg__shm_run_t){me, 0, block * (size_t)N, (uint8_t *)(uintptr_t)in};
      L->ins[L->nins++] = (dlpg__shm_run_t){c->root, (size_t)me * block, block, out};
      L->longest = block * (size_t)N;
      break;
    case DLPG__OP_ALLGATHERV:
      for (int q = 0; q < N; q++) {
        size_t len = (size_t)pub[q][q] * E;
        if (q == me) L->outs[L->nouts++] = (dlpg__shm_run_t){me, 0, len, (uint8_t *)(uintptr_t)in};
        L->ins[L->nins++] = (dlpg__shm_run_t){q, 0, len, out + (size_t)c->displs[q] * E};
        if (len > L->longest) L->longest = len;
      }
      break;
    case DLPG__OP_ALLTOALLV:
      /* Rank q's stream: its blocks for ranks q+1, q+2, ... (mod N) back to back, so a
       * window of every stream holds blocks for different ranks and the ranks copy out
       * side by side (in destination order, every rank would wait on the few whose blocks
       * the window holds). Its block for itself goes straight across. */
      for (int q = 0; q < N; q++) {
        size_t off = 0;
        for (int i = 1; i < N; i++) {
          int j = (q + i) % N;
          size_t len = (size_t)pub[q][j] * E;
          if (q == me)
            L->outs[L->nouts++] =
                (dlpg__shm_run_t){me, off, len, (uint8_t *)(uintptr_t)(in + (size_t)c->displs[j] * E)};
          if (j == me)
            L->ins[L->nins++] = (dlpg__shm_run_t){q, off, len, out + (size_t)c->recv_displs[q] * E};
          off += len;
        }
        if (off > L->longest) L->longest = off;
      }
      L->self = (dlpg__shm_run_t){me, 0, (size_t)pub[me][me] * E,
                                  out + (size_t)c->recv_displs[me] * E};
      L->self_src = in + (size_t)c->displs[me] * E;
      break;
    case DLPG__OP_REDUCE_SCATTER_V: {
      /* Every stream in one layout, rank r's block at the same offset of every slot: its
       * blocks for ranks 0..N-1 back to back (the same counts on every rank). */
      for (int q = 0; q < N; q++) {
        size_t off = 0;
        for (int j = 0; j < N; j++) {
          size_t len = (size_t)pub[q][j] * E;
          if (q == me)
            L->outs[L->nouts++] =
                (dlpg__shm_run_t){me, off, len, (uint8_t *)(uintptr_t)(in + (size_t)c->displs[j] * E)};
          if (j == me && q == 0)
            L->ins[L->nins++] = (dlpg__shm_run_t){-1, off, len, out}; /* every rank's */
          off += len;
        }
        if (off > L->longest) L->longest = off;
      }
      break;
    }
    default:
      return dlpg__error(DLPG_ERR_INTERNAL, "shm: %s is not a rooted or uneven collective",
                         dlpg__op_name(c->kind));
  }
  return DLPG_OK;
}

/* Queue one copy, flushing the scratch list when full. */
static void dlpg__shm_vcopy(dlpg__shm_t *sh, size_t *n, uint8_t *dst, const uint8_t *src,
                            size_t len, int stream) {
  dlpg__shm_steps_t *st = dlpg__shm_steps(sh);
  if (!len) return;
  st->copies[(*n)++] = (dlpg__shm_copy_t){dst, src, len};
  if (*n == (size_t)st->size + 2) {
    dlpg__shm_copy_many(sh, st->copies, *n, stream);
    *n = 0;
  }
}

/* Copy this rank's part of stream window [w0, w1) into its slot at base. */
static void dlpg__shm_vin(dlpg__shm_t *sh, const dlpg__shm_layout_t *L, size_t base, size_t w0,
                          size_t w1) {
  dlpg__shm_steps_t *st = dlpg__shm_steps(sh);
  uint8_t *mine = dlpg__shm_step_slot(st, st->rank) + base;
  size_t n = 0;
  for (size_t i = 0; i < L->nouts; i++) {
    const dlpg__shm_run_t *r = &L->outs[i];
    size_t lo = r->off > w0 ? r->off : w0, hi = dlpg__shm_vmin(r->off + r->len, w1);
    if (lo < hi) dlpg__shm_vcopy(sh, &n, mine + (lo - w0), r->p + (lo - r->off), hi - lo, 0);
  }
  if (n) dlpg__shm_copy_many(sh, st->copies, n, 0);
}

/* Copy (reduce_scatter_v: reduce) what this rank takes of window [w0, w1) out of the posted
 * slots, whose window starts at base. */
static dlpg_status_t dlpg__shm_vout(dlpg__shm_t *sh, const dlpg__shm_layout_t *L, size_t base,
                                    size_t w0, size_t w1, const dlpg__shm_reducer_t *rd,
                                    int stream) {
  dlpg__shm_steps_t *st = dlpg__shm_steps(sh);
  size_t n = 0;
  for (size_t i = 0; i < L->nins; i++) {
    const dlpg__shm_run_t *r = &L->ins[i];
    size_t lo = r->off > w0 ? r->off : w0, hi = dlpg__shm_vmin(r->off + r->len, w1);
    if (lo >= hi) continue;
    if (r->rank < 0) { /* reduce_scatter_v: every rank's slot at the same offset */
      DLPG_CHECK(dlpg__shm_step_wait_all(sh));
      dlpg__shm_reduce_many(sh, rd, r->p + (lo - r->off), base + (lo - w0), (hi - lo) / rd->elem,
                            NULL);
      continue;
    }
    DLPG_CHECK(dlpg__shm_step_wait(sh, r->rank));
    dlpg__shm_vcopy(sh, &n, r->p + (lo - r->off),
                    dlpg__shm_step_slot(st, r->rank) + base + (lo - w0), hi - lo, stream);
  }
  if (n) dlpg__shm_copy_many(sh, st->copies, n, stream);
  return DLPG_OK;
}

/* The v-forms' counts, as every rank publishes them at the head of its first slot: its
 * (send) counts, then alltoallv's receive counts. */
static void dlpg__shm_vcounts_put(const dlpg__shm_vcall_t *c, int N, int64_t *slot) {
  memcpy(slot, c->counts, (size_t)N * sizeof *slot);
  if (c->kind == DLPG__OP_ALLTOALLV) memcpy(slot + N, c->recv_counts, (size_t)N * sizeof *slot);
}

/* The steps of one call. The v-forms' counts ride in the first step, ahead of the first
 * window of data: a rank's outgoing runs need only its own counts, so it copies its first
 * window in before it knows the others' counts; after that step (which waits for every
 * rank) every rank reads everyone's counts, judges them alike (core/group/vcounts.h) and
 * lays out what it takes. Small calls are then one step, as the even collectives. */
static dlpg_status_t dlpg__shm_vsteps(dlpg__shm_t *sh, const dlpg__shm_vcall_t *c, size_t npub,
                                      const int64_t **pub, dlpg__shm_layout_t *L) {
  dlpg__shm_steps_t *st = dlpg__shm_steps(sh);
  int N = st->size, me = st->rank;
  size_t W = st->slot_bytes;
  size_t hdr = npub * sizeof(int64_t);
  if (hdr) hdr = dlpg__shm_vmin((hdr + 63) & ~(size_t)63, W); /* cache-line aligned data */
  int reducing = c->kind == DLPG__OP_REDUCE_SCATTER_V;
  dlpg__shm_reducer_t rd = {0};
  if (reducing) dlpg__shm_reducer(c->dtype, c->rop, &rd);
  int stream = !reducing && dlpg__shm_stream_out(sh, c->out_bytes);
  /* This rank's outgoing runs from its own counts (every pub[q] its own for now). */
  for (int q = 0; npub && q < N; q++) pub[q] = c->counts;
  DLPG_CHECK(dlpg__shm_vlayout(c, N, me, pub, L));
  if (!reducing && c->out_bytes) dlpg__shm_prefault_out(sh, c->out, c->out_bytes);
  size_t w1 = W - hdr;
  DLPG_CHECK(dlpg__shm_step_begin(sh));
  if (npub) dlpg__shm_vcounts_put(c, N, (int64_t *)(void *)dlpg__shm_step_slot(st, me));
  dlpg__shm_vin(sh, L, hdr, 0, w1);
  DLPG_CHECK(dlpg__shm_step_post(sh)); /* the first step: waits for all, compares the calls */
  if (npub) {
    for (int q = 0; q < N; q++)
      pub[q] = (const int64_t *)(const void *)dlpg__shm_step_slot(st, q);
    char why[256];
    if (dlpg__vcounts_disagree(c->kind, N, pub, why, sizeof why))
      return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "shm: in %s, %s", dlpg__shm_what(sh), why);
    DLPG_CHECK(dlpg__shm_vlayout(c, N, me, pub, L));
  }
  DLPG_CHECK(dlpg__shm_vout(sh, L, hdr, 0, w1, &rd, stream));
  for (size_t w0 = w1; w0 < L->longest; w0 = w1) {
    w1 = w0 + dlpg__shm_vmin(L->longest - w0, W);
    DLPG_CHECK(dlpg__shm_step_begin(sh));
    dlpg__shm_vin(sh, L, 0, w0, w1);
    DLPG_CHECK(dlpg__shm_step_post(sh));
    DLPG_CHECK(dlpg__shm_vout(sh, L, 0, w0, w1, &rd, stream));
  }
  if (L->self.len) {
    dlpg__shm_copy_t own = {L->self.p, L->self_src, L->self.len};
    dlpg__shm_copy_many(sh, &own, 1, stream);
  }
  return DLPG_OK;
}

dlpg_status_t dlpg__shm_vcoll(dlpg__shm_t *sh, const dlpg__shm_vcall_t *c) {
  DLPG_ARG_CHECK(sh && c, "dlpg__shm_vcoll: the engine or the call is NULL");
  dlpg__shm_steps_t *st = dlpg__shm_steps(sh);
  int N = st->size, me = st->rank;
  size_t npub = dlpg__vcounts_len(c->kind, N);
  DLPG_ARG_CHECK(npub * sizeof(int64_t) <= st->slot_bytes,
                 "shm rank %d: %zu counts do not fit a slot of %zu bytes", me, npub,
                 st->slot_bytes);
  /* The scratch (made before the call starts, so no rank is left waiting on a failure
   * here): N published-count pointers, then N outgoing and N incoming runs. */
  if (!sh->vscratch &&
      !(sh->vscratch = calloc((size_t)N, sizeof(int64_t *) + 2 * sizeof(dlpg__shm_run_t))))
    return dlpg__error(DLPG_ERR_SYSTEM, "shm rank %d: out of memory laying out %s", me,
                       dlpg__op_name(c->kind));
  uint64_t count = npub ? 0 : (uint64_t)c->block * c->elem;
  DLPG_CHECK(dlpg__shm_coll_start(sh, c->kind, count, (int)c->dtype,
                                  c->kind == DLPG__OP_REDUCE_SCATTER_V ? (int)c->rop : 0,
                                  c->root));
  const int64_t **pub = sh->vscratch;
  dlpg__shm_run_t *runs = (dlpg__shm_run_t *)(void *)(pub + N);
  dlpg__shm_layout_t L = {.outs = runs, .ins = runs + N};
  return dlpg__shm_vsteps(sh, c, npub, pub, &L);
}
