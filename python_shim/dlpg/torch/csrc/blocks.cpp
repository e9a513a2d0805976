// ProcessGroupDlpg: torch's lists of per-rank tensors as the one flat tensor and counts the
// uneven and rooted dlpg calls take (dlpg_gather, dlpg_scatter, dlpg_allgatherv,
// dlpg_alltoallv, dlpg_reduce_scatter_v).
#include "backend.h"

namespace dlpg_torch {

bool has_vcoll() {
  const dlpg_api_t& a = api();
  return a.struct_size >= offsetof(dlpg_api_t, reduce_scatter_v) + sizeof(a.reduce_scatter_v);
}

void require_vcoll(const char* what, const char* fn) {
  TORCH_CHECK(has_vcoll(), "dlpg: ", what, " needs a libdlpg with ", fn, " (the loaded one's "
              "table is ", api().struct_size, " bytes; this extension was built for ",
              sizeof(dlpg_api_t), ")");
}

void same_kind(const std::vector<at::Tensor>& ts, const at::Tensor& like, const char* what,
               const char* name, const char* like_name) {
  for (size_t i = 0; i < ts.size(); i++) {
    TORCH_CHECK(ts[i].scalar_type() == like.scalar_type(), "dlpg: ", what, ": ", name, " ", i,
                " is ", ts[i].scalar_type(), " but ", like_name, " is ", like.scalar_type(),
                " (every tensor must have one dtype)");
    TORCH_CHECK(ts[i].device() == like.device(), "dlpg: ", what, ": ", name, " ", i, " is on ",
                ts[i].device(), " but ", like_name, " is on ", like.device());
  }
}

std::vector<int64_t> numels(const std::vector<at::Tensor>& ts) {
  std::vector<int64_t> n;
  n.reserve(ts.size());
  for (auto& t : ts) n.push_back(t.numel());
  return n;
}

namespace {

// A flat view of ts when they lie back to back in one storage, contiguous (the pieces of one
// tensor that torch.split or chunk made, as FSDP-like code hands them): libdlpg then reads or
// writes them in place. Undefined when they do not.
at::Tensor adjacent(const std::vector<at::Tensor>& ts) {
  const at::Tensor& a = ts[0];
  int64_t total = 0;
  for (auto& t : ts) {
    if (!t.is_contiguous() || t.scalar_type() != a.scalar_type() || t.device() != a.device() ||
        !t.storage().is_alias_of(a.storage()) ||
        t.storage_offset() != a.storage_offset() + total)
      return {};
    total += t.numel();
  }
  return a.as_strided({total}, {1});
}

}  // namespace

at::Tensor ProcessGroupDlpg::packed(const std::vector<at::Tensor>& ts) {
  at::Tensor v = adjacent(ts);
  if (v.defined()) return v;
  std::vector<at::Tensor> flat;
  flat.reserve(ts.size());
  for (auto& t : ts) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

at::Tensor ProcessGroupDlpg::landing(WorkDlpg& w, const std::vector<at::Tensor>& outs) {
  at::Tensor v = adjacent(outs);
  if (v.defined()) return v;
  std::vector<int64_t> n = numels(outs);
  int64_t total = 0;
  for (int64_t x : n) total += x;
  at::Tensor flat = at::empty({total}, outs[0].options());
  std::vector<at::Tensor> o = outs;
  w.post.push_back([o, flat, n]() mutable {
    int64_t off = 0;
    for (size_t r = 0; r < o.size(); r++) {
      if (n[r]) o[r].copy_(flat.narrow(0, off, n[r]).view(o[r].sizes()));
      off += n[r];
    }
  });
  return flat;
}

}  // namespace dlpg_torch
