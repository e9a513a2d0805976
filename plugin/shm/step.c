/* The steps every collective is made of (step.h), over the segment's rank blocks (seg.h).
 * Before writing step k a rank waits until every rank posted k - 1: free in the all-to-all
 * patterns (the previous step already waited for everyone), one check in rooted ones. */
#include "shm/step.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include "base/status.h"
#include "core/group/op.h"
#include "core/lines/tensor.h"
#include "shm/seg.h"

_Static_assert(offsetof(struct dlpg__shm, st) == 0, "dlpg__shm_steps casts the handle");

dlpg_status_t dlpg__shm_coll_start(dlpg__shm_t *sh, dlpg__op_kind_t kind, uint64_t count,
                                   int dtype, int rop, int root) {
  if (sh->eager.pending)
    return dlpg__error(DLPG_ERR_INTERNAL, "shm rank %d: a collective began while %s was pending",
                       sh->st.rank, dlpg__shm_what(sh));
  uint32_t opno = sh->opno + 1;
  sh->label_kind = kind;
  sh->label_opno = opno;
  DLPG_CHECK(dlpg__shm_op_start(sh));
  sh->opno = opno;
  sh->desc = (dlpg__shm_desc_t){.opno = opno, .kind = (uint16_t)kind, .dtype = (uint8_t)dtype,
                                .rop = (uint8_t)rop, .root = root, .count = count,
                                .call_kind = 0xff, .call_dtype = 0xff};
  if (sh->next_set) {
    sh->desc.call_kind = sh->next.call_kind;
    sh->desc.call_dtype = sh->next.call_dtype;
    sh->desc.in_numel = sh->next.in_numel;
    sh->desc.out_numel = sh->next.out_numel;
    sh->next_set = 0;
  }
  sh->st.op_first_step = sh->st.step + 1;
  return DLPG_OK;
}

dlpg_status_t dlpg__shm_step_begin(dlpg__shm_t *sh) {
  sh->st.cur = sh->st.step + 1;
  for (int q = 0; q < sh->st.size; q++) {
    if (q == sh->st.rank) continue;
    DLPG_CHECK(dlpg__shm_wait(sh, &sh->ctl[q].seq, &sh->ctl[q].seq_waiters, sh->st.cur - 1, q));
  }
  /* The descriptor of op n sits in desc[n % 2]: a peer still comparing op n - 2's is
   * impossible (it would be two steps behind). */
  if (sh->st.cur == sh->st.op_first_step) sh->ctl[sh->st.rank].desc[sh->desc.opno & 1u] = sh->desc;
  return DLPG_OK;
}

void dlpg__shm_describe_next(dlpg__shm_t *sh, int op_kind, dlpg__dtype_t dt, int64_t in_numel,
                             int64_t out_numel) {
  if (!sh) return;
  sh->next.call_kind = (uint8_t)op_kind;
  sh->next.call_dtype = (uint8_t)dt;
  sh->next.in_numel = in_numel;
  sh->next.out_numel = out_numel;
  sh->next_set = 1;
}

static const char *dlpg__shm_call_name(const dlpg__shm_desc_t *d) {
  return d->call_kind != 0xff ? dlpg__op_name((dlpg__op_kind_t)d->call_kind)
                              : dlpg__shm_kind_word((dlpg__op_kind_t)d->kind);
}

/* "10 elements of float32", "an input of 20 and an output of 10 elements of float32", or
 * the engine's own count when the caller named nothing. */
static void dlpg__shm_describe(const dlpg__shm_desc_t *d, char *buf, size_t cap) {
  if (d->call_kind == 0xff) {
    snprintf(buf, cap, "count %llu", (unsigned long long)d->count);
    return;
  }
  const char *dt = d->call_dtype < DLPG__DT_COUNT ? dlpg__dtype_name((dlpg__dtype_t)d->call_dtype)
                                                  : "?";
  if (d->in_numel < 0)
    snprintf(buf, cap, "%s elements", dt);
  else if (d->in_numel == d->out_numel)
    snprintf(buf, cap, "%lld element%s of %s", (long long)d->in_numel,
             d->in_numel == 1 ? "" : "s", dt);
  else
    snprintf(buf, cap, "an input of %lld and an output of %lld elements of %s",
             (long long)d->in_numel, (long long)d->out_numel, dt);
}

/* What rank q called differs from what rank 0 called: name the first difference (the
 * same words on every rank, which all compare with rank 0). */
