/* Sends and receives on the shared-memory backend, decided per pair (backend_p2p.h). The
 * first transfer between this rank and a peer starts the pair's thread, which decides
 * with the peer's two ranks only: both ranks' published host identities (core's
 * dlpg__backend_where_get) equal -> a pair segment of their own (pair.h: the lower rank
 * makes it, the higher maps it, both confirm); identities that differ, or a segment that
 * cannot be passed or mapped (both ranks learn it alike) -> the pair goes to the next line
 * (dlpg__backend_p2p_pass: Gloo), once and for good, and the INFO log says which and why.
 * Transfers issued meanwhile wait in the pair's queue, in issue order, and follow the
 * decision. On shm the pair's thread then progresses every transfer posted with a work
 * handle; a blocking one outside a batch runs to completion on its caller's thread
 * (dlpg__shm_pair_run), which is what makes it as fast as the copy.
 *
 * Lifetime: the state is freed with the group (p2p_destroy, at its release, when no work
 * is left). That release may come from a pair thread itself (its completion dropped the
 * group's last reference): the state then lives on, counted, until that thread leaves. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/status.h"
#include "core/lines/backend.h"
#include "core/group/op.h"
#include "core/group/work.h"
#include "shm/backend_p2p.h"
#include "shm/pair.h"
#include "shm/params.h"
#include "shm/shm.h"

enum { DLPG__SP_NEW, DLPG__SP_SETUP, DLPG__SP_SHM, DLPG__SP_PASSED, DLPG__SP_FAILED };

typedef struct dlpg__shm_p2p dlpg__shm_p2p_t;

typedef struct dlpg__shm_p2p_pair {
  dlpg__shm_p2p_t *grp;
  int peer;
  pthread_mutex_t mu;      /* state, the queue, err */
  int state;
  dlpg__op_t **pend;       /* owned copies waiting for the decision, in issue order */
  struct dlpg__shm_any **pend_any; /* beside pend: the receive from any source it belongs to */
  int npend, cap;
  dlpg__shm_pair_t *eng;   /* DLPG__SP_SHM */
  pthread_t thread;
  int has_thread;
  int stop;                /* __atomic: set at destroy */
  dlpg_status_t err;       /* DLPG__SP_FAILED */
  char msg[1024];
} dlpg__shm_p2p_pair_t;

struct dlpg__shm_p2p {
  const dlpg__be_group_t *g;
  pthread_mutex_t mu;      /* pairs[] */
  dlpg__shm_p2p_pair_t **pairs;
  atomic_int refs;         /* the group's, and one per live pair thread */
  int size;                /* the group's (the view may be gone by the last unref) */
  size_t slot_bytes, stage_bytes;
  int spin;
};

/* One transfer on the engine: core's op (a copy) and the engine's record. */
typedef struct dlpg__shm_p2p_rec {
  dlpg__shm_xfer_t x;
  dlpg__op_t op;
  struct dlpg__shm_any *any; /* a part of a receive from any source, else NULL */
} dlpg__shm_p2p_rec_t;

/* A receive from any source: one receive per other rank, each posted to its pair's engine
 * with the shared claim word, so the first pair whose message matches takes it and the
 * others are taken off their queues (pair.h's claim). Per pair the engine keeps the
 * sender's order; which pair wins among ready senders is whichever matches first. The
 * record lives until every part has ended. */
typedef struct dlpg__shm_any {
  int claim;                  /* pair.h's claim word */
  atomic_int left;            /* parts not yet ended */
  int won;                    /* __atomic: the work was completed */
  dlpg__op_t op;              /* the caller's op (its work, tensor and tag) */
  dlpg__shm_p2p_rec_t **parts; /* by peer, once posted (__atomic) */
  dlpg__shm_pair_t **engs;    /* by peer, the engine a part was posted to */
  dlpg_status_t err;          /* the first failure other than a timeout, under mu */
  char msg[DLPG__ERROR_MAX];
  pthread_mutex_t mu;
  int size;
} dlpg__shm_any_t;

