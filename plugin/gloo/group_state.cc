// The Gloo backend's group state (p2p.h): created empty at the group's first CPU operation,
// the full mesh added by the worker at the first collective, the pairwise contexts by the
// transfers (p2p_pairs.cc).
#include <cstdio>
#include <new>

#include "gloo/c_headers.h"
#include "gloo/create.h"
#include "gloo/errors.h"
#include "gloo/p2p.h"
#include "gloo/p2p_state.h"

extern "C" dlpg_status_t dlpg__gloo_group_create(dlpg_store_t *store, const char *name, int rank,
                                                 int size, double timeout_s,
                                                 dlpg__gloo_group_t **out) {
  try {
    auto *gg = new dlpg__gloo_group();
    gg->p2p = std::make_shared<dlpg_gloo::PairSet>();
    gg->p2p->store = store;
    dlpg__store_retain(store);  // a pool thread may still connect after the group is gone
    gg->p2p->name = name;
    gg->p2p->rank = rank;
    gg->p2p->size = size;
    gg->p2p->timeout_s = timeout_s;
    *out = gg;
    return DLPG_OK;
  } catch (...) {
    return dlpg_gloo::status_from_current_exception("dlpg__gloo_group_create");
  }
}

extern "C" dlpg_status_t dlpg__gloo_group_mesh(dlpg__gloo_group_t *gg, dlpg__gloo_ctx_t **out) {
  dlpg__gloo_ctx_t *mesh = gg->mesh.load();
  if (mesh) {
    *out = mesh;
    return DLPG_OK;
  }
  if (gg->mesh_tried) return dlpg__error(gg->mesh_err, "%s", gg->mesh_msg.c_str());
  gg->mesh_tried = true;
  const dlpg_gloo::PairSet &ps = *gg->p2p;
  std::string prefix = ps.name + "/gloo";
  DLPG_INFO(GLOO, ps.rank, "creating the Gloo context of %d ranks (keys under %s)", ps.size,
            prefix.c_str());
  dlpg_status_t st = dlpg__gloo_ctx_create_abortable(ps.store, prefix.c_str(), ps.rank, ps.size,
                                                    ps.timeout_s, &ps.aborted, &mesh);
  if (st != DLPG_OK) {
    gg->mesh_err = st;
    try {
      gg->mesh_msg = dlpg__last_error();
    } catch (...) {
    }
    return st;
  }
  gg->mesh.store(mesh);
  // An abort during the rendezvous found no mesh to cut short: honour it now.
  if (ps.aborted.load()) dlpg__gloo_ctx_abort(mesh);
  *out = mesh;
  return DLPG_OK;
}

extern "C" void dlpg__gloo_group_destroy(dlpg__gloo_group_t *gg) {
  if (!gg) return;
  try {
    dlpg__gloo_ctx_destroy(gg->mesh.exchange(nullptr));
    // Probes a receive from any source left waiting for messages nobody sent stop now.
    gg->p2p->closing.store(true);
    dlpg_gloo::match_wake(*gg->p2p);
    delete gg;  // drops the group's share of the pair set
  } catch (...) {
  }
}
