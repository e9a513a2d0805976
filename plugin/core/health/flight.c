/* The flight recorder (flight.h). One mutex per group guards the ring and the counters: an
 * operation takes it uncontended three times (issue, start, completion), which costs about
 * what the work record's own mutex does and nothing next to a CPU collective's microseconds;
 * nothing here touches the store. */
#include "core/health/flight.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/lines/backend.h"
#include "base/clock.h"
#include "core/group/group.h"
#include "base/log.h"
#include "base/params.h"
#include "base/status.h"

/* Most entries a ring keeps (DLPG_FLIGHT_RECORDER_ENTRIES is clamped to it). */
#define DLPG__FLIGHT_MAX 65536

struct dlpg__flight {
  pthread_mutex_t mu;
  int cap;                       /* 0: ring off (counters still kept) */
  dlpg__flight_entry_t *ring;    /* entry id lives at (id - 1) % cap */
  uint64_t next_id;
  uint64_t coll_seq, p2p_seq;    /* last issued */
  uint64_t coll_done, p2p_done;  /* highest completed */
  double coll_issued_at;         /* dlpg__now() at the last collective's issue */
  uint64_t finished;
  int inflight;
};

struct dlpg__flight *dlpg__flight_new(void) {
  long n = 64;
  if (dlpg__param_long(DLPG__PARAM_FLIGHT_RECORDER_ENTRIES, &n) && n < 0) n = 0;
  if (n > DLPG__FLIGHT_MAX) n = DLPG__FLIGHT_MAX;
  struct dlpg__flight *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  if (n > 0 && !(f->ring = calloc((size_t)n, sizeof *f->ring))) {
    free(f);
    return NULL;
  }
  f->cap = (int)n;
  pthread_mutex_init(&f->mu, NULL);
  return f;
}

void dlpg__flight_free(struct dlpg__flight *f) {
  if (!f) return;
  pthread_mutex_destroy(&f->mu);
  free(f->ring);
  free(f);
}

static int dlpg__is_p2p(dlpg__op_kind_t k) { return k == DLPG__OP_SEND || k == DLPG__OP_RECV; }

/* The slot of id if it still holds that entry (f->mu held). */
static dlpg__flight_entry_t *dlpg__slot(struct dlpg__flight *f, uint64_t id) {
  if (!id || f->cap == 0) return NULL;
  dlpg__flight_entry_t *e = &f->ring[(id - 1) % (uint64_t)f->cap];
  return e->id == id ? e : NULL;
}

static void dlpg__flight_trace(struct dlpg_group *g, const dlpg__flight_entry_t *e) {
  char line[512];
  dlpg__flight_format_entry(e, line, sizeof line);
  dlpg__log(DLPG__LOG_TRACE, e->p2p ? DLPG__SUB_P2P : DLPG__SUB_COLL, g->rank,
            "group \"%s\": %s", g->name, line);
}

