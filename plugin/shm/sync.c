/* Waiting and waking between the ranks of the segment. A waiter spins a bounded number of
 * pause iterations (cheap when the peer is running on another core), then, where ranks
 * outnumber the CPUs, yields its CPU for a bounded time (the peer it waits for may be
 * waiting for that CPU), then sleeps on the counter itself with a shared futex (FUTEX_WAIT
 * without the private flag: the word lives in a mapping of several processes) in slices of
 * at most 100 ms. Between slices it checks what can end the wait without the peer's help:
 * this rank's abort flag, the peer's state in the segment, the peer's life (its pid), and
 * the operation's deadline. A waker issues FUTEX_WAKE only when a waiter announced itself,
 * so the fast path is one store. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/status.h"
#include "core/group/op.h"
#include "shm/seg.h"

#define DLPG__SHM_SLICE_S 0.1

static void dlpg__shm_futex_wait(_Atomic uint32_t *word, uint32_t val, double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  /* EAGAIN (the word changed), EINTR and ETIMEDOUT all mean: look again. */
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void dlpg__shm_futex_wake(_Atomic uint32_t *word) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void dlpg__shm_post(_Atomic uint32_t *word, _Atomic uint32_t *waiters, uint32_t value) {
  /* seq_cst store then load, against the waiter's seq_cst increment then load: one of the
   * two sides sees the other, so a sleeper is never missed. */
  atomic_store(word, value);
  if (atomic_load(waiters) != 0) dlpg__shm_futex_wake(word);
}

void dlpg__shm_wake_all(dlpg__shm_t *sh) {
  for (int q = 0; q < sh->st.size; q++) dlpg__shm_futex_wake(&sh->ctl[q].seq);
}

uint64_t dlpg__shm_pid_starttime(int pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "re");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  /* The command name (field 2) may hold spaces and parentheses: count from the last ')'. */
  char *p = strrchr(buf, ')');
  if (!p) return 0;
  p += 2; /* field 3, the state */
  unsigned long long st = 0;
  for (int field = 3; field < 22 && *p; field++) {
    p = strchr(p, ' ');
    if (!p) return 0;
    p++;
  }
  if (sscanf(p, "%llu", &st) != 1) return 0;
  return st;
}

int dlpg__shm_pid_alive(int pid, uint64_t starttime) {
  if (pid <= 0) return 1; /* not yet known: let the deadline decide */
  if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
  /* A killed child of a parent that has not reaped it yet is a zombie: kill() still finds
   * it, /proc shows state Z. A reused pid shows another start time. */
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "re");
  if (!f) return 1; /* no /proc: kill() is all we know */
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  if (p && (p[2] == 'Z' || p[2] == 'X')) return 0;
  if (starttime != 0) {
    uint64_t now = dlpg__shm_pid_starttime(pid);
    if (now != 0 && now != starttime) return 0;
  }
  return 1;
}

dlpg_status_t dlpg__shm_break(dlpg__shm_t *sh, dlpg_status_t st) {
  if (sh->broken == DLPG_OK) {
    sh->broken = st;
    snprintf(sh->broken_msg, sizeof sh->broken_msg, "%s", dlpg__last_error());
    dlpg__shm_rankctl_t *me = &sh->ctl[sh->st.rank];
    if (atomic_load(&me->state) == DLPG__SHM_ALIVE) {
      snprintf(me->reason, sizeof me->reason, "%.255s", sh->broken_msg);
      /* Peers waiting on this rank then fail at once instead of at their deadline; the
       * release order makes the reason visible before the state. */
      atomic_store(&me->state, st == DLPG_ERR_ABORTED ? DLPG__SHM_ABORTED : DLPG__SHM_FAILED);
    }
    dlpg__shm_wake_all(sh);
  }
  return st;
}

const char *dlpg__shm_kind_word(dlpg__op_kind_t kind) {
  const char *name = dlpg__op_name(kind);
  return strncmp(name, "dlpg_", 5) == 0 ? name + 5 : name;
}

const char *dlpg__shm_what(dlpg__shm_t *sh) {
  if (!sh->op_name) {
    if (sh->label_opno == 0) return "the operation";
    snprintf(sh->op_label, sizeof sh->op_label, "%s #%u", dlpg__shm_kind_word(sh->label_kind),
             sh->label_opno);
    sh->op_name = sh->op_label;
  }
  return sh->op_name;
}

dlpg_status_t dlpg__shm_op_start(dlpg__shm_t *sh) {
  sh->op_name = NULL;
  if (atomic_load(&sh->aborted))
    return dlpg__shm_break(sh, dlpg__error(DLPG_ERR_ABORTED, "shm rank %d: %s: the group was aborted",
                                           sh->st.rank, dlpg__shm_what(sh)));
  if (sh->broken != DLPG_OK)
    return dlpg__error(sh->broken, "shm rank %d: %s: the group failed earlier: %s", sh->st.rank,
                       dlpg__shm_what(sh), sh->broken_msg);
  sh->deadline = dlpg__now() + sh->timeout_s;
  return DLPG_OK;
}

