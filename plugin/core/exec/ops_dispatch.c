/* Dispatch of validated operations through the backend table (core/lines/backend.h): ops of an
 * on_worker backend (Gloo, CPU) go to the group's worker, the others (NCCL, CUDA) are issued
 * on the caller's thread. dlpg_group_start/end batches belong to the calling thread and span every
 * group it issues to (like ncclGroupStart), so one thread can drive several ranks. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/lines/backend.h"
#include "base/log.h"
#include "core/group/observer.h"
#include "core/exec/dispatch.h"
#include "core/group/group.h"
#include "base/status.h"
#include "core/group/work_impl.h"
#include "core/exec/worker.h"

/* One queued op of the thread's batch, and the work core keeps when the caller passed
 * work == NULL (waited for, for on_worker ops, at the batch's end; others get none). */
typedef struct dlpg__batch_entry {
  dlpg__op_t *op;
  struct dlpg_work *internal;
} dlpg__batch_entry_t;

typedef struct dlpg__batch {
  int depth;
  int n, cap;
  dlpg__batch_entry_t *v;
} dlpg__batch_t;

static _Thread_local dlpg__batch_t dlpg__tls_batch;

/* The batch list's memory is kept between a thread's batches and freed when it exits. */
static pthread_key_t dlpg__batch_key;
static pthread_once_t dlpg__batch_key_once = PTHREAD_ONCE_INIT;
static void dlpg__batch_free(void *p) {
  dlpg__batch_t *b = p;
  free(b->v);
  b->v = NULL;
  b->cap = 0;
}
static void dlpg__batch_key_init(void) { pthread_key_create(&dlpg__batch_key, dlpg__batch_free); }

int dlpg__batch_depth(void) { return dlpg__tls_batch.depth; }

/* Fail every work of ops that the backend did not take, with the current message. The
 * failure reaches the group's observer through the work (its record for the peers); the
 * caller is told what the first work ended with (a peer's earlier failure named). */
static dlpg_status_t dlpg__fail_unclaimed(dlpg__op_t *const *ops, int n, dlpg_status_t st) {
  dlpg__saved_error_t se;
  dlpg__error_save(&se);
  int told = 0;
  for (int i = 0; i < n; i++)
    if (ops[i]->work && dlpg__work_is_unclaimed(ops[i]->work)) {
      dlpg__work_complete(ops[i]->work, st, se.msg);
      char m[DLPG__ERROR_MAX];
      dlpg_status_t ws = dlpg__work_status(ops[i]->work, m, sizeof m);
      if (!told && ws != DLPG_OK && m[0]) {
        told = 1;
        st = ws;
        snprintf(se.msg, sizeof se.msg, "%s", m);
      }
    }
  return dlpg__error_restore(&se, st);
}

/* Whether op is issued on the caller's thread: every op of a caller-thread backend, and the
 * sends and receives of an on_worker backend with p2p_direct (they must not wait behind the
 * group's queue, nor hold it while they wait for a peer). */
static int dlpg__on_caller(const dlpg__backend_vtbl_t *be, const dlpg__op_t *op) {
  return !be->on_worker ||
         (be->p2p_direct && (op->kind == DLPG__OP_SEND || op->kind == DLPG__OP_RECV));
}

/* Issue ops of one caller-thread backend (one backend batch when n > 1); ops stay owned by
 * the caller. Each op's group gets the backend's state at its first operation. */