uint64_t dlpg__flight_issue(struct dlpg_group *g, const dlpg__op_t *op, int tracked) {
  struct dlpg__flight *f = g ? g->flight : NULL;
  if (!f) return 0;
  double now = dlpg__now();
  int p2p = dlpg__is_p2p(op->kind);
  pthread_mutex_lock(&f->mu);
  uint64_t id = ++f->next_id;
  uint64_t seq = p2p ? ++f->p2p_seq : ++f->coll_seq;
  if (!p2p) f->coll_issued_at = now;
  if (tracked) f->inflight++;
  if (f->cap > 0) {
    dlpg__flight_entry_t *e = &f->ring[(id - 1) % (uint64_t)f->cap];
    /* An overwritten entry still in flight stays counted in inflight (the counter, not the
     * ring, says whether anything is pending). */
    memset(e, 0, sizeof *e);
    e->id = id;
    e->seq = seq;
    e->p2p = p2p;
    e->kind = op->kind;
    e->backend = dlpg__backend_chosen(g, op->backend);
    e->dtype = op->ntensors > 0 ? (int)op->in[0].dtype : -1;
    e->count = op->ntensors > 0 ? op->in[0].numel : 0;
    e->ntensors = op->ntensors;
    e->device_type = op->ntensors > 0 ? op->in[0].device_type : 0;
    for (int i = 0; i < op->ntensors; i++)
      if (op->in[i].device_id >= 0 && op->in[i].device_id < 64)
        e->device_ids |= (uint64_t)1 << op->in[i].device_id;
    e->peer = p2p ? op->peer
                  : (op->kind == DLPG__OP_BROADCAST || op->kind == DLPG__OP_REDUCE) ? op->root : -1;
    e->tag = p2p ? op->tag : 0;
    e->state = tracked ? DLPG__FL_QUEUED : DLPG__FL_ENQUEUED;
    e->t_issue = now;
    if (!tracked) e->t_start = now;
  }
  /* Untracked (CUDA, no work handle): its only TRACE line is the one at issue. */
  dlpg__flight_entry_t copy;
  int trace = !tracked && f->cap > 0 &&
              dlpg__log_enabled(DLPG__LOG_TRACE, p2p ? DLPG__SUB_P2P : DLPG__SUB_COLL);
  if (trace) copy = f->ring[(id - 1) % (uint64_t)f->cap];
  pthread_mutex_unlock(&f->mu);
  if (trace) dlpg__flight_trace(g, &copy);
  return id;
}

void dlpg__flight_start_on(struct dlpg_group *g, uint64_t id, int backend) {
  struct dlpg__flight *f = g ? g->flight : NULL;
  if (!f || !id) return;
  double now = dlpg__now();
  pthread_mutex_lock(&f->mu);
  dlpg__flight_entry_t *e = dlpg__slot(f, id);
  if (e && e->state == DLPG__FL_QUEUED) {
    e->state = DLPG__FL_STARTED;
    e->t_start = now;
  }
  if (e && backend >= 0) e->backend = backend;
  pthread_mutex_unlock(&f->mu);
}


void dlpg__flight_finish(struct dlpg_group *g, uint64_t id, dlpg_status_t st) {
  struct dlpg__flight *f = g ? g->flight : NULL;
  if (!f || !id) return;
  double now = dlpg__now();
  dlpg__flight_entry_t copy;
  int trace = 0;
  pthread_mutex_lock(&f->mu);
  f->inflight--;
  f->finished++;
  dlpg__flight_entry_t *e = dlpg__slot(f, id);
  if (e) {
    if (e->t_start == 0) e->t_start = now;
    e->t_end = now;
    e->status = st;
    e->state = st == DLPG_OK ? DLPG__FL_DONE : DLPG__FL_FAILED;
    uint64_t *done = e->p2p ? &f->p2p_done : &f->coll_done;
    if (st == DLPG_OK && e->seq > *done) *done = e->seq;
    trace = dlpg__log_enabled(DLPG__LOG_TRACE, e->p2p ? DLPG__SUB_P2P : DLPG__SUB_COLL);
    if (trace) copy = *e;
  }
  pthread_mutex_unlock(&f->mu);
  if (trace) dlpg__flight_trace(g, &copy);
}

void dlpg__flight_untrack(struct dlpg_group *g, uint64_t id) {
  struct dlpg__flight *f = g ? g->flight : NULL;
  if (!f || !id) return;
  pthread_mutex_lock(&f->mu);
  f->inflight--;
  dlpg__flight_entry_t *e = dlpg__slot(f, id);
  if (e && (e->state == DLPG__FL_QUEUED || e->state == DLPG__FL_STARTED))
    e->state = DLPG__FL_ENQUEUED;
  pthread_mutex_unlock(&f->mu);
}