static dlpg_status_t dlpg__shm_dead(dlpg__shm_t *sh, int q) {
  return dlpg__error(DLPG_ERR_REMOTE, "shm rank %d: rank %d (pid %d) died during %s", sh->st.rank, q,
                     sh->ctl[q].pid, dlpg__shm_what(sh));
}

/* Why peer cannot satisfy the wait any more, as a status and message; DLPG_OK if it may. */
static dlpg_status_t dlpg__shm_peer_check(dlpg__shm_t *sh, int peer) {
  dlpg__shm_rankctl_t *c = &sh->ctl[peer];
  int32_t state = atomic_load(&c->state);
  const char *op = dlpg__shm_what(sh);
  /* JOINING: the peer has its mapping but has not yet read every rank's answer. */
  if (state == DLPG__SHM_ALIVE || state == DLPG__SHM_JOINING) {
    if (!dlpg__shm_pid_alive(c->pid, c->starttime)) return dlpg__shm_dead(sh, peer);
    return DLPG_OK;
  }
  /* A peer that left may have exited since: it left, it did not die. */
  if (state == DLPG__SHM_LEFT)
    return dlpg__error(DLPG_ERR_REMOTE, "shm rank %d: rank %d (pid %d) left the group (destroyed it) during %s",
                       sh->st.rank, peer, c->pid, op);
  /* The peer gave up: when it did because another rank died, name the dead one -- the
   * cause -- rather than the messenger. */
  for (int q = 0; q < sh->st.size; q++)
    if (q != sh->st.rank && q != peer && atomic_load(&sh->ctl[q].state) != DLPG__SHM_LEFT &&
        !atomic_load(&sh->ctl[q].left) &&
        !dlpg__shm_pid_alive(sh->ctl[q].pid, sh->ctl[q].starttime))
      return dlpg__shm_dead(sh, q);
  /* A peer that failed and then destroyed its handle may have exited since: it left. */
  const char *left = atomic_load(&c->left) ? " and has left the group since" : "";
  if (state == DLPG__SHM_ABORTED)
    return dlpg__error(DLPG_ERR_REMOTE, "shm rank %d: rank %d (pid %d) was aborted%s, during %s",
                       sh->st.rank, peer, c->pid, left, op);
  return dlpg__error(DLPG_ERR_REMOTE, "shm rank %d: rank %d (pid %d) failed%s, during %s: %.256s",
                     sh->st.rank, peer, c->pid, left, op, c->reason);
}

dlpg_status_t dlpg__shm_peer_failed(dlpg__shm_t *sh, int q) {
  int32_t state = atomic_load(&sh->ctl[q].state);
  if (state != DLPG__SHM_ABORTED && state != DLPG__SHM_FAILED) return DLPG_OK;
  return dlpg__shm_break(sh, dlpg__shm_peer_check(sh, q));
}

/* Every DLPG__SHM_CPU_LOOK + 1 pauses of a spin, a waiter looks where its peer last spun. */
#define DLPG__SHM_CPU_LOOK 63

/* Whether peer last spun on the CPU this rank spins on now (*cpu: this rank's, looked up
 * and published at the first look of a wait). The peer's value may be stale, if it moved
 * since without spinning: then this rank moves or yields once for nothing. */
static int dlpg__shm_peer_here(dlpg__shm_t *sh, int peer, int *cpu) {
  if (*cpu < 0) {
    *cpu = sched_getcpu();
    if (*cpu < 0) return 0;
    atomic_store_explicit(&sh->ctl[sh->st.rank].cpu, *cpu, memory_order_relaxed);
  }
  return atomic_load_explicit(&sh->ctl[peer].cpu, memory_order_relaxed) == *cpu;
}

/* Moves the calling thread off cpu: its affinity mask without cpu, then the mask again
 * (the kernel moves a thread whose CPU leaves its mask at once, and does not move it back
 * when the mask grows). 0 where the mask holds no other CPU or cannot be read or set. */
static int dlpg__shm_leave_cpu(int cpu) {
  cpu_set_t mask, others;
  if (sched_getaffinity(0, sizeof mask, &mask) != 0 || !CPU_ISSET(cpu, &mask) ||
      CPU_COUNT(&mask) < 2)
    return 0;
  others = mask;
  CPU_CLR(cpu, &others);
  if (sched_setaffinity(0, sizeof others, &others) != 0) return 0;
  sched_setaffinity(0, sizeof mask, &mask);
  return 1;
}

/* The peer this rank waits for is on its CPU, waiting for it: the running one spins while
 * the one it waits for waits for the CPU, a whole spin per step. The scheduler did not part
 * two such ranks soon even with another CPU idle: on the 2-core CI machine, 2 ranks, the
 * first 300 8-byte allreduces averaged over 10 us (up to 59) in 10 of 40 starts, 1.3-2.7 us
 * otherwise; 0 of 40 with this. Where the ranks do not outnumber the CPUs (no yield phase),
 * the higher rank of the two moves to another CPU of its mask, at most once per
 * DLPG__SHM_MOVE_GAP_S (both moving would land them together again); otherwise, or
 * meanwhile, it yields the CPU. */