static dlpg_status_t dlpg__shm_mismatch(dlpg__shm_t *sh, const dlpg__shm_desc_t *a,
                                        const dlpg__shm_desc_t *b, int q) {
  char da[128], db[128];
  if (a->kind != b->kind || a->call_kind != b->call_kind)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "shm: rank 0 called %s but rank %d called %s",
                       dlpg__shm_call_name(a), q, dlpg__shm_call_name(b));
  if (a->opno != b->opno)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "shm: rank 0 is at collective #%u but rank %d at collective #%u", a->opno,
                       q, b->opno);
  if (a->count != b->count || a->dtype != b->dtype || a->call_dtype != b->call_dtype ||
      a->in_numel != b->in_numel || a->out_numel != b->out_numel) {
    dlpg__shm_describe(a, da, sizeof da);
    dlpg__shm_describe(b, db, sizeof db);
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT, "shm: in %s, rank 0 has %s but rank %d has %s",
                       dlpg__shm_what(sh), da, q, db);
  }
  if (a->rop != b->rop)
    return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                       "shm: in %s, rank 0 reduces with %s but rank %d with %s", dlpg__shm_what(sh),
                       dlpg__reduce_op_name((dlpg_reduce_op_t)a->rop), q,
                       dlpg__reduce_op_name((dlpg_reduce_op_t)b->rop));
  return dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                     "shm: in %s, rank 0 names root %d but rank %d names root %d", dlpg__shm_what(sh),
                     a->root, q, b->root);
}

static int dlpg__shm_desc_equal(const dlpg__shm_desc_t *a, const dlpg__shm_desc_t *b) {
  return a->opno == b->opno && a->kind == b->kind && a->dtype == b->dtype && a->rop == b->rop &&
         a->root == b->root && a->count == b->count && a->call_kind == b->call_kind &&
         a->call_dtype == b->call_dtype && a->in_numel == b->in_numel &&
         a->out_numel == b->out_numel;
}

int dlpg__shm_step_free(const dlpg__shm_t *sh) {
  if (atomic_load(&sh->aborted) || sh->broken != DLPG_OK) return 0;
  for (int q = 0; q < sh->st.size; q++)
    if (q != sh->st.rank &&
        !dlpg__shm_ge(atomic_load_explicit(&sh->ctl[q].seq, memory_order_acquire), sh->st.step))
      return 0;
  return 1;
}

void dlpg__shm_step_publish(dlpg__shm_t *sh) {
  sh->st.step = sh->st.cur;
  dlpg__shm_rankctl_t *c = &sh->ctl[sh->st.rank];
  dlpg__shm_post(&c->seq, &c->seq_waiters, sh->st.step);
}

dlpg_status_t dlpg__shm_step_post(dlpg__shm_t *sh) {
  dlpg__shm_step_publish(sh);
  if (sh->st.cur != sh->st.op_first_step) return DLPG_OK;
  int ready = 1;
  return dlpg__shm_step_check_first(sh, INFINITY, &ready);
}

dlpg_status_t dlpg__shm_step_check_first(dlpg__shm_t *sh, double until, int *ready) {
  /* Every rank waits for every other's first step, so each sees every descriptor: when
   * they differ, all fail here, after the same step, and the next operation starts in
   * step on every rank. (A rank that never comes is named by the wait's timeout.) */
  for (int q = 0; q < sh->st.size; q++) {
    if (q == sh->st.rank) continue;
    DLPG_CHECK(dlpg__shm_wait_until(sh, &sh->ctl[q].seq, &sh->ctl[q].seq_waiters, sh->st.cur, q,
                                    until, ready));
    if (!*ready) return DLPG_OK;
  }
  /* A peer that failed (a timeout, an abort) after it posted this step: the group is
   * failing, and this operation with it, naming that peer. */
  for (int q = 0; q < sh->st.size; q++)
    if (q != sh->st.rank) DLPG_CHECK(dlpg__shm_peer_failed(sh, q));
  const dlpg__shm_desc_t *a = &sh->ctl[0].desc[sh->desc.opno & 1u];
  for (int q = 1; q < sh->st.size; q++) {
    const dlpg__shm_desc_t *b = &sh->ctl[q].desc[sh->desc.opno & 1u];
    if (!dlpg__shm_desc_equal(a, b)) return dlpg__shm_mismatch(sh, a, b, q);
  }
  return DLPG_OK;
}

dlpg_status_t dlpg__shm_step_wait(dlpg__shm_t *sh, int q) {
  if (q == sh->st.rank) return DLPG_OK;
  return dlpg__shm_wait(sh, &sh->ctl[q].seq, &sh->ctl[q].seq_waiters, sh->st.cur, q);
}

dlpg_status_t dlpg__shm_step_wait_all(dlpg__shm_t *sh) {
  for (int q = 0; q < sh->st.size; q++) DLPG_CHECK(dlpg__shm_step_wait(sh, q));
  return DLPG_OK;
}
