/* A handle before it has a segment, and the layout of a segment for its ranks: what the
 * creation of a segment of its own (create.c) and that of a child in a pool area of its
 * parent's segment (subteam.c) share. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "shm/copy_out.h"
#include "shm/pool.h"
#include "shm/seg.h"

size_t dlpg__shm_align(size_t n) {
  return (n + DLPG__SHM_LINE - 1) & ~(size_t)(DLPG__SHM_LINE - 1);
}

size_t dlpg__shm_layout(dlpg__shm_header_t *h, int size, size_t slot) {
  size_t off = dlpg__shm_align(sizeof *h);
  h->off_ctl = off;
  off += dlpg__shm_align(sizeof(dlpg__shm_rankctl_t) * (size_t)size);
  off = (off + 4095) & ~(size_t)4095; /* slots start on a page */
  h->off_slots = off;
  off += 2 * slot * (size_t)size;
  h->total_bytes = off;
  h->size = (uint32_t)size;
  h->slot_bytes = slot;
  return off;
}

void dlpg__shm_bind(dlpg__shm_t *sh, uint8_t *base, size_t bytes) {
  sh->base = base;
  sh->map_bytes = bytes;
  sh->hdr = (dlpg__shm_header_t *)base;
  sh->ctl = (dlpg__shm_rankctl_t *)(base + sh->hdr->off_ctl);
  sh->st.slots = base + sh->hdr->off_slots;
}

/* Pause iterations before a wait sleeps. A rank that spins holds its core, and a peer
 * that is late for want of a core (the ranks' own helper threads, the launcher) comes only
 * when the spinners give up: in a long run on a loaded 16-core host, 16 ranks took 330-390
 * us per small allreduce with 4000 pauses (bench/results/cpu-compare-16core.md; shorter
 * runs in shm-spin-16core.md). Long spins where the ranks fill at most half the cores (or
 * are two), short ones up to one rank per core, very short ones beyond. */
static int dlpg__shm_default_spin(int size, long ncpu) {
  if (ncpu <= 0) return 4000;
  if (size > ncpu) return 64;
  if (size > 2 && 2L * size > ncpu) return 400;
  return 4000;
}

/* Ranks that outnumber the CPUs wait for each other's turn on a CPU: a waiter that yields
 * hands its CPU to a runnable peer at once, where one that sleeps on the futex waits to be
 * woken (tens of microseconds in a VM) nearly every step. */
static double dlpg__shm_default_yield_s(int size, long ncpu) {
  return ncpu > 0 && size > ncpu ? (double)DLPG__SHM_DEFAULT_YIELD_US * 1e-6 : 0;
}

/* The CPUs left over per rank, up to DLPG__SHM_DEFAULT_THREADS_MAX: a rank pinned to one
 * CPU, or ranks that fill the CPUs, work alone. */
static int dlpg__shm_default_threads(int size, long ncpu) {
  long t = ncpu > 0 ? ncpu / size : 1;
  return t < 1 ? 1 : t > DLPG__SHM_DEFAULT_THREADS_MAX ? DLPG__SHM_DEFAULT_THREADS_MAX : (int)t;
}

/* The CPUs this process may run on (its affinity mask: a launcher's binding or a
 * container's cpuset), else the online ones. */
static long dlpg__shm_cpus(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return sysconf(_SC_NPROCESSORS_ONLN);
}

dlpg__shm_t *dlpg__shm_alloc(int rank, int size, const dlpg__shm_config_t *cfg) {
  dlpg__shm_t *sh = calloc(1, sizeof *sh);
  if (!sh) return NULL;
  sh->st.rank = rank;
  sh->st.size = size;
  sh->claim = -1;
  sh->timeout_s = cfg && cfg->timeout_s > 0 ? cfg->timeout_s : 300;
  sh->create_abort = cfg ? cfg->abort_flag : NULL;
  sh->eager.max_bytes = !cfg || cfg->eager_bytes == 0 ? DLPG__SHM_DEFAULT_EAGER_BYTES : cfg->eager_bytes;
  sh->stream_bytes = cfg && cfg->stream_bytes ? cfg->stream_bytes : DLPG__SHM_DEFAULT_STREAM_BYTES;
  size_t slot = cfg && cfg->slot_bytes ? cfg->slot_bytes : DLPG__SHM_DEFAULT_SLOT_BYTES;
  /* Whole lines, and room for each rank's share of a chunk (size sub-slices). */
  slot = dlpg__shm_align(slot < (size_t)size * 256 ? (size_t)size * 256 : slot);
  sh->st.slot_bytes = slot;
  long ncpu = dlpg__shm_cpus();
  sh->spin = cfg && cfg->spin >= 0 ? cfg->spin : dlpg__shm_default_spin(size, ncpu);
  sh->yield_s = cfg && cfg->yield_us < 0   ? 0
                : cfg && cfg->yield_us > 0 ? (double)cfg->yield_us * 1e-6
                                           : dlpg__shm_default_yield_s(size, ncpu);
  sh->threads = cfg && cfg->threads > 0 ? cfg->threads : dlpg__shm_default_threads(size, ncpu);
  sh->pool_areas = !cfg || cfg->pool_areas == 0 ? DLPG__SHM_DEFAULT_POOL_AREAS
                   : cfg->pool_areas < 0        ? 0
                                                : cfg->pool_areas;
  if (sh->pool_areas > DLPG__SHM_POOL_AREAS_MAX) sh->pool_areas = DLPG__SHM_POOL_AREAS_MAX;
  sh->st.copies = calloc((size_t)size + 2, sizeof *sh->st.copies);
  if (!sh->st.copies) {
    free(sh);
    return NULL;
  }
  return sh;
}
