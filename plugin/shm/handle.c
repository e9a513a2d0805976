/* The engine's handle after creation: abort (from any thread), the deadline, accessors
 * and teardown. Teardown only unmaps (and a child returns its pool area): the memory goes
 * with the last rank's mapping, so there is nothing to unlink and nothing a killed rank
 * could leave behind. */
#include <stdlib.h>
#include <sys/mman.h>

#include "base/log.h"
#include "shm/params.h"
#include "shm/pool.h"
#include "shm/seg.h"
#include "shm/team.h"

void dlpg__shm_abort(dlpg__shm_t *sh) {
  if (!sh) return;
  atomic_store(&sh->aborted, 1);
  /* Peers waiting on this rank fail at once ("rank r was aborted"); a waiter of this rank
   * sleeping on any word wakes and sees the flag. Only atomics and futex wakes here, so a
   * watchdog thread may call it while the owner is inside an operation. */
  int32_t alive = DLPG__SHM_ALIVE;
  atomic_compare_exchange_strong(&sh->ctl[sh->st.rank].state, &alive, DLPG__SHM_ABORTED);
  dlpg__shm_wake_all(sh);
}

void dlpg__shm_destroy(dlpg__shm_t *sh) {
  if (!sh) return;
  int32_t alive = DLPG__SHM_ALIVE;
  atomic_compare_exchange_strong(&sh->ctl[sh->st.rank].state, &alive, DLPG__SHM_LEFT);
  atomic_store(&sh->ctl[sh->st.rank].left, 1);
  dlpg__shm_wake_all(sh);
  dlpg__shm_team_free(sh->team);
  /* A child in a pool area: the last member out returns it. The mapping goes with its last
   * handle, the parent's or a child's, whichever is destroyed last. */
  if (sh->claim >= 0) dlpg__shm_pool_leave(sh->map->base, sh->claim);
  dlpg__shm_map_unref(sh->map);
  free(sh->st.copies);
  free(sh->vscratch);
  free(sh);
}

dlpg__shm_map_t *dlpg__shm_map_new(uint8_t *base, size_t bytes) {
  dlpg__shm_map_t *m = malloc(sizeof *m);
  if (!m) return NULL;
  atomic_init(&m->refs, 1);
  m->base = base;
  m->bytes = bytes;
  return m;
}

void dlpg__shm_map_ref(dlpg__shm_map_t *m) { atomic_fetch_add(&m->refs, 1); }

void dlpg__shm_map_unref(dlpg__shm_map_t *m) {
  if (!m || atomic_fetch_sub(&m->refs, 1) != 1) return;
  munmap(m->base, m->bytes);
  free(m);
}

struct dlpg__shm_team *dlpg__shm_helpers(dlpg__shm_t *sh) {
  if (!sh->team_tried && sh->threads > 1) {
    sh->team_tried = 1;
    sh->team = dlpg__shm_team_new(sh->threads);
    if (sh->team)
      DLPG_INFO(SHM, sh->st.rank, "shm: %d threads copy and reduce this rank's large collectives",
                sh->threads);
    else
      DLPG_INFO(SHM, sh->st.rank, "shm: could not start %d helper threads; this rank works alone",
                sh->threads - 1);
  }
  return sh->team;
}

void dlpg__shm_set_timeout(dlpg__shm_t *sh, double timeout_s) {
  if (sh && timeout_s > 0) sh->timeout_s = timeout_s;
}

int dlpg__shm_rank(const dlpg__shm_t *sh) { return sh->st.rank; }
int dlpg__shm_size(const dlpg__shm_t *sh) { return sh->st.size; }

dlpg__shm_eager_t *dlpg__shm_eager_of(dlpg__shm_t *sh) { return &sh->eager; }
