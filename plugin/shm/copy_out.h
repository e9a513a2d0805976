/* Copies into an operation's output (copy_out.c): streaming stores for large outputs, fresh
 * outputs faulted in first, copies split between the rank's helper threads. */
#ifndef DLPG_SHM_COPY_OUT_H_
#define DLPG_SHM_COPY_OUT_H_

#include <stddef.h>
#include <stdint.h>

#include "shm/shm.h"

/* One of several copies a collective does together. */
typedef struct dlpg__shm_copy {
  uint8_t *dst;
  const uint8_t *src;
  size_t len;
} dlpg__shm_copy_t;

/* Whether an operation writing total_bytes of output streams them: from sh->stream_bytes
 * on, where the CPU has streaming stores. */
int dlpg__shm_stream_out(const dlpg__shm_t *sh, size_t total_bytes);
/* Whether [a, a + alen) and [b, b + blen) do not overlap. */
static inline int dlpg__shm_disjoint(const void *a, size_t alen, const void *b, size_t blen) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x + alen <= y || y + blen <= x;
}
/* Before the first copy into len bytes of output this rank did not read, from
 * sh->stream_bytes on: fault in, writable and unchanged, the pages of every 2 MiB stretch
 * whose middle page is not in memory, by the rank's threads at once, each a stretch of its
 * own (MADV_POPULATE_WRITE). An output in pages never touched (each new result of JAX's CPU
 * client, a fresh malloc of a large block) otherwise takes a fault per 4 KiB page in the
 * middle of the copies: 2-core CI machine, 2 ranks, 16 MiB into fresh pages 13.8 ms before,
 * 8.6-8.8 ms with it, 3.0-3.5 ms into reused memory either way
 * (bench/results/fresh-output-2core.md). A hint: its failure changes nothing. */
void dlpg__shm_prefault_out(dlpg__shm_t *sh, void *out, size_t len);
/* The copies cp[0..count), as dlpg__shm_copy_out with stream, fenced when streamed; split
 * between the rank's helper threads when it has them (team.h) and they are large enough. */
void dlpg__shm_copy_many(dlpg__shm_t *sh, const dlpg__shm_copy_t *cp, size_t count, int stream);

#endif