void dlpg__flight_progress(struct dlpg_group *g, dlpg__flight_progress_t *p) {
  memset(p, 0, sizeof *p);
  struct dlpg__flight *f = g ? g->flight : NULL;
  if (!f) return;
  pthread_mutex_lock(&f->mu);
  p->coll_started = f->coll_seq;
  p->coll_done = f->coll_done;
  p->coll_issued_at = f->coll_issued_at;
  p->p2p_started = f->p2p_seq;
  p->p2p_done = f->p2p_done;
  p->finished = f->finished;
  p->inflight = f->inflight;
  if (f->inflight > 0 && f->cap > 0) {
    uint64_t first = f->next_id > (uint64_t)f->cap ? f->next_id - (uint64_t)f->cap + 1 : 1;
    for (uint64_t id = first; id <= f->next_id; id++) {
      dlpg__flight_entry_t *e = dlpg__slot(f, id);
      if (e && (e->state == DLPG__FL_QUEUED || e->state == DLPG__FL_STARTED)) {
        p->oldest = *e;
        break;
      }
    }
  }
  pthread_mutex_unlock(&f->mu);
}

int dlpg__flight_get(struct dlpg_group *g, uint64_t id, dlpg__flight_entry_t *out) {
  struct dlpg__flight *f = g ? g->flight : NULL;
  if (!f) return 0;
  pthread_mutex_lock(&f->mu);
  dlpg__flight_entry_t *e = dlpg__slot(f, id);
  if (e) *out = *e;
  pthread_mutex_unlock(&f->mu);
  return e != NULL;
}

static const char *dlpg__state_name(dlpg__flight_state_t s) {
  switch (s) {
    case DLPG__FL_QUEUED: return "queued";
    case DLPG__FL_STARTED: return "started";
    case DLPG__FL_ENQUEUED: return "enqueued";
    case DLPG__FL_DONE: return "done";
    case DLPG__FL_FAILED: return "failed";
  }
  return "?";
}

/* "cpu", "cuda:0,1", or "-" for a barrier. */
static void dlpg__devices_str(const dlpg__flight_entry_t *e, char *buf, size_t cap) {
  if (e->ntensors == 0) {
    snprintf(buf, cap, "-");
    return;
  }
  size_t n = (size_t)snprintf(buf, cap, "%s", dlpg__device_name(e->device_type));
  if (e->device_type == kDLCPU) return;
  char sep = ':';
  for (int d = 0; d < 64 && n + 4 < cap; d++)
    if (e->device_ids & ((uint64_t)1 << d)) {
      n += (size_t)snprintf(buf + n, cap - n, "%c%d", sep, d);
      sep = ',';
    }
}

void dlpg__flight_format_entry(const dlpg__flight_entry_t *e, char *buf, size_t cap) {
  char dev[96], peer[16], ts[3][24], dur[32];
  dlpg__devices_str(e, dev, sizeof dev);
  if (e->peer >= 0) snprintf(peer, sizeof peer, "%d", e->peer);
  else snprintf(peer, sizeof peer, e->p2p ? "any" : "-"); /* a receive from any source */
  const double t[3] = {e->t_issue, e->t_start, e->t_end};
  for (int i = 0; i < 3; i++)
    if (t[i] > 0) snprintf(ts[i], sizeof ts[i], "%.6f", t[i]);
    else snprintf(ts[i], sizeof ts[i], "-");
  if (e->t_end > 0) snprintf(dur, sizeof dur, "%.3f", (e->t_end - e->t_issue) * 1e3);
  else snprintf(dur, sizeof dur, "-");
  snprintf(buf, cap,
           "%s=%" PRIu64 " op=%s dtype=%s count=%" PRId64 " devices=%s peer=%s backend=%s "
           "state=%s status=%s issued=%s started=%s ended=%s duration_ms=%s",
           e->p2p ? "p2p_seq" : "coll_seq", e->seq, dlpg__op_name(e->kind),
           e->dtype >= 0 ? dlpg__dtype_name((dlpg__dtype_t)e->dtype) : "-", e->count, dev, peer,
           dlpg__backend_name(e->backend), dlpg__state_name(e->state),
           e->state >= DLPG__FL_DONE ? dlpg_status_name(e->status) : "-", ts[0], ts[1], ts[2],
           dur);
}

