/* The helper threads of a rank (team.h). A job is published through one word, claim =
 * job number << 32 | next part << 16 | parts: a part is taken by a compare-and-swap that
 * also checks the job number, so a helper still looking at the previous job takes nothing
 * of the next, and the job's fields (written before the word) stay put while any of its
 * parts is claimed and not done. */
#include "shm/team.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/clock.h"
#include "shm/seg.h"

/* Seconds a helper watches for the next job before it sleeps: the next chunk of a large
 * collective comes after the ranks' step synchronisation, microseconds later; after the
 * collective's last one the CPU goes back to the application at once. */
#define DLPG__TEAM_SPIN_S 50e-6
#define DLPG__TEAM_PARTS_PER_THREAD 2
#define DLPG__TEAM_MAX_PARTS 0xffffu

struct dlpg__shm_team {
  int threads, helpers;
  pid_t pid; /* the process the helpers run in: a forked child has none to stop or join */
  pthread_t *tid;
  _Atomic uint32_t gen; /* the last job's number: what sleeping helpers wait on (futex) */
  _Atomic uint32_t sleepers;
  _Atomic int stop;
  _Atomic uint64_t claim;
  _Atomic size_t done; /* parts of the current job finished */
  /* The current job. */
  dlpg__shm_part_fn fn;
  void *arg;
  size_t n, part;
};

static void dlpg__team_futex_wait(_Atomic uint32_t *word, uint32_t val) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void dlpg__team_futex_wake(_Atomic uint32_t *word) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Take the next part of job gen: 1 and *idx, or 0 when that job has none left (or is not
 * the current one). */
static int dlpg__team_claim(dlpg__shm_team_t *t, uint32_t gen, size_t *idx) {
  uint64_t c = atomic_load_explicit(&t->claim, memory_order_acquire);
  for (;;) {
    size_t next = (size_t)(c >> 16) & 0xffffu, parts = (size_t)c & 0xffffu;
    if ((uint32_t)(c >> 32) != gen || next >= parts) return 0;
    if (atomic_compare_exchange_weak_explicit(&t->claim, &c, c + (1u << 16), memory_order_acq_rel,
                                              memory_order_acquire)) {
      *idx = next;
      return 1;
    }
  }
}

static void dlpg__team_work(dlpg__shm_team_t *t, uint32_t gen) {
  size_t i;
  while (dlpg__team_claim(t, gen, &i)) {
    size_t lo = i * t->part, hi = lo + t->part < t->n ? lo + t->part : t->n;
    t->fn(t->arg, lo, hi);
    atomic_fetch_add_explicit(&t->done, 1, memory_order_release);
  }
}

static void *dlpg__team_helper(void *p) {
  dlpg__shm_team_t *t = p;
  uint32_t seen = 0;
  for (;;) {
    uint32_t g;
    double since = dlpg__now();
    for (unsigned spins = 1; (g = atomic_load(&t->gen)) == seen; spins++) {
      if (atomic_load(&t->stop)) return NULL;
      if (spins % 32 != 0 || dlpg__now() - since < DLPG__TEAM_SPIN_S) {
        dlpg__shm_pause();
        continue;
      }
      /* Announced before the last look: the publisher either sees a sleeper and wakes it
       * or this look sees the new job (both sequentially consistent). */
      atomic_fetch_add(&t->sleepers, 1);
      if (atomic_load(&t->gen) == seen && !atomic_load(&t->stop)) dlpg__team_futex_wait(&t->gen, seen);
      atomic_fetch_sub(&t->sleepers, 1);
    }
    if (atomic_load(&t->stop)) return NULL;
    seen = g;
    dlpg__team_work(t, g);
  }
}

dlpg__shm_team_t *dlpg__shm_team_new(int threads) {
  if (threads <= 1) return NULL;
  dlpg__shm_team_t *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->threads = threads;
  t->pid = getpid();
  t->tid = calloc((size_t)threads - 1, sizeof *t->tid);
  if (!t->tid) {
    free(t);
    return NULL;
  }
  /* Helpers take no signals: the application's handlers run on its own threads. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  for (; t->helpers < threads - 1; t->helpers++)
    if (pthread_create(&t->tid[t->helpers], NULL, dlpg__team_helper, t) != 0) break;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  for (int i = 0; i < t->helpers; i++) pthread_setname_np(t->tid[i], "dlpg-shm-helper");
  if (t->helpers < threads - 1) {
    dlpg__shm_team_free(t);
    return NULL;
  }
  return t;
}

void dlpg__shm_team_free(dlpg__shm_team_t *t) {
  if (!t) return;
  if (getpid() != t->pid) {
    free(t->tid);
    free(t);
    return;
  }
  atomic_store(&t->stop, 1);
  atomic_fetch_add(&t->gen, 1);
  dlpg__team_futex_wake(&t->gen);
  for (int i = 0; i < t->helpers; i++) pthread_join(t->tid[i], NULL);
  free(t->tid);
  free(t);
}

void dlpg__shm_team_run(dlpg__shm_team_t *t, dlpg__shm_part_fn fn, void *arg, size_t n,
                        size_t grain) {
  if (n == 0) return;
  if (grain == 0) grain = 1;
  size_t units = n / grain + (n % grain != 0);
  size_t parts = t ? (size_t)t->threads * DLPG__TEAM_PARTS_PER_THREAD : 1;
  if (parts > units) parts = units;
  if (parts > DLPG__TEAM_MAX_PARTS) parts = DLPG__TEAM_MAX_PARTS;
  if (parts <= 1) {
    fn(arg, 0, n);
    return;
  }
  size_t part = (units / parts + (units % parts != 0)) * grain;
  parts = n / part + (n % part != 0);
  t->fn = fn;
  t->arg = arg;
  t->n = n;
  t->part = part;
  atomic_store_explicit(&t->done, 0, memory_order_relaxed);
  uint32_t g = atomic_load_explicit(&t->gen, memory_order_relaxed) + 1;
  atomic_store_explicit(&t->claim, (uint64_t)g << 32 | (uint64_t)parts, memory_order_release);
  atomic_store(&t->gen, g);
  if (atomic_load(&t->sleepers) != 0) dlpg__team_futex_wake(&t->gen);
  dlpg__team_work(t, g);
  /* What is left are parts helpers are copying now: bounded memory work. */
  for (int spins = 0; atomic_load_explicit(&t->done, memory_order_acquire) < parts; spins++) {
    if (spins < 4000)
      dlpg__shm_pause();
    else
      sched_yield();
  }
}
