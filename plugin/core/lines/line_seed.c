/* The seeds of a new child's backend states (backend.h's dlpg__line_states_seed): a line
 * whose parent state can hold its children (the shared-memory backend: areas of the parent's
 * segment) hands the child what it needs of the parent now, on the member's own thread, so
 * the child's first operation needs neither the parent nor a meeting of its members. */
#include "core/group/group.h"
#include "core/lines/backend.h"

void dlpg__line_states_seed(struct dlpg_group *parent, struct dlpg_group *child) {
  for (int i = 0; i < DLPG__GROUP_BACKEND_SLOTS; i++) {
    void *ps = __atomic_load_n(&parent->be_state[i], __ATOMIC_ACQUIRE);
    const dlpg__backend_vtbl_t *vt = ps ? dlpg__backend_loaded(i) : NULL;
    if (!vt || !dlpg__vtbl_has(vt, child_seed) || !dlpg__vtbl_has(vt, state_create_seeded) ||
        !dlpg__vtbl_has(vt, seed_free) || child->be_seed[i])
      continue;
    child->be_seed[i] = vt->child_seed(ps, &child->view, child->parent_ranks);
  }
}
