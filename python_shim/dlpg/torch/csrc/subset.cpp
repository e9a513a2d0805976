// ProcessGroupDlpg::subset: the subgroups torch's new_group (and DeviceMesh on CPU) asks the
// backend creator for, made from the default dlpg group by dlpg_group_create_subset. torch
// calls the creator on the members only, with their global ranks, which are the default
// group's: exactly what that call needs, so a subgroup costs no rendezvous and no job
// admission, only its own connection at its first operation.
#include <algorithm>
#include <cstddef>
#include <sstream>

#include "backend.h"

namespace dlpg_torch {

c10::intrusive_ptr<ProcessGroupDlpg> ProcessGroupDlpg::subset(
    const std::vector<int>& ranks, double timeout_s, const std::string& name,
    c10::intrusive_ptr<c10d::Store> torch_store) {
  const dlpg_api_t& a = api();
  TORCH_CHECK(a.struct_size >= offsetof(dlpg_api_t, group_create_subset) +
                                   sizeof(a.group_create_subset),
              "dlpg: new_group needs a libdlpg with dlpg_group_create_subset (the loaded one's "
              "table is ", a.struct_size, " bytes)");
  TORCH_CHECK(!coalescing_, "dlpg: new_group inside a coalescing block of the default group");
  if (core_->has_pending_p2p()) core_->flush_p2p();
  dlpg_group_options_t go = DLPG_GROUP_OPTIONS_INIT;
  go.timeout_s = timeout_s;
  go.name = name.empty() ? nullptr : name.c_str();
  dlpg_group_t* child = nullptr;
  // The caller released the GIL (module.cpp): a member may wait for the default group's
  // rank 0 to admit it, and the store's callbacks may run Python on other threads.
  dlpg_status_t st = a.group_create_subset(core_->g(), static_cast<int>(ranks.size()),
                                           ranks.data(), &go, &child);
  check(st, "dlpg_group_create_subset");
  int crank = -1, csize = -1;
  a.group_rank(child, &crank);
  a.group_size(child, &csize);
  auto pg = c10::make_intrusive<ProcessGroupDlpg>(std::make_shared<Core>(child, crank, csize),
                                                  crank, csize);
  pg->set_timeout_s(timeout_s);
  pg->set_store(std::move(torch_store));
  return pg;
}

void ProcessGroupDlpg::admit_now() {
  const dlpg_api_t& a = api();
  if (getSize() < 2 || getRank() != 0 ||
      a.struct_size < offsetof(dlpg_api_t, group_create_subset) + sizeof(a.group_create_subset))
    return;
  // A subset of rank 0 alone joins the job as any call on the group would, and on rank 0
  // that starts the admission without waiting for anybody.
  int zero = 0;
  dlpg_group_t* alone = nullptr;
  if (a.group_create_subset(core_->g(), 1, &zero, nullptr, &alone) == DLPG_OK)
    a.group_destroy(alone);
}

}  // namespace dlpg_torch
