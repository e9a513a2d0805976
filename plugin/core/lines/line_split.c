/* The backends' part of dlpg_group_split (backend.h): a line that made communicators for
 * the parent may split them for the child now (NCCL's ncclCommSplit, collective over the
 * parent, so every parent rank takes part, with or without a child), instead of the child
 * making its own at its first operation. A line without state_split (shm, Gloo, a module
 * built before it) leaves the child's state to that first operation. */
#include "base/status.h"
#include "core/group/group.h"
#include "core/lines/backend.h"

dlpg_status_t dlpg__line_states_split(const char *fn, struct dlpg_group *parent,
                                      struct dlpg_group *child, int color, int key) {
  for (int i = 0; i < DLPG__GROUP_BACKEND_SLOTS; i++) {
    void *ps = __atomic_load_n(&parent->be_state[i], __ATOMIC_ACQUIRE);
    const dlpg__backend_vtbl_t *vt = ps ? dlpg__backend_loaded(i) : NULL;
    if (!vt || vt->on_worker || !dlpg__vtbl_has(vt, state_split)) continue;
    void *cs = NULL;
    dlpg_status_t st = vt->state_split(ps, child ? &child->view : NULL, color, key, &cs);
    if (st != DLPG_OK) {
      if (cs && vt->destroy) vt->destroy(cs);
      return dlpg__error_prefix(st, fn);
    }
    if (child && cs) __atomic_store_n(&child->be_state[i], cs, __ATOMIC_RELEASE);
    else if (cs) vt->destroy(cs);
  }
  return DLPG_OK;
}