static long dlpg__shm_p2p_setting(const dlpg__param_decl_t *p) {
  long v = 0;
  return dlpg__param_get(p) && dlpg__param_get_long(p, &v) && v > 0 ? v : 0;
}

dlpg_status_t dlpg__shm_p2p_state_create(const dlpg__be_group_t *g, void **state) {
  dlpg__shm_p2p_t *s = calloc(1, sizeof *s);
  if (s) s->pairs = calloc((size_t)g->size, sizeof *s->pairs);
  if (!s || !s->pairs) {
    free(s);
    return dlpg__error(DLPG_ERR_SYSTEM, "shm: out of memory for the group's pairs");
  }
  s->g = g;
  s->size = g->size;
  pthread_mutex_init(&s->mu, NULL);
  atomic_store(&s->refs, 1);
  s->slot_bytes = (size_t)dlpg__shm_p2p_setting(DLPG__SHM_PARAM(P2P_SLOT_BYTES));
  s->stage_bytes = (size_t)dlpg__shm_p2p_setting(DLPG__SHM_PARAM(P2P_STAGE_BYTES));
  long spin = -1, v = 0;
  if (dlpg__param_get(DLPG__SHM_PARAM(SPIN)) && dlpg__param_get_long(DLPG__SHM_PARAM(SPIN), &v) &&
      v >= 0 && v < 0x7fffffffL)
    spin = v;
  s->spin = (int)spin;
  *state = s;
  return DLPG_OK;
}

