/* Copies into the output of a large out-of-place allreduce or reduce. Those lines are in
 * no cache yet: an ordinary store first reads each line from memory (read for ownership),
 * then writes it back; a streaming (non-temporal) store writes the line alone. On the 2-core
 * CI machine a 2-rank out-of-place allreduce of 16-256 MiB took 1.4-1.5x as long with
 * ordinary stores (bench/results/shm-stream-2core.md). Below DLPG_SHM_STREAM_BYTES the
 * output may still be in cache and stays there; an in-place output was just read, so it is
 * in cache and never streams. A broadcast's receivers gained at some sizes and lost at
 * others in the same runs: they copy as before. */
#include "shm/copy_out.h"

#include "shm/seg.h"
#include "shm/team.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__SSE2__)
#include <emmintrin.h>
#define DLPG__SHM_HAVE_STREAM 1
#endif

int dlpg__shm_stream_out(const dlpg__shm_t *sh, size_t total_bytes) {
#ifdef DLPG__SHM_HAVE_STREAM
  return total_bytes >= sh->stream_bytes;
#else
  (void)sh, (void)total_bytes;
  return 0;
#endif
}

/* memcpy(dst, src, n), with streaming stores when stream is set. */
static void dlpg__shm_copy_out(void *dst, const void *src, size_t n, int stream) {
#ifdef DLPG__SHM_HAVE_STREAM
  if (stream && n >= 256) {
    uint8_t *d = dst;
    const uint8_t *s = src;
    size_t head = (size_t)(-(uintptr_t)d & 15u);
    memcpy(d, s, head);
    d += head, s += head, n -= head;
    for (; n >= 64; d += 64, s += 64, n -= 64) {
      __m128i a = _mm_loadu_si128((const __m128i *)s), b = _mm_loadu_si128((const __m128i *)(s + 16));
      __m128i c = _mm_loadu_si128((const __m128i *)(s + 32)), e = _mm_loadu_si128((const __m128i *)(s + 48));
      _mm_stream_si128((__m128i *)d, a);
      _mm_stream_si128((__m128i *)(d + 16), b);
      _mm_stream_si128((__m128i *)(d + 32), c);
      _mm_stream_si128((__m128i *)(d + 48), e);
    }
    memcpy(d, s, n);
    return;
  }
#endif
  (void)stream;
  memcpy(dst, src, n);
}

/* After the last dlpg__shm_copy_out of a thread with stream set. */
static void dlpg__shm_copy_out_done(int stream) {
#ifdef DLPG__SHM_HAVE_STREAM
  /* Streaming stores are weakly ordered: fence them before the operation reports done. */
  if (stream) _mm_sfence();
#else
  (void)stream;
#endif
}

typedef struct dlpg__shm_copy_job {
  const dlpg__shm_copy_t *cp;
  size_t count;
  int stream;
} dlpg__shm_copy_job_t;

/* Bytes [lo, hi) of the copies laid end to end. */
static void dlpg__shm_copy_part(void *arg, size_t lo, size_t hi) {
  const dlpg__shm_copy_job_t *j = arg;
  size_t at = 0;
  for (size_t i = 0; i < j->count && at < hi; at += j->cp[i++].len) {
    size_t a = lo > at ? lo - at : 0, b = hi - at < j->cp[i].len ? hi - at : j->cp[i].len;
    if (a < b) dlpg__shm_copy_out(j->cp[i].dst + a, j->cp[i].src + a, b - a, j->stream);
  }
  dlpg__shm_copy_out_done(j->stream); /* on the thread that stored */
}

void dlpg__shm_copy_many(dlpg__shm_t *sh, const dlpg__shm_copy_t *cp, size_t count, int stream) {
  dlpg__shm_copy_job_t j = {cp, count, stream};
  size_t total = 0;
  for (size_t i = 0; i < count; i++) total += cp[i].len;
  dlpg__shm_team_run(dlpg__shm_helpers(sh), dlpg__shm_copy_part, &j, total,
                     DLPG__SHM_PART_BYTES);
}

#define DLPG__SHM_PREFAULT_STRETCH ((size_t)2 << 20)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels refuse it (EINVAL), which is harmless */
#endif

/* Bytes [lo, hi) of the output at arg, 2 MiB at a time, widened to whole pages. A stretch
 * whose middle page is in memory is left alone: an output used before is in memory
 * throughout, while a fresh one may have its first page touched by the allocator (malloc's
 * header before the block) and nothing else. */
static void dlpg__shm_prefault_part(void *arg, size_t lo, size_t hi) {
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), base = (uintptr_t)arg;
  for (size_t s = lo; s < hi; s += DLPG__SHM_PREFAULT_STRETCH) {
    size_t e = hi - s < DLPG__SHM_PREFAULT_STRETCH ? hi : s + DLPG__SHM_PREFAULT_STRETCH;
    uintptr_t a = (base + s) & ~(page - 1), b = (base + e + page - 1) & ~(page - 1);
    unsigned char in_core = 0;
    void *mid = (void *)((base + s + (e - s) / 2) & ~(page - 1));
    if (mincore(mid, (size_t)page, &in_core) == 0 && (in_core & 1)) continue;
    madvise((void *)a, b - a, MADV_POPULATE_WRITE);
  }
}

void dlpg__shm_prefault_out(dlpg__shm_t *sh, void *out, size_t len) {
  if (!out || len < sh->stream_bytes) return;
  dlpg__shm_team_run(dlpg__shm_helpers(sh), dlpg__shm_prefault_part, out, len,
                     DLPG__SHM_PREFAULT_STRETCH);
}
