/* The steps every collective is made of (seg.h). Each rank has two slots; step k uses
 * slot k % 2. Before writing step k a rank waits until every rank posted k - 1, which
 * means every rank finished reading step k - 2 (reads of a step end before its reader
 * posts the next one), so a slot is never overwritten while a peer reads it, and no rank is
 * ever more than one step ahead of another. That wait is free in the all-to-all patterns
 * (the previous step already waited for everyone) and costs one check in rooted ones. */
#include <stdio.h>

#include "base/status.h"
#include "shm/seg.h"

static const char *dlpg__shm_kind_name(int kind) {
  switch (kind) {
    case DLPG__SHM_ALLREDUCE: return "allreduce";
    case DLPG__SHM_REDUCE: return "reduce";
    case DLPG__SHM_BROADCAST: return "broadcast";
    case DLPG__SHM_ALLGATHER: return "allgather";
    case DLPG__SHM_REDUCE_SCATTER: return "reduce_scatter";
    case DLPG__SHM_ALLTOALL: return "alltoall";
    case DLPG__SHM_BARRIER: return "barrier";
  }
  return "collective";
}

dlpg_status_t dlpg__shm_coll_start(dlpg__shm_t *sh, dlpg__shm_kind_t kind, uint64_t count,
                                   int dtype, int rop, int root) {
  uint32_t opno = sh->opno + 1;
  snprintf(sh->op_label, sizeof sh->op_label, "%s #%u", dlpg__shm_kind_name(kind), opno);
  DLPG_CHECK(dlpg__shm_op_start(sh, sh->op_label));
  sh->opno = opno;
  sh->desc = (dlpg__shm_desc_t){.opno = opno, .kind = (uint16_t)kind, .dtype = (uint8_t)dtype,
                                .rop = (uint8_t)rop, .root = root, .count = count};
  sh->op_first_step = sh->step + 1;
  return DLPG_OK;
}

dlpg_status_t dlpg__shm_step_begin(dlpg__shm_t *sh) {
  sh->cur = sh->step + 1;
  for (int q = 0; q < sh->size; q++) {
    if (q == sh->rank) continue;
    DLPG_CHECK(dlpg__shm_wait(sh, &sh->ctl[q].seq, &sh->ctl[q].seq_waiters, sh->cur - 1, q, NULL));
  }
  /* The descriptor of op n sits in desc[n % 2]: a peer still comparing op n - 2's is
   * impossible (it would be two steps behind). */
  if (sh->cur == sh->op_first_step) sh->ctl[sh->rank].desc[sh->desc.opno & 1u] = sh->desc;
  return DLPG_OK;
}

void dlpg__shm_step_post(dlpg__shm_t *sh) {
  sh->step = sh->cur;
  dlpg__shm_rankctl_t *c = &sh->ctl[sh->rank];
  dlpg__shm_post(&c->seq, &c->seq_waiters, sh->step);
}

static dlpg_status_t dlpg__shm_compare(dlpg__shm_t *sh, int q) {
  const dlpg__shm_desc_t *d = &sh->ctl[q].desc[sh->desc.opno & 1u], *m = &sh->desc;
  if (d->opno == m->opno && d->kind == m->kind && d->dtype == m->dtype && d->rop == m->rop &&
      d->root == m->root && d->count == m->count)
    return DLPG_OK;
  return dlpg__shm_break(
      sh, dlpg__error(DLPG_ERR_INVALID_ARGUMENT,
                      "shm rank %d: rank %d (pid %d) called %s #%u (count %llu, dtype %d, op %d, "
                      "root %d) where this rank called %s (count %llu, dtype %d, op %d, root %d)",
                      sh->rank, q, sh->ctl[q].pid, dlpg__shm_kind_name(d->kind), d->opno,
                      (unsigned long long)d->count, d->dtype, d->rop, d->root, sh->op_label,
                      (unsigned long long)m->count, m->dtype, m->rop, m->root));
}

dlpg_status_t dlpg__shm_step_wait(dlpg__shm_t *sh, int q) {
  if (q == sh->rank) return DLPG_OK;
  DLPG_CHECK(dlpg__shm_wait(sh, &sh->ctl[q].seq, &sh->ctl[q].seq_waiters, sh->cur, q, NULL));
  if (sh->cur == sh->op_first_step) DLPG_CHECK(dlpg__shm_compare(sh, q));
  return DLPG_OK;
}

dlpg_status_t dlpg__shm_step_wait_all(dlpg__shm_t *sh) {
  for (int q = 0; q < sh->size; q++) DLPG_CHECK(dlpg__shm_step_wait(sh, q));
  return DLPG_OK;
}