/* A copy of the ring's live entries, oldest first (the lock is not held while formatting). */
static int dlpg__flight_snapshot(struct dlpg__flight *f, dlpg__flight_entry_t **out) {
  *out = NULL;
  pthread_mutex_lock(&f->mu);
  uint64_t n = f->next_id < (uint64_t)f->cap ? f->next_id : (uint64_t)f->cap;
  dlpg__flight_entry_t *v = n ? malloc(sizeof *v * (size_t)n) : NULL;
  int k = 0;
  for (uint64_t id = f->next_id - n + 1; v && id <= f->next_id; id++) {
    dlpg__flight_entry_t *e = dlpg__slot(f, id);
    if (e) v[k++] = *e;
  }
  pthread_mutex_unlock(&f->mu);
  *out = v;
  return k;
}

size_t dlpg__flight_format(struct dlpg_group *g, char *buf, size_t cap) {
  if (buf && cap) buf[0] = '\0';
  struct dlpg__flight *f = g ? g->flight : NULL;
  if (!f) return 0;
  dlpg__flight_entry_t *v;
  int n = dlpg__flight_snapshot(f, &v);
  size_t len = 0;
  for (int i = 0; i < n; i++) {
    char line[512];
    dlpg__flight_format_entry(&v[i], line, sizeof line);
    size_t l = strlen(line);
    /* Whole lines only: a reader never sees half an entry. */
    if (buf && len + l + 1 < cap) {
      memcpy(buf + len, line, l);
      buf[len + l] = '\n';
      buf[len + l + 1] = '\0';
    } else if (buf && cap) {
      buf = NULL; /* the rest does not fit: only count */
    }
    len += l + 1;
  }
  free(v);
  return len;
}

void dlpg__flight_dump(struct dlpg_group *g, const char *why) {
  struct dlpg__flight *f = g ? g->flight : NULL;
  if (!f || !dlpg__log_enabled(DLPG__LOG_WARN, DLPG__SUB_COLL)) return;
  dlpg__flight_entry_t *v;
  int n = dlpg__flight_snapshot(f, &v);
  dlpg__log(DLPG__LOG_WARN, DLPG__SUB_COLL, g->rank,
            "%s; flight recorder, last %d operation%s (oldest first):", why, n,
            n == 1 ? "" : "s");
  for (int i = 0; i < n; i++) {
    char line[512];
    dlpg__flight_format_entry(&v[i], line, sizeof line);
    dlpg__log(DLPG__LOG_WARN, DLPG__SUB_COLL, g->rank, "  %s", line);
  }
  free(v);
}

dlpg_status_t dlpg_group_flight_record(dlpg_group_t *g, char *buf, size_t capacity,
                                       size_t *len) {
  static const char fn[] = "dlpg_group_flight_record";
  DLPG_ARG_CHECK(g != NULL, "%s: group is NULL", fn);
  DLPG_ARG_CHECK(len != NULL, "%s: len is NULL", fn);
  DLPG_ARG_CHECK(buf != NULL || capacity == 0, "%s: buf is NULL but capacity is %zu", fn,
                 capacity);
  *len = dlpg__flight_format(g, buf, capacity);
  return DLPG_OK;
}

/* For the dump file (flight_file.c). */
const char *dlpg__flight_state_name(dlpg__flight_state_t s) { return dlpg__state_name(s); }

int dlpg__flight_entries(struct dlpg_group *g, dlpg__flight_entry_t **out, int *capacity,
                         dlpg__flight_progress_t *p) {
  struct dlpg__flight *f = g ? g->flight : NULL;
  *out = NULL;
  *capacity = f ? f->cap : 0;
  dlpg__flight_progress(g, p);
  return f ? dlpg__flight_snapshot(f, out) : 0;
}
