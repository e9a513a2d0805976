// ProcessGroupDlpg: gather, scatter and all_to_all (single tensor with split sizes, and
// lists), each one dlpg call (dlpg_gather, dlpg_scatter, dlpg_alltoall or dlpg_alltoallv).
// What must agree across ranks (sizes, split sizes) is checked by libdlpg, whose error names
// both ranks; what one rank can see wrong is refused here, naming the tensor and its size.
#include "backend.h"

namespace dlpg_torch {

namespace {

// The element counts of t's blocks for all_to_all_single: split_sizes rows each (empty: the
// rows divided evenly among the ranks); `which` is "input" or "output".
std::vector<int64_t> split_counts(const at::Tensor& t, const std::vector<int64_t>& splits,
                                  int size, const char* which) {
  TORCH_CHECK(t.dim() >= 1, "dlpg: all_to_all_single: the ", which, " is a 0-d tensor; its "
              "blocks are rows (dimension 0)");
  const int64_t rows = t.size(0);
  int64_t row = 1;
  for (int64_t d = 1; d < t.dim(); d++) row *= t.size(d);
  std::vector<int64_t> counts(size);
  if (splits.empty()) {
    TORCH_CHECK(rows % size == 0, "dlpg: all_to_all_single: the ", which, " has ", rows,
                " rows, which do not divide evenly among ", size, " ranks (pass ", which,
                "_split_sizes)");
    for (auto& c : counts) c = rows / size * row;
    return counts;
  }
  TORCH_CHECK(static_cast<int>(splits.size()) == size, "dlpg: all_to_all_single: ", which,
              "_split_sizes has ", splits.size(), " entries for ", size, " ranks");
  int64_t sum = 0;
  for (int j = 0; j < size; j++) {
    TORCH_CHECK(splits[j] >= 0, "dlpg: all_to_all_single: ", which, "_split_sizes[", j,
                "] is ", splits[j], " (split sizes must be >= 0)");
    sum += splits[j];
    counts[j] = splits[j] * row;
  }
  TORCH_CHECK(sum == rows, "dlpg: all_to_all_single: ", which, "_split_sizes sum to ", sum,
              " rows but the ", which, " has ", rows);
  return counts;
}

}  // namespace

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                          std::vector<int64_t>& output_splits,
                                                          std::vector<int64_t>& input_splits,
                                                          const c10d::AllToAllOptions&) {
  const bool even = output_splits.empty() && input_splits.empty();
  std::vector<int64_t> send, recv;
  if (!even) {
    require_vcoll("all_to_all_single with split sizes", "dlpg_alltoallv");
    send = split_counts(input, input_splits, size_, "input");
    recv = split_counts(output, output_splits, size_, "output");
  }
  auto w = begin(c10d::OpType::ALLTOALL_BASE, input, {output});
  DLTensor* din = &use(*w, input, false)->dl;
  DLTensor* dout = &use(*w, output, true)->dl;
  auto hp = slot_now(*w, input.is_cuda());
  if (even)
    issued(*w, api().alltoall(core_->g(), din, dout, stream(input), hp), "dlpg_alltoall");
  else
    issued(*w, api().alltoallv(core_->g(), din, send.data(), nullptr, dout, recv.data(),
                               nullptr, stream(input), hp), "dlpg_alltoallv");
  return done(w);
}

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::alltoall(Tensors& outputs, Tensors& inputs,
                                                     const c10d::AllToAllOptions&) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_ && static_cast<int>(inputs.size()) == size_,
              "dlpg: all_to_all needs ", size_, " input and ", size_, " output tensors (one "
              "per rank), got ", inputs.size(), " and ", outputs.size());
  same_kind(inputs, inputs[0], "all_to_all", "input", "input 0");
  same_kind(outputs, inputs[0], "all_to_all", "output", "input 0");
  std::vector<int64_t> send = numels(inputs), recv = numels(outputs);
  bool even = true;
  for (int j = 0; j < size_; j++) even = even && send[j] == send[0] && recv[j] == send[0];
  if (!even) require_vcoll("all_to_all with tensors of different sizes", "dlpg_alltoallv");
  auto w = begin(c10d::OpType::ALLTOALL, inputs[0], outputs);
  // Packed in rank order (in place where the tensors already lie so), as Gloo's list form
  // packs into one buffer.
  DLTensor* din = &use(*w, packed(inputs), false)->dl;
  DLTensor* dout = &use(*w, landing(*w, outputs), true)->dl;
  void* s = stream(inputs[0]);
  auto hp = slot_now(*w, inputs[0].is_cuda());
  if (even)
    issued(*w, api().alltoall(core_->g(), din, dout, s, hp), "dlpg_alltoall");
  else
    issued(*w, api().alltoallv(core_->g(), din, send.data(), nullptr, dout, recv.data(),
                               nullptr, s, hp), "dlpg_alltoallv");
  return done(w);
}

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::gather(std::vector<Tensors>& outputs, Tensors& inputs,
                                                   const c10d::GatherOptions& opts) {
  TORCH_CHECK(inputs.size() == 1, "dlpg: gather takes one input tensor per process, got ",
              inputs.size());
  require_vcoll("gather", "dlpg_gather");
  const int root = static_cast<int>(opts.rootRank);
  const at::Tensor& in = inputs[0];
  const bool is_root = rank_ == root;
  if (is_root) {
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
                "dlpg: gather needs one output list of ", size_, " tensors on the root (rank ",
                root, ")");
    same_kind(outputs[0], in, "gather", "output", "the input");
    for (int r = 0; r < size_; r++)
      TORCH_CHECK(outputs[0][r].numel() == in.numel(), "dlpg: gather: output ", r, " has ",
                  outputs[0][r].numel(), " elements but the input has ", in.numel(),
                  " (every output must match the input)");
  }
  auto w = begin(c10d::OpType::GATHER, in, is_root ? outputs[0] : Tensors{});
  DLTensor* din = &use(*w, in, false)->dl;
  DLTensor* dout = is_root ? &use(*w, landing(*w, outputs[0]), true)->dl : nullptr;
  auto hp = slot_now(*w, in.is_cuda());
  issued(*w, api().gather(core_->g(), din, dout, root, stream(in), hp), "dlpg_gather");
  return done(w);
}

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                                    const c10d::ScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1, "dlpg: scatter takes one output tensor per process, got ",
              outputs.size());
  require_vcoll("scatter", "dlpg_scatter");
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor& out = outputs[0];
  const bool is_root = rank_ == root;
  if (is_root) {
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
                "dlpg: scatter needs one input list of ", size_, " tensors on the root (rank ",
                root, ")");
    same_kind(inputs[0], out, "scatter", "input", "the output");
    for (int r = 0; r < size_; r++)
      TORCH_CHECK(inputs[0][r].numel() == out.numel(), "dlpg: scatter: input ", r, " has ",
                  inputs[0][r].numel(), " elements but the output has ", out.numel(),
                  " (every input must match the output)");
  }
  auto w = begin(c10d::OpType::SCATTER, out, outputs);
  DLTensor* din = is_root ? &use(*w, packed(inputs[0]), false)->dl : nullptr;
  DLTensor* dout = &use(*w, out, true)->dl;
  auto hp = slot_now(*w, out.is_cuda());
  issued(*w, api().scatter(core_->g(), din, dout, root, stream(out), hp), "dlpg_scatter");
  return done(w);
}

}  // namespace dlpg_torch