static dlpg_status_t dlpg__issue_direct(const dlpg__backend_vtbl_t *be, dlpg__op_t *const *ops,
                                        int n) {
  dlpg_status_t st = DLPG_OK;
  for (int i = 0; i < n && st == DLPG_OK; i++) {
    st = dlpg__line_state_direct(ops[i]->group, ops[i]->backend, ops[i]->kind, &ops[i]->state);
    if (st != DLPG_OK) dlpg__error_prefix(st, dlpg__op_name(ops[i]->kind));
  }
  if (st == DLPG_OK) {
    dlpg__clear_error();
    st = be->issue(dlpg__op_views(ops), n);
    if (st != DLPG_OK) dlpg__error_prefix(st, dlpg__op_name(ops[0]->kind));
  }
  if (st != DLPG_OK) return dlpg__fail_unclaimed(ops, n, st);
  for (int i = 0; i < n; i++)
    if (ops[i]->work) dlpg__observe_started(ops[i]->group, ops[i]->work->flight_id, -1);
  /* A backend that returned OK must have attached a poller (or completed the work);
   * anything else would leave a waiter hanging until its deadline. (An on_worker backend's
   * direct sends and receives are completed later by the backend's own threads.) */
  for (int i = 0; i < n && !be->on_worker; i++)
    if (ops[i]->work && dlpg__work_is_unclaimed(ops[i]->work)) {
      char m[160];
      snprintf(m, sizeof m, "the %s backend returned without attaching the work's poller",
               be->name);
      dlpg__work_complete(ops[i]->work, DLPG_ERR_INTERNAL, m);
    }
  return DLPG_OK;
}

/* Wait for an internal work (CPU: the operation's status) and drop core's reference. A
 * timeout leaves the group unusable: it is aborted before the caller hears of it, also when
 * the backend's own deadline (the group's) fired on a thread of its own that completed the
 * work (an abort already made is not repeated). */
static dlpg_status_t dlpg__finish_internal(struct dlpg_work *w, int wait) {
  dlpg_status_t st = DLPG_OK;
  if (wait) st = dlpg__work_wait(w, 0);
  if (st == DLPG_ERR_TIMEOUT) dlpg__observe_abort(w->group);
  dlpg__work_unref(w);
  return st;
}

dlpg_status_t dlpg__op_refused(struct dlpg_group *g, dlpg__op_kind_t kind, int peer,
                               dlpg_status_t st) {
  /* A transfer with this rank itself blocks nobody else. */
  const dlpg__op_kind_info_t *k = dlpg__op_kind_info(kind);
  int self = k && k->p2p && g && peer == g->rank;
  if (g && !self && (st == DLPG_ERR_INVALID_ARGUMENT || st == DLPG_ERR_UNSUPPORTED)) {
    dlpg__saved_error_t se;
    dlpg__error_save(&se);
    dlpg__observe_rejected(g, kind, peer, se.msg);
    dlpg__error_restore(&se, st);
  }
  return st;
}

dlpg_status_t dlpg__op_aborted(const char *fn, struct dlpg_group *g) {
  char cause[DLPG__ERROR_MAX];
  if (dlpg__observe_cause(g, cause, sizeof cause))
    return dlpg__error(DLPG_ERR_REMOTE, "%s: %s", fn, cause);
  return dlpg__error(DLPG_ERR_ABORTED, "%s: group \"%s\" was aborted", fn, g->name);
}

