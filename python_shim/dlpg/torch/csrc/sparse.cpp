// ProcessGroupDlpg::allreduce_sparse: the SUM of sparse COO tensors as ProcessGroupGloo
// computes it: every rank's coalesced indices and values reach every rank, which sums them
// and coalesces. Three blocking dlpg calls: dlpg_allgather of a fixed-size header (shape,
// dtype, nnz), then dlpg_allgatherv of the indices and of the values (as bytes, so every
// dtype torch's sparse tensors hold moves). Every rank checks every rank's header, so a
// mismatch is the same error on all of them, naming both ranks, never a hang.
#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include "backend.h"

namespace dlpg_torch {

namespace {

// Header layout: what must agree across ranks, then nnz and the sizes.
enum : int64_t { kNdim, kSparseDim, kDenseDim, kDtype, kNnz, kSizes };
constexpr int64_t kMaxDims = 64;  // sizes beyond this many dimensions are refused
constexpr int64_t kHeader = kSizes + kMaxDims;

std::string shape_of(const int64_t* h) {
  std::string s = "[";
  for (int64_t d = 0; d < std::min(h[kNdim], kMaxDims); d++)
    s += (d ? ", " : "") + std::to_string(h[kSizes + d]);
  return s + "] (sparse_dim " + std::to_string(h[kSparseDim]) + ", dense_dim " +
         std::to_string(h[kDenseDim]) + ", " +
         c10::toString(static_cast<at::ScalarType>(h[kDtype])) + ")";
}

bool same_shape(const int64_t* a, const int64_t* b) {
  if (a[kNdim] != b[kNdim] || a[kSparseDim] != b[kSparseDim] ||
      a[kDenseDim] != b[kDenseDim] || a[kDtype] != b[kDtype])
    return false;
  for (int64_t d = 0; d < std::min(a[kNdim], kMaxDims); d++)
    if (a[kSizes + d] != b[kSizes + d]) return false;
  return true;
}

// dlpg_allgatherv of in (counts[r] elements from rank r) into a new tensor like in, packed in
// rank order; skipped (an empty result) when no rank has anything, which every rank knows.
at::Tensor gatherv(dlpg_group_t* g, const at::Tensor& in, const std::vector<int64_t>& counts) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  at::Tensor out = at::empty({total}, in.options());
  if (total == 0) return out;
  auto bin = borrow(in), bout = borrow(out);
  check(api().allgatherv(g, &bin->dl, &bout->dl, counts.data(), nullptr, nullptr, nullptr),
        "dlpg_allgatherv");
  return out;
}

}  // namespace

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::allreduce_sparse(Tensors& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "dlpg: all_reduce takes one tensor per process, got ",
              tensors.size());
  at::Tensor& t = tensors[0];
  TORCH_CHECK(t.layout() == at::kSparse, "dlpg: sparse all_reduce supports sparse COO "
              "tensors (torch.sparse_coo), got a ", t.layout(), " tensor (all_reduce its "
              ".to_sparse() or .to_dense() instead)");
  TORCH_CHECK(opts.reduceOp == c10d::ReduceOp::SUM, "dlpg: all_reduce of a sparse tensor "
              "only works with ReduceOp.SUM (as gloo's), got another op");
  TORCH_CHECK(!coalescing_, "dlpg: all_reduce of a sparse tensor cannot be part of a "
              "coalescing block (its sizes are only known after a first exchange)");
  require_vcoll("all_reduce of a sparse tensor", "dlpg_allgatherv");
  if (core_->has_pending_p2p()) core_->flush_p2p();
  core_->reap();
  dlpg_group_t* g = core_->g();
  const int n = size_;

  // As gloo's: below autograd (the results are plain tensors), on the host (a CUDA tensor is
  // summed on the host and copied back, as gloo does).
  c10::impl::ExcludeDispatchKeyGuard no_autograd(c10::autograd_dispatch_keyset);
  at::Tensor input = (t.is_cuda() ? t.cpu() : t).coalesce();

  at::Tensor header = at::zeros({kHeader}, at::kLong);
  int64_t* h = header.data_ptr<int64_t>();
  h[kNdim] = input.dim();
  h[kSparseDim] = input.sparse_dim();
  h[kDenseDim] = input.dense_dim();
  h[kDtype] = static_cast<int64_t>(input.scalar_type());
  h[kNnz] = input._nnz();
  for (int64_t d = 0; d < std::min<int64_t>(input.dim(), kMaxDims); d++)
    h[kSizes + d] = input.size(d);
  at::Tensor headers = at::empty({n * kHeader}, at::kLong);
  {
    auto bin = borrow(header), bout = borrow(headers);
    DLTensor* in = &bin->dl;
    DLTensor* out = &bout->dl;
    check(api().allgather(g, &in, &out, 1, nullptr, nullptr), "dlpg_allgather");
  }
  const int64_t* all = headers.data_ptr<int64_t>();
  for (int r = 0; r < n; r++) {
    const int64_t* hr = all + r * kHeader;
    TORCH_CHECK(hr[kNdim] <= kMaxDims, "dlpg: all_reduce of a sparse tensor: rank ", r,
                "'s tensor has ", hr[kNdim], " dimensions; at most ", kMaxDims,
                " are supported");
    TORCH_CHECK(same_shape(all, hr), "dlpg: all_reduce of a sparse tensor: rank 0 has a "
                "tensor of size ", shape_of(all), " but rank ", r, " has ", shape_of(hr),
                "; every rank must pass the same size, sparse_dim, dense_dim and dtype");
  }

  // indices: sparse_dim x nnz (int64); values: nnz x dense sizes, moved as bytes.
  const int64_t sparse_dim = input.sparse_dim();
  int64_t dense_numel = 1;
  for (int64_t d = sparse_dim; d < input.dim(); d++) dense_numel *= input.size(d);
  const int64_t value_bytes = dense_numel * input.values().element_size();
  std::vector<int64_t> index_counts(n), value_counts(n);
  for (int r = 0; r < n; r++) {
    index_counts[r] = sparse_dim * all[r * kHeader + kNnz];
    value_counts[r] = value_bytes * all[r * kHeader + kNnz];
  }
  at::Tensor flat_indices = gatherv(g, input.indices().contiguous().view({-1}), index_counts);
  at::Tensor values = input.values().contiguous();
  at::Tensor flat_values =
      gatherv(g, values.view({-1}).view(at::kByte), value_counts);

  // Rank r's indices are a sparse_dim x nnz_r block of flat_indices; side by side they are
  // every entry's indices, and the values blocks in the same order are every entry's values.
  std::vector<at::Tensor> blocks;
  int64_t at_elem = 0, total_nnz = 0;
  for (int r = 0; r < n; r++) {
    const int64_t nnz = all[r * kHeader + kNnz];
    total_nnz += nnz;
    blocks.push_back(flat_indices.narrow(0, at_elem, sparse_dim * nnz).view({sparse_dim, nnz}));
    at_elem += sparse_dim * nnz;
  }
  std::vector<int64_t> value_shape = values.sizes().vec();
  value_shape[0] = total_nnz;
  at::Tensor indices = at::cat(blocks, 1);
  at::Tensor summed =
      at::sparse_coo_tensor(indices, flat_values.view(values.scalar_type()).view(value_shape),
                            input.sizes(), input.options())
          .coalesce();
  t.copy_(summed);

  auto w = c10::make_intrusive<WorkDlpg>(core_, c10d::OpType::ALLREDUCE, false,
                                         c10::Device(c10::kCPU), tensors);
  w->wait(std::chrono::milliseconds(0));
  return w;
}

}  // namespace dlpg_torch
