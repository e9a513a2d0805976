/* From an operation's line to the backend state that runs it, for a group: the one place
 * that joins the group's job before a backend writes keys under its scope, makes the
 * group's choice between lines, creates the chosen backend's state and, when that backend
 * finds it cannot serve the group after all, hands the choice to the next line. The
 * executor asks once per operation and gets a slot and a state, or a final failure. */
#include <stdlib.h>
#include <string.h>

#include "core/lines/backend.h"
#include "core/group/group.h"
#include "core/group/job.h"
#include "base/status.h"

/* A failure of slot's resolution, kept so that every later operation fails alike. */
static dlpg_status_t dlpg__line_fail(char **msg, dlpg_status_t *keep, dlpg_status_t st) {
  *keep = st;
  *msg = strdup(dlpg__last_error()[0] ? dlpg__last_error() : "the backend's state could not "
                                                              "be created");
  return st;
}

dlpg_status_t dlpg__line_resolve(struct dlpg_group *g, int first, int *slot_out,
                                 void **state_out) {
  dlpg__group_lines_t *L = &g->lines;
  if (L->choice_status[first] != DLPG_OK)
    return dlpg__error(L->choice_status[first], "%s",
                       L->choice_msg[first] ? L->choice_msg[first] : "no backend was chosen");
  int slot = first;
  dlpg__clear_error();
  /* The choice reads, and the backend's state writes, keys under the group's job scope:
   * join the job first (once; a failure is final, job.h). */
  dlpg_status_t st = dlpg__job_join(g);
  if (st == DLPG_OK) st = dlpg__backend_choose(g, first, &slot);
  if (st != DLPG_OK)
    return dlpg__line_fail(&L->choice_msg[first], &L->choice_status[first], st);
  for (;;) {
    if (!dlpg__backend_loaded(slot))
      return dlpg__error(DLPG_ERR_INTERNAL, "the operation's backend is not loaded");
    if (!L->state_tried[slot]) {
      L->state_tried[slot] = 1;
      void *s = NULL;
      dlpg__clear_error();
      st = dlpg__backend_state(g, slot, &s);
      if (st != DLPG_OK || !s)
        dlpg__line_fail(&L->state_msg[slot], &L->state_status[slot],
                        st == DLPG_OK ? DLPG_ERR_INTERNAL : st);
    }
    void *state = __atomic_load_n(&g->be_state[slot], __ATOMIC_ACQUIRE);
    if (state) {
      *slot_out = slot;
      *state_out = state;
      return DLPG_OK;
    }
    /* A creation an abort cut short reports the abort. */
    if (atomic_load(&g->aborted)) return dlpg__error(DLPG_ERR_ABORTED, "group aborted");
    /* A backend that found the ranks apart after all (every rank sees that alike) gives
     * way to the next line, when the choice was the rule's and not forced. */
    int next = L->state_status[slot] == DLPG_ERR_UNSUPPORTED
                   ? dlpg__backend_give_way(g, first, slot, L->state_msg[slot]) : -1;
    if (next < 0) return dlpg__error(L->state_status[slot], "%s", L->state_msg[slot]);
    slot = next;
  }
}

dlpg_status_t dlpg__line_state_direct(struct dlpg_group *g, int slot, dlpg__op_kind_t kind,
                                      void **state) {
  /* The backend's keys live under the group's job scope: joined first (once, job.h). */
  DLPG_CHECK(dlpg__job_join(g));
  /* A rank whose first operation is a send or receive says where it runs here (its first
   * collective would otherwise): the pair's decision reads both ranks' strings. */
  dlpg__backend_where_publish(g);
  /* Sends and receives of a line deciding them per pair have a state of their own. */
  const dlpg__backend_vtbl_t *be = dlpg__backend_loaded(slot);
  if ((kind == DLPG__OP_SEND || kind == DLPG__OP_RECV) && be &&
      dlpg__vtbl_has(be, p2p_state_create))
    return dlpg__backend_p2p_state(g, slot, state);
  return dlpg__backend_state(g, slot, state);
}

void dlpg__line_states_free(struct dlpg_group *g) {
  for (int i = 0; i < DLPG__GROUP_BACKEND_SLOTS; i++) {
    const dlpg__backend_vtbl_t *vt = g->p2p_state[i] ? dlpg__backend_loaded(i) : NULL;
    if (vt && dlpg__vtbl_has(vt, p2p_destroy)) vt->p2p_destroy(g->p2p_state[i]);
  }
  for (int i = 0; i < DLPG__GROUP_BACKEND_SLOTS; i++) {
    if (g->be_state[i]) dlpg__backend_loaded(i)->destroy(g->be_state[i]);
    if (g->be_seed[i]) dlpg__backend_loaded(i)->seed_free(g->be_seed[i]);
    free(g->lines.state_msg[i]);
    free(g->lines.choice_msg[i]);
  }
}