dlpg_status_t dlpg__op_issue(dlpg__op_t *op, dlpg_work_t **work) {
  /* An op of a caller-thread backend (CUDA) whose caller passed work == NULL is done once
   * enqueued, and nobody can wait for it: it gets no work record at all (no allocation, no
   * CUDA event). on_worker ops (CPU) always get one, because core waits for them. */
  struct dlpg_work *w = NULL;
  dlpg_status_t st = DLPG_OK;
  /* Validation loaded the backend: this is a lock-free read. */
  const dlpg__backend_vtbl_t *be = dlpg__backend_loaded(op->backend);
  if (!be) {
    free(op);
    return dlpg__error(DLPG_ERR_INTERNAL, "dlpg: an operation reached dispatch unvalidated");
  }
  /* Validation refused a send or receive to self outside a batch (dlpg__batch_depth). */
  dlpg__batch_t *b = &dlpg__tls_batch;
  if (work || be->on_worker) {
    st = dlpg__work_new(op->group, &w);
    if (st != DLPG_OK) {
      free(op);
      return st;
    }
    dlpg__work_set_op_name(w, dlpg__op_name(op->kind));
    if (op->kind == DLPG__OP_RECV) w->source = op->peer;
  }
  op->work = w;
  uint64_t fid = dlpg__observe_issued(op->group, op, w != NULL);
  if (w) w->flight_id = fid;
  /* The group may have been aborted since validation (by a peer's record the observer just
   * adopted, or another thread): the op goes no further. */
  if (atomic_load(&op->group->aborted)) {
    st = dlpg__op_aborted(dlpg__op_name(op->kind), op->group);
    dlpg__work_complete_observed(w, st, dlpg__last_error()); /* the group's failure already */
    dlpg__work_unref(w);
    free(op);
    return st;
  }

  if (b->depth > 0) {
    if (b->n == b->cap) {
      int cap = b->cap ? b->cap * 2 : 16;
      dlpg__batch_entry_t *v = realloc(b->v, sizeof *v * (size_t)cap);
      if (!v) {
        st = dlpg__error(DLPG_ERR_SYSTEM, "%s: out of memory queueing the batch",
                         dlpg__op_name(op->kind));
        dlpg__work_complete(w, st, dlpg__last_error());
        dlpg__work_unref(w);
        free(op);
        return st;
      }
      b->v = v;
      b->cap = cap;
    }
    b->v[b->n].op = op;
    b->v[b->n].internal = work ? NULL : w;
    b->n++;
    if (work) *work = w;
    return DLPG_OK;
  }

  /* Only a lone blocking send or receive may be run to completion inside its issue. */
  op->caller_waits = work == NULL;
  if (!dlpg__on_caller(be, op)) {
    st = dlpg__worker_submit(op->group, &op, 1, work == NULL); /* op now belongs to the worker */
  } else {
    st = dlpg__issue_direct(be, &op, 1);
    free(op);
  }
  if (st != DLPG_OK) {
    /* The work was completed with st; the caller gets no handle. */
    dlpg__saved_error_t se;
    dlpg__error_save(&se);
    dlpg__work_unref(w);
    return dlpg__error_restore(&se, st);
  }
  if (work) {
    *work = w;
    return DLPG_OK;
  }
  return w ? dlpg__finish_internal(w, be->on_worker) : DLPG_OK;
}

dlpg_status_t dlpg__backend_p2p_pass(dlpg__be_op_t *view, const char *why) {
  dlpg__op_t *op = dlpg__ops_of_views(&view)[0];
  struct dlpg_group *g = op->group;
  int from = op->backend, next = -1;
  for (int i = from + 1; i < dlpg__backend_count() && next < 0; i++) {
    const dlpg__backend_vtbl_t *o = dlpg__backend_loaded(i);
    const dlpg__backend_entry_t *ef = dlpg__backend_entry(from), *ei = dlpg__backend_entry(i);
    if (o && (ef->devices & ei->devices) && dlpg__vtbl_serves(o, op->kind))
      next = i;
  }
  const char *fn = dlpg__op_name(op->kind);
  if (next < 0 || dlpg__backend_p2p_forced(from)) {
    char m[DLPG__ERROR_MAX];
    snprintf(m, sizeof m, "%s: rank %d and rank %d cannot use %s%s (%s)", fn, g->rank, op->peer,
             dlpg__backend_name(from), next < 0 ? ", and no other line serves them"
                                                : ", which DLPG_CPU_BACKEND forces",
             why ? why : "no reason given");
    dlpg__work_complete(op->work, DLPG_ERR_UNSUPPORTED, m);
    return dlpg__error(DLPG_ERR_UNSUPPORTED, "%s", m);
  }
  if (why)
    DLPG_INFO(P2P, g->rank, "group \"%s\": sends and receives between rank %d and rank %d run "
              "on %s (%s)", g->name, g->rank, op->peer, dlpg__backend_name(next), why);
  op->backend = next;
  if (op->work) dlpg__observe_started(g, op->work->flight_id, next);
  dlpg__op_t *one = op;
  return dlpg__issue_direct(dlpg__backend_loaded(next), &one, 1);
}

dlpg_status_t dlpg_group_start(dlpg_group_t *g) {
  DLPG_ARG_CHECK(g != NULL, "dlpg_group_start: g is NULL");
  dlpg__tls_batch.depth++;
  return DLPG_OK;
}

/* Issue the thread's batch: the ops of each caller-thread backend (CUDA) in one issue,
 * on_worker ops (CPU) as one task per group (in order of first appearance), then wait for
 * on_worker ops whose caller passed no work. */