#define DLPG__SHM_MOVE_GAP_S 0.01
static void dlpg__shm_make_room(dlpg__shm_t *sh, int peer, int *cpu) {
  if (sh->yield_s <= 0 && sh->st.rank > peer) {
    double now = dlpg__now();
    if (now - sh->moved_at >= DLPG__SHM_MOVE_GAP_S) {
      sh->moved_at = now;
      if (dlpg__shm_leave_cpu(*cpu)) {
        *cpu = sched_getcpu();
        atomic_store_explicit(&sh->ctl[sh->st.rank].cpu, *cpu, memory_order_relaxed);
        return;
      }
    }
  }
  sched_yield();
}

dlpg_status_t dlpg__shm_wait(dlpg__shm_t *sh, _Atomic uint32_t *word, _Atomic uint32_t *waiters,
                             uint32_t target, int peer) {
  int ready = 1;
  return dlpg__shm_wait_until(sh, word, waiters, target, peer, INFINITY, &ready);
}

dlpg_status_t dlpg__shm_wait_until(dlpg__shm_t *sh, _Atomic uint32_t *word,
                                   _Atomic uint32_t *waiters, uint32_t target, int peer,
                                   double until, int *ready) {
  *ready = 1;
  if (until <= 0) {
    /* A look: the word, the abort flag and the clock only (a peer's life is the slow path's
     * question); past the deadline, the slow path below says why. */
    if (dlpg__shm_ge(atomic_load_explicit(word, memory_order_acquire), target)) return DLPG_OK;
    if (!atomic_load(&sh->aborted) && dlpg__now() < sh->deadline) {
      *ready = 0;
      return DLPG_OK;
    }
  }
  int cpu = -1;
  for (int i = 0; i < sh->spin && until > 0; i++) {
    if (dlpg__shm_ge(atomic_load_explicit(word, memory_order_acquire), target)) return DLPG_OK;
    if ((i & DLPG__SHM_CPU_LOOK) == DLPG__SHM_CPU_LOOK && dlpg__shm_peer_here(sh, peer, &cpu))
      dlpg__shm_make_room(sh, peer, &cpu);
    dlpg__shm_pause();
  }
  if (sh->yield_s > 0 && until > 0) {
    /* At most one sleep's slice, and never past the deadline or the caller's bound: the
     * slow path below checks the peer's life and says why a wait ended. */
    double end = dlpg__now() + (sh->yield_s < DLPG__SHM_SLICE_S ? sh->yield_s : DLPG__SHM_SLICE_S);
    if (end > until) end = until;
    if (end > sh->deadline) end = sh->deadline;
    while (!dlpg__shm_ge(atomic_load_explicit(word, memory_order_acquire), target) &&
           !atomic_load(&sh->aborted) && dlpg__now() < end)
      sched_yield();
  }
  for (;;) {
    uint32_t v = atomic_load(word);
    if (dlpg__shm_ge(v, target)) return DLPG_OK;
    if (atomic_load(&sh->aborted))
      return dlpg__shm_break(sh, dlpg__error(DLPG_ERR_ABORTED,
                                             "shm rank %d: the group was aborted during %s (waiting for rank %d)",
                                             sh->st.rank, dlpg__shm_what(sh), peer));
    dlpg_status_t st = dlpg__shm_peer_check(sh, peer);
    if (st != DLPG_OK) {
      /* The peer may have posted just before it went: look once more. */
      if (dlpg__shm_ge(atomic_load(word), target)) return DLPG_OK;
      return dlpg__shm_break(sh, st);
    }
    double now = dlpg__now(), left = sh->deadline - now;
    if (left <= 0) {
      if (dlpg__shm_ge(atomic_load(word), target)) return DLPG_OK;
      /* Say whether the peer never arrived or stalled inside. */
      if (!dlpg__shm_ge(v, sh->st.op_first_step))
        return dlpg__shm_break(sh, dlpg__error(DLPG_ERR_TIMEOUT,
                                               "shm rank %d: rank %d (pid %d) did not reach %s within %g s",
                                               sh->st.rank, peer, sh->ctl[peer].pid, dlpg__shm_what(sh), sh->timeout_s));
      return dlpg__shm_break(sh, dlpg__error(DLPG_ERR_TIMEOUT,
                                             "shm rank %d: rank %d (pid %d) stalled in %s for %g s (at its step %u of it, "
                                             "this rank waits for step %u)",
                                             sh->st.rank, peer, sh->ctl[peer].pid, dlpg__shm_what(sh), sh->timeout_s,
                                             v - sh->st.op_first_step + 1, target - sh->st.op_first_step + 1));
    }
    /* The caller's own bound (before the deadline): not ready yet, nothing failed. */
    double mine = until - now;
    if (mine <= 0) {
      *ready = 0;
      return DLPG_OK;
    }
    if (mine < left) left = mine;
    atomic_fetch_add(waiters, 1);
    v = atomic_load(word);
    if (!dlpg__shm_ge(v, target) && !atomic_load(&sh->aborted))
      dlpg__shm_futex_wait(word, v, left < DLPG__SHM_SLICE_S ? left : DLPG__SHM_SLICE_S);
    atomic_fetch_sub(waiters, 1);
  }
}
