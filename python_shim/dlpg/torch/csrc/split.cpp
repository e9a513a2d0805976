// ProcessGroupDlpg::split: torch's ProcessGroup::splitGroup (dist.split_group, and
// DeviceMesh and new_group where the default group has a bound device) as one
// dlpg_group_split of this group. The child shares this group's store and job, so making
// it costs one exchange of colors among the parent's ranks instead of a new rendezvous.
#include <Python.h>

#include <algorithm>
#include <cstddef>
#include <sstream>

#include "backend.h"

namespace dlpg_torch {

namespace {

std::string listed(const std::vector<int>& v) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < v.size(); i++) o << (i ? ", " : "") << v[i];
  o << "]";
  return o.str();
}

// Release the GIL, where this thread holds it, while libdlpg waits for the other ranks:
// the store's callbacks may run Python on other threads.
class NoGil {
 public:
  NoGil() : state_(Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr) {}
  ~NoGil() {
    if (state_) PyEval_RestoreThread(state_);
  }
  NoGil(const NoGil&) = delete;
  NoGil& operator=(const NoGil&) = delete;

 private:
  PyThreadState* state_;
};

}  // namespace

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupDlpg::getBackendOptions() {
  auto o = c10::make_intrusive<Options>(
      "dlpg", std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000.0)));
  return o;
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupDlpg::split(
    const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
    const c10::intrusive_ptr<Options>& opts) {
  // The same splitGroup asking again for its next device type.
  if (split_store_ && store.get() == split_store_.get() && ranks == split_ranks_)
    return split_child_;
  const dlpg_api_t& a = api();
  TORCH_CHECK(a.struct_size >= offsetof(dlpg_api_t, group_split) + sizeof(a.group_split),
              "dlpg: split needs a libdlpg with dlpg_group_split (the loaded one's table is ",
              a.struct_size, " bytes)");
  TORCH_CHECK(!coalescing_, "dlpg: split inside a coalescing block (split_group is "
              "collective over the parent group; call it outside the block)");
  const int me = getRank(), n = getSize();
  for (int r : ranks)
    TORCH_CHECK(r >= 0 && r < n, "dlpg: split: rank ", r, " in ", listed(ranks),
                " is not a rank of the parent group (its ranks are 0..", n - 1, ")");
  auto it = std::find(ranks.begin(), ranks.end(), me);
  const bool member = it != ranks.end();
  // Disjoint children (torch's contract) have distinct lowest ranks: that is the color.
  const int color = member ? *std::min_element(ranks.begin(), ranks.end()) : DLPG_SPLIT_NONE;
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  const int want_rank =
      static_cast<int>(std::find(sorted.begin(), sorted.end(), me) - sorted.begin());

  dlpg_group_options_t go = DLPG_GROUP_OPTIONS_INIT;
  double timeout_s = timeout_s_;
  std::string name = "torch";
  if (opts) {
    if (opts->timeout.count() > 0) timeout_s = opts->timeout.count() / 1000.0;
    if (!opts->group_name.empty()) name = opts->group_name;
  }
  go.timeout_s = timeout_s;
  go.name = name.c_str();

  if (core_->has_pending_p2p()) core_->flush_p2p();
  dlpg_group_t* child = nullptr;
  dlpg_status_t st;
  {
    NoGil nogil;
    st = a.group_split(core_->g(), color, want_rank, &go, &child);
  }
  check(st, "dlpg_group_split");
  c10::intrusive_ptr<c10d::Backend> out;
  if (child) {
    int crank = -1, csize = -1;
    a.group_rank(child, &crank);
    a.group_size(child, &csize);
    if (csize != static_cast<int>(ranks.size()) || crank != want_rank) {
      a.group_destroy(child);
      TORCH_CHECK(false, "dlpg: split: rank ", me, " asked for the group of ranks ",
                  listed(sorted), " but the ranks that named rank ", color,
                  " as their lowest formed a group of ", csize,
                  " (the ranks' split lists disagree or overlap)");
    }
    auto pg = c10::make_intrusive<ProcessGroupDlpg>(std::make_shared<Core>(child, crank, csize),
                                                    crank, csize);
    pg->set_timeout_s(timeout_s);
    out = pg;
  } else {
    TORCH_CHECK(!member, "dlpg: split: rank ", me, " is in ", listed(sorted),
                " but dlpg_group_split gave it no group");
  }
  split_store_ = store;
  split_ranks_ = ranks;
  split_child_ = out;
  return out;
}

}  // namespace dlpg_torch