static dlpg_status_t dlpg__batch_flush(dlpg__batch_entry_t *v, int n) {
  dlpg_status_t first = DLPG_OK;
  dlpg__saved_error_t first_err = {{0}}; /* the message of the first failure */
  dlpg__op_t *stack_tmp[8];
  dlpg__op_t **tmp = n <= 8 ? stack_tmp : malloc(sizeof *tmp * (size_t)n);
  if (!tmp) {
    first = dlpg__error(DLPG_ERR_SYSTEM, "dlpg_group_end: out of memory");
    for (int i = 0; i < n; i++) {
      dlpg__work_complete(v[i].op->work, first, dlpg__last_error());
      free(v[i].op);
      if (v[i].internal) dlpg__work_unref(v[i].internal);
    }
    return first;
  }

  for (int slot = 0; slot < dlpg__backend_count(); slot++) {
    const dlpg__backend_vtbl_t *be = dlpg__backend_loaded(slot);
    if (!be || (be->on_worker && !be->p2p_direct)) continue;
    int nn = 0;
    for (int i = 0; i < n; i++)
      if (v[i].op && v[i].op->backend == slot && dlpg__on_caller(be, v[i].op)) {
        tmp[nn++] = v[i].op;
        v[i].op = NULL; /* freed below, once issued */
      }
    if (nn == 0) continue;
    dlpg_status_t st = dlpg__issue_direct(be, tmp, nn);
    if (st != DLPG_OK && first == DLPG_OK) {
      first = st;
      dlpg__error_save(&first_err);
    }
    for (int i = 0; i < nn; i++) free(tmp[i]);
  }

  /* on_worker ops: group them per group and backend, keeping each group's order. A
   * handled op's slot in v is set to NULL (its internal work stays for the wait below). */
  for (int i = 0; i < n; i++) {
    if (!v[i].op) continue; /* issued above or already grouped */
    struct dlpg_group *g = v[i].op->group;
    int slot = v[i].op->backend;
    int k = 0;
    for (int j = i; j < n; j++)
      if (v[j].op && v[j].op->backend == slot && v[j].op->group == g) {
        tmp[k++] = v[j].op;
        v[j].op = NULL;
      }
    dlpg_status_t st = dlpg__worker_submit(g, tmp, k, 0);
    if (st != DLPG_OK && first == DLPG_OK) {
      first = st;
      dlpg__error_save(&first_err);
    }
  }
  if (tmp != stack_tmp) free(tmp);

  /* Internal works: on_worker ones are waited for (their status counts), the others are
   * done once enqueued and are recognised by their backend poller. */
  for (int i = 0; i < n; i++) {
    struct dlpg_work *w = v[i].internal;
    if (!w) continue;
    pthread_mutex_lock(&w->mu);
    int polled = w->has_be; /* a caller-thread backend's work, done by its poller */
    pthread_mutex_unlock(&w->mu);
    dlpg_status_t st = dlpg__finish_internal(w, !polled);
    if (st != DLPG_OK && first == DLPG_OK) {
      first = st;
      dlpg__error_save(&first_err);
    }
  }
  if (first != DLPG_OK) return dlpg__error_restore(&first_err, first);
  return DLPG_OK;
}

dlpg_status_t dlpg_group_end(dlpg_group_t *g) {
  DLPG_ARG_CHECK(g != NULL, "dlpg_group_end: g is NULL");
  dlpg__batch_t *b = &dlpg__tls_batch;
  DLPG_ARG_CHECK(b->depth > 0,
                 "dlpg_group_end: no matching dlpg_group_start on this thread (depth is 0)");
  if (--b->depth > 0) return DLPG_OK;
  /* Detach the list first, so an operation issued from inside the flush (none today)
   * would start a fresh batch instead of corrupting this one. */
  dlpg__batch_entry_t *v = b->v;
  int n = b->n, cap = b->cap;
  b->v = NULL;
  b->n = b->cap = 0;
  dlpg_status_t st = DLPG_OK;
  if (n > 0) st = dlpg__batch_flush(v, n);
  /* Keep the list's memory for the thread's next batch. */
  if (!b->v && cap > 0) {
    pthread_once(&dlpg__batch_key_once, dlpg__batch_key_init);
    b->v = v;
    b->cap = cap;
    pthread_setspecific(dlpg__batch_key, b);
  } else {
    free(v);
  }
  return st;
}