static void dlpg__shm_p2p_unref(dlpg__shm_p2p_t *s) {
  if (atomic_fetch_sub(&s->refs, 1) != 1) return;
  for (int q = 0; q < s->size; q++) {
    dlpg__shm_p2p_pair_t *pr = s->pairs[q];
    if (!pr) continue;
    dlpg__shm_pair_destroy(pr->eng);
    for (int i = 0; i < pr->npend; i++) free(pr->pend[i]);
    free(pr->pend);
    free(pr->pend_any);
    pthread_mutex_destroy(&pr->mu);
    free(pr);
  }
  free(s->pairs);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

/* ------------------------------------------------------------------ transfers */

static void dlpg__shm_any_part_end(dlpg__shm_any_t *a, int peer, dlpg_status_t st,
                                   const char *msg, int matched);

static void dlpg__shm_p2p_done(dlpg__shm_xfer_t *x, dlpg_status_t st, const char *msg) {
  dlpg__shm_p2p_rec_t *r = x->user;
  if (r->any) {
    /* Matched: this part's claim won (the message, or its size mismatch, is the answer).
     * The part is freed with its record, so a cancel never meets a reused address. */
    dlpg__shm_any_part_end(r->any, r->op.peer, st, msg, x->claimed);
    return;
  }
  dlpg__work_complete(r->op.work, st, msg);
  if (!x->inl) free(r);
}

static void dlpg__shm_any_unref(dlpg__shm_any_t *a) {
  if (atomic_fetch_sub(&a->left, 1) != 1) return;
  if (!__atomic_exchange_n(&a->won, 1, __ATOMIC_ACQ_REL)) {
    /* Every part ended unmatched, by its deadline. */
    char m[DLPG__ERROR_MAX];
    snprintf(m, sizeof m, "dlpg_recv: rank %d timed out waiting for a send with tag %d (%zu bytes) "
             "from any rank; did another rank issue the matching dlpg_send?%s%.600s",
             a->op.gview->rank, a->op.tag, a->op.out[0].nbytes, a->msg[0] ? " (" : "", a->msg);
    if (a->msg[0]) strncat(m, ")", sizeof m - strlen(m) - 1);
    dlpg__work_complete(a->op.work, a->err != DLPG_OK ? a->err : DLPG_ERR_TIMEOUT, m);
  }
  for (int q = 0; q < a->size; q++) free(a->parts[q]);
  free(a->parts);
  free(a->engs);
  pthread_mutex_destroy(&a->mu);
  free(a);
}

/* The other parts leave their queues once one part has the claim. */
static void dlpg__shm_any_cancel_others(dlpg__shm_any_t *a, int peer) {
  for (int q = 0; q < a->size; q++) {
    dlpg__shm_p2p_rec_t *r = __atomic_load_n(&a->parts[q], __ATOMIC_ACQUIRE);
    if (r && q != peer) dlpg__shm_pair_cancel(a->engs[q], &r->x);
  }
}

static void dlpg__shm_any_part_end(dlpg__shm_any_t *a, int peer, dlpg_status_t st,
                                   const char *msg, int matched) {
  int expect = 0;
  if (!matched && st != DLPG_ERR_TIMEOUT && st != DLPG_OK &&
      __atomic_compare_exchange_n(&a->claim, &expect, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    matched = 1; /* a failure (a peer gone, the abort, a pair off shm) ends the receive */
  if (matched) {
    __atomic_store_n(&a->won, 1, __ATOMIC_RELEASE);
    dlpg__shm_any_cancel_others(a, peer);
    if (st == DLPG_OK) {
      dlpg__work_set_source(a->op.work, peer);
      dlpg__work_complete(a->op.work, st, NULL);
    } else {
      char m[DLPG__ERROR_MAX];
      snprintf(m, sizeof m, "dlpg_recv from any rank (tag %d), via rank %d: %.800s", a->op.tag,
               peer, msg ? msg : "");
      dlpg__work_complete(a->op.work, st, m);
    }
  } else if (st == DLPG_ERR_TIMEOUT && msg) {
    pthread_mutex_lock(&a->mu);
    if (!a->msg[0]) snprintf(a->msg, sizeof a->msg, "%.600s", msg);
    pthread_mutex_unlock(&a->mu);
  }
  dlpg__shm_any_unref(a);
}

static dlpg__shm_p2p_rec_t *dlpg__shm_p2p_rec(const dlpg__op_t *op, double deadline) {
  dlpg__shm_p2p_rec_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->op = *op;
  int send = op->kind == DLPG__OP_SEND;
  const dlpg__tensor_t *t = send ? &op->in[0] : &op->out[0];
  r->x.send = send;
  r->x.buf = t->ptr;
  r->x.nbytes = t->nbytes;
  r->x.tag = op->tag;
  r->x.dtype = (int)t->dtype;
  r->x.deadline = deadline;
  r->x.fn = dlpg__op_name(op->kind);
  r->x.done = dlpg__shm_p2p_done;
  r->x.user = r;
  return r;
}

/* op onto the pair's engine: run here when its caller waits for it, else posted. */
static void dlpg__shm_p2p_start(dlpg__shm_p2p_pair_t *pr, const dlpg__op_t *op, double deadline,
                                int run_here, dlpg__shm_any_t *any) {
  dlpg__shm_p2p_rec_t *r = dlpg__shm_p2p_rec(op, deadline);
  if (any) {
    if (!r) {
      dlpg__shm_any_part_end(any, op->peer, DLPG_ERR_SYSTEM, "shm: out of memory", 0);
      return;
    }
    r->any = any;
    r->x.claim = &any->claim;
    any->engs[op->peer] = pr->eng;
    __atomic_store_n(&any->parts[op->peer], r, __ATOMIC_RELEASE);
    dlpg__shm_pair_post(pr->eng, &r->x);
    return;
  }
  if (!r) {
    dlpg__work_complete(op->work, DLPG_ERR_SYSTEM, "shm: out of memory issuing a transfer");
    return;
  }
  if (run_here) {
    dlpg__shm_pair_run(pr->eng, &r->x);
    free(r);
  } else {
    dlpg__shm_pair_post(pr->eng, &r->x);
  }
}

static void dlpg__shm_p2p_fail(const dlpg__op_t *op, dlpg_status_t st, const char *msg) {
  char m[DLPG__ERROR_MAX];
  int send = op->kind == DLPG__OP_SEND;
  snprintf(m, sizeof m, "%s (%zu bytes, tag %d, %s rank %d): %.800s", dlpg__op_name(op->kind),
           send ? op->in[0].nbytes : op->out[0].nbytes, op->tag, send ? "to" : "from", op->peer,
           msg);
  dlpg__work_complete(op->work, st, m);
}

/* ------------------------------------------------------------------ the pair's thread */

/* The decision and, on shm, the segment: the pair's new state, with why in msg. */
static int dlpg__shm_p2p_decide(dlpg__shm_p2p_pair_t *pr, char *why, size_t cap,
                                dlpg_status_t *st) {
  const dlpg__be_group_t *g = pr->grp->g;
  int me = g->rank, peer = pr->peer;
  char mine[DLPG__SHM_HOST_ID_MAX + 8], theirs[DLPG__SHM_HOST_ID_MAX + 8];
  if (g->struct_size < sizeof *g || !g->scope) {
    snprintf(why, cap, "rank %d has no job scope to publish where it runs under", me);
    return DLPG__SP_PASSED;
  }
  *st = dlpg__backend_where_get(g, "shm", me, mine, sizeof mine);
  if (*st == DLPG_OK) *st = dlpg__backend_where_get(g, "shm", peer, theirs, sizeof theirs);
  if (*st == DLPG_ERR_UNSUPPORTED) {
    snprintf(why, cap, "%s", dlpg__last_error());
    return DLPG__SP_PASSED;
  }
  if (*st != DLPG_OK) {
    snprintf(why, cap, "%s", dlpg__last_error());
    return DLPG__SP_FAILED;
  }
  if (strcmp(mine, theirs) != 0 || mine[0] == '?') {
    snprintf(why, cap, "rank %d runs at \"%s\", rank %d at \"%s\"", me, mine, peer, theirs);
    return DLPG__SP_PASSED;
  }
  char prefix[700];
  int lo = me < peer ? me : peer, hi = me < peer ? peer : me;
  /* Under the job's scope: a pair of an earlier job of this name never meets this one. */
  snprintf(prefix, sizeof prefix, "%s/shm/p2p/%d-%d", dlpg__be_group_keys(g), lo, hi);
  dlpg__shm_pair_config_t cfg = {pr->grp->slot_bytes, pr->grp->stage_bytes, g->timeout_s,
                                 pr->grp->spin, g->aborted};
  dlpg__shm_pair_t *eng = NULL;
  *st = dlpg__shm_pair_create(g->store, prefix, me, peer, &cfg, &eng);
  if (*st == DLPG_OK) {
    __atomic_store_n(&pr->eng, eng, __ATOMIC_RELEASE);
    /* An abort that came while the segment was made found no engine to cut short. */
    if (dlpg__be_group_aborted(g)) dlpg__shm_pair_abort(eng);
    snprintf(why, cap, "both run at \"%s\"", mine);
    return DLPG__SP_SHM;
  }
  snprintf(why, cap, "%s", dlpg__last_error());
  return *st == DLPG_ERR_UNSUPPORTED ? DLPG__SP_PASSED : DLPG__SP_FAILED;
}

static void *dlpg__shm_p2p_main(void *arg) {
  dlpg__shm_p2p_pair_t *pr = arg;
  const dlpg__be_group_t *g = pr->grp->g;
  char why[1024];
  dlpg_status_t st = DLPG_OK;
  dlpg__clear_error();
  int state = dlpg__shm_p2p_decide(pr, why, sizeof why, &st);
  /* Everything queued follows the decision in issue order, under the lock, so a transfer
   * issued after it (which sees the new state) cannot overtake one queued before. */
  pthread_mutex_lock(&pr->mu);
  pr->state = state;
  if (state == DLPG__SP_SHM)
    DLPG_INFO(P2P, g->rank, "group \"%s\": sends and receives between rank %d and rank %d run "
              "on shm (%s)", g->name, g->rank, pr->peer, why);
  if (state == DLPG__SP_FAILED) {
    pr->err = st;
    snprintf(pr->msg, sizeof pr->msg, "%s", why);
  }
  double deadline = dlpg__now() + g->timeout_s;
  /* Failed transfers complete after the lock is let go: a failure goes to the group's
   * observer, which may wait on the store and aborts the group, and issuers of this pair
   * would wait on the lock meanwhile. Their order does not matter (a later one fails too). */
  dlpg__op_t **failed = NULL;
  dlpg__shm_any_t **failed_any = NULL;
  int nfailed = 0;
  if (state == DLPG__SP_FAILED) {
    failed = pr->pend;
    failed_any = pr->pend_any;
    nfailed = pr->npend;
    pr->pend = NULL;
    pr->pend_any = NULL;
    pr->cap = 0;
  }
  for (int i = 0; i < pr->npend && !failed; i++) {
    dlpg__op_t *op = pr->pend[i];
    if (state == DLPG__SP_SHM) {
      dlpg__shm_p2p_start(pr, op, deadline, 0, pr->pend_any[i]);
    } else if (pr->pend_any[i]) {
      /* Ended after the lock is let go, as failures are (below). */
      failed = failed ? failed : calloc((size_t)pr->npend, sizeof *failed);
      failed_any = failed_any ? failed_any : calloc((size_t)pr->npend, sizeof *failed_any);
      if (failed && failed_any) {
        failed[nfailed] = op;
        failed_any[nfailed++] = pr->pend_any[i];
        op = NULL;
      }
    } else {
      dlpg__backend_p2p_pass(&op->be, i == 0 ? why : NULL);
    }
    free(op);
  }
  if (state == DLPG__SP_PASSED) {
    st = DLPG_ERR_UNSUPPORTED;
    char w2[sizeof why];
    snprintf(w2, sizeof w2, "shm: a receive from any source needs every pair of the group on "
             "shared memory, and rank %d's is not (%.700s); DLPG_CPU_BACKEND=gloo serves it",
             pr->peer, why);
    snprintf(why, sizeof why, "%s", w2);
  }
  if (state == DLPG__SP_PASSED && pr->npend == 0)
    DLPG_INFO(P2P, g->rank, "group \"%s\": sends and receives between rank %d and rank %d go "
              "to the next line (%s)", g->name, g->rank, pr->peer, why);
  pr->npend = 0;
  pthread_mutex_unlock(&pr->mu);
  for (int i = 0; i < nfailed; i++) {
    if (failed_any && failed_any[i]) dlpg__shm_any_part_end(failed_any[i], pr->peer, st, why, 0);
    else dlpg__shm_p2p_fail(failed[i], st, why);
    free(failed[i]);
  }
  free(failed);
  free(failed_any);
  if (state == DLPG__SP_SHM) dlpg__shm_pair_serve(pr->eng, &pr->stop);
  dlpg__shm_p2p_unref(pr->grp);
  return NULL;
}

/* The pair with peer, its thread started at the first call. */
static dlpg__shm_p2p_pair_t *dlpg__shm_p2p_pair(dlpg__shm_p2p_t *s, int peer) {
  dlpg__shm_p2p_pair_t *pr = __atomic_load_n(&s->pairs[peer], __ATOMIC_ACQUIRE);
  if (pr) return pr;
  pthread_mutex_lock(&s->mu);
  pr = s->pairs[peer];
  if (!pr && (pr = calloc(1, sizeof *pr)) != NULL) {
    pr->grp = s;
    pr->peer = peer;
    pthread_mutex_init(&pr->mu, NULL);
    pr->state = DLPG__SP_SETUP;
    atomic_fetch_add(&s->refs, 1);
    if (pthread_create(&pr->thread, NULL, dlpg__shm_p2p_main, pr) == 0) {
      pr->has_thread = 1;
    } else {
      atomic_fetch_sub(&s->refs, 1);
      pr->state = DLPG__SP_FAILED;
      pr->err = DLPG_ERR_SYSTEM;
      snprintf(pr->msg, sizeof pr->msg, "shm: cannot start the thread of the pair with rank %d", peer);
    }
    __atomic_store_n(&s->pairs[peer], pr, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&s->mu);
  return pr;
}

/* ------------------------------------------------------------------ the table's entries */

/* A copy of op at the end of the pair's queue (under its lock); 0 when out of memory. */
static int dlpg__shm_p2p_queue(dlpg__shm_p2p_pair_t *pr, const dlpg__op_t *op,
                               dlpg__shm_any_t *any) {
  dlpg__op_t *copy = NULL;
  if (pr->npend == pr->cap) {
    int cap = pr->cap ? 2 * pr->cap : 8;
    dlpg__op_t **v = realloc(pr->pend, sizeof *v * (size_t)cap);
    if (v) pr->pend = v;
    dlpg__shm_any_t **va = realloc(pr->pend_any, sizeof *va * (size_t)cap);
    if (va) pr->pend_any = va;
    if (v && va) pr->cap = cap;
  }
  if (pr->npend < pr->cap && (copy = malloc(sizeof *copy)) != NULL) {
    *copy = *op;
    pr->pend_any[pr->npend] = any;
    pr->pend[pr->npend++] = copy;
  }
  return copy != NULL;
}

/* A receive from any source: a part on every other rank's pair (dlpg__shm_any_t). */
static void dlpg__shm_p2p_issue_any(dlpg__op_t *op) {
  dlpg__shm_p2p_t *s = op->state;
  const dlpg__be_group_t *g = s->g;
  dlpg__shm_any_t *a = calloc(1, sizeof *a);
  if (a) {
    a->parts = calloc((size_t)s->size, sizeof *a->parts);
    a->engs = calloc((size_t)s->size, sizeof *a->engs);
  }
  if (!a || !a->parts || !a->engs) {
    if (a) { free(a->parts); free(a->engs); free(a); }
    dlpg__work_complete(op->work, DLPG_ERR_SYSTEM, "dlpg_recv: shm: out of memory");
    return;
  }
  a->op = *op;
  a->size = s->size;
  pthread_mutex_init(&a->mu, NULL);
  atomic_store(&a->left, 1); /* the issuer's, until every part is out */
  double deadline = dlpg__now() + g->timeout_s;
  for (int q = 0; q < s->size; q++) {
    if (q == g->rank) continue;
    atomic_fetch_add(&a->left, 1);
    dlpg__op_t part = *op;
    part.peer = q;
    dlpg__shm_p2p_pair_t *pr = dlpg__shm_p2p_pair(s, q);
    if (!pr) {
      dlpg__shm_any_part_end(a, q, DLPG_ERR_SYSTEM, "shm: out of memory for a pair", 0);
      continue;
    }
    pthread_mutex_lock(&pr->mu);
    int state = pr->state;
    int queued = state == DLPG__SP_SETUP && dlpg__shm_p2p_queue(pr, &part, a);
    pthread_mutex_unlock(&pr->mu);
    if (queued) continue;
    if (state == DLPG__SP_SETUP)
      dlpg__shm_any_part_end(a, q, DLPG_ERR_SYSTEM, "shm: out of memory queueing a transfer", 0);
    else if (state == DLPG__SP_SHM)
      dlpg__shm_p2p_start(pr, &part, deadline, 0, a);
    else if (state == DLPG__SP_PASSED) {
      char m[300];
      snprintf(m, sizeof m, "shm: a receive from any source needs every pair of the group on "
               "shared memory, and rank %d's runs on the next line; DLPG_CPU_BACKEND=gloo "
               "serves it", q);
      dlpg__shm_any_part_end(a, q, DLPG_ERR_UNSUPPORTED, m, 0);
    } else {
      dlpg__shm_any_part_end(a, q, pr->err, pr->msg, 0);
    }
  }
  dlpg__shm_any_unref(a);
}

static void dlpg__shm_p2p_issue_one(dlpg__op_t *op, int run_here) {
  dlpg__shm_p2p_t *s = op->state;
  const dlpg__be_group_t *g = s->g;
  if (op->peer == DLPG_ANY_SOURCE) {
    dlpg__shm_p2p_issue_any(op);
    return;
  }
  /* A send or receive to self (inside a batch) meets its match in memory on the next line. */
  if (op->peer == g->rank) {
    dlpg__backend_p2p_pass(&op->be, NULL);
    return;
  }
  dlpg__shm_p2p_pair_t *pr = dlpg__shm_p2p_pair(s, op->peer);
  if (!pr) {
    dlpg__shm_p2p_fail(op, DLPG_ERR_SYSTEM, "shm: out of memory for a pair");
    return;
  }
  double deadline = dlpg__now() + g->timeout_s;
  pthread_mutex_lock(&pr->mu);
  int state = pr->state;
  if (state == DLPG__SP_SETUP) {
    int ok = dlpg__shm_p2p_queue(pr, op, NULL);
    pthread_mutex_unlock(&pr->mu);
    if (!ok) dlpg__shm_p2p_fail(op, DLPG_ERR_SYSTEM, "shm: out of memory queueing a transfer");
    return;
  }
  if (state == DLPG__SP_PASSED) {
    /* Under the pair's lock, so transfers of one thread reach the next line in order. */
    dlpg__backend_p2p_pass(&op->be, NULL);
    pthread_mutex_unlock(&pr->mu);
    return;
  }
  pthread_mutex_unlock(&pr->mu);
  if (state == DLPG__SP_SHM) dlpg__shm_p2p_start(pr, op, deadline, run_here, NULL);
  else dlpg__shm_p2p_fail(op, pr->err, pr->msg);
}

dlpg_status_t dlpg__shm_p2p_issue(dlpg__be_op_t *const *views, int n) {
  dlpg__op_t *const *ops = dlpg__ops_of_views(views);
  for (int i = 0; i < n; i++) dlpg__shm_p2p_issue_one(ops[i], n == 1 && ops[i]->caller_waits);
  return DLPG_OK;
}

void dlpg__shm_p2p_abort(void *state) {
  dlpg__shm_p2p_t *s = state;
  /* Lock-free: core holds the group's lock here, which a pair's thread may take (handing
   * its queue to the next line) while it holds the pair's. A pair still deciding polls the
   * group's abort flag; its engine, once made, is kept until the state goes. */
  for (int q = 0; q < s->size; q++) {
    dlpg__shm_p2p_pair_t *pr = __atomic_load_n(&s->pairs[q], __ATOMIC_ACQUIRE);
    dlpg__shm_pair_t *e = pr ? __atomic_load_n(&pr->eng, __ATOMIC_ACQUIRE) : NULL;
    if (e) dlpg__shm_pair_abort(e);
  }
}

void dlpg__shm_p2p_destroy(void *state) {
  dlpg__shm_p2p_t *s = state;
  pthread_t self = pthread_self();
  for (int q = 0; q < s->size; q++) {
    dlpg__shm_p2p_pair_t *pr = s->pairs[q];
    if (!pr || !pr->has_thread) continue;
    __atomic_store_n(&pr->stop, 1, __ATOMIC_RELEASE);
    dlpg__shm_pair_t *e = __atomic_load_n(&pr->eng, __ATOMIC_ACQUIRE);
    if (e) dlpg__shm_pair_kick(e);
    /* Released from this very thread: it leaves (and drops its count) once back. */
    if (pthread_equal(pr->thread, self)) pthread_detach(pr->thread);
    else pthread_join(pr->thread, NULL);
  }
  dlpg__shm_p2p_unref(s);
}
