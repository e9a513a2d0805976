// ProcessGroupDlpg: point to point, the forms built from batches of send/recv (gather,
// scatter, all_to_all), and coalescing (torch's _coalescing_manager given a device). The
// backend does not claim supportsCoalescing, so batch_isend_irecv reaches it as single
// sends and receives, which Core defers and issues as one batch.
#include "backend.h"

namespace dlpg_torch {

namespace {
// Internal point-to-point traffic (gather, scatter, all_to_all, uneven all_gather) uses its
// own tag so it never matches a user's send/recv; every rank issues in the same order.
constexpr int kInternalTag = 0x7FFF0000;
}  // namespace

void ProcessGroupDlpg::p2p(WorkDlpg& w, bool send, const at::Tensor& t, int peer, int tag) {
  DLTensor* d = &use(w, t, !send)->dl;
  auto hp = slot(w, t.is_cuda());
  dlpg_status_t st = send ? api().send(core_->g(), d, peer, tag, stream(t), hp)
                          : api().recv(core_->g(), d, peer, tag, stream(t), hp);
  issued(w, st, send ? "dlpg_send" : "dlpg_recv");
}

void ProcessGroupDlpg::exchange(WorkDlpg& w, const Tensors& outs, const Tensors& ins) {
  TORCH_CHECK(static_cast<int>(outs.size()) == size_ && static_cast<int>(ins.size()) == size_,
              "dlpg: all_to_all needs ", size_, " input and output blocks, got ", ins.size(),
              " and ", outs.size());
  const int me = rank_;
  batch([&] {
    for (int k = 1; k < size_; k++) {
      int dst = (me + k) % size_, src = (me - k + size_) % size_;
      // Empty pairs are skipped on both sides (the sizes agree by contract).
      if (ins[dst].numel()) p2p(w, true, ins[dst], dst, kInternalTag);
      if (outs[src].numel()) p2p(w, false, outs[src], src, kInternalTag);
    }
  });
  if (outs[me].numel()) {
    at::Tensor o = outs[me];
    o.copy_(ins[me].reshape(o.sizes()));
  }
}

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                          std::vector<int64_t>& output_splits,
                                                          std::vector<int64_t>& input_splits,
                                                          const c10d::AllToAllOptions&) {
  auto w = begin(c10d::OpType::ALLTOALL_BASE, input, {output});
  if (output_splits.empty() && input_splits.empty()) {
    DLTensor* din = &use(*w, input, false)->dl;
    DLTensor* dout = &use(*w, output, true)->dl;
    auto hp = slot(*w, input.is_cuda());
    issued(*w, api().alltoall(core_->g(), din, dout, stream(input), hp), "dlpg_alltoall");
    return done(w);
  }
  auto blocks = [this](const at::Tensor& t, std::vector<int64_t> splits) {
    if (splits.empty()) splits.assign(size_, t.size(0) / size_);
    TORCH_CHECK(static_cast<int>(splits.size()) == size_, "dlpg: all_to_all_single: ",
                splits.size(), " split sizes for ", size_, " ranks");
    Tensors parts = at::split_with_sizes(t, splits, 0);
    return parts;
  };
  exchange(*w, blocks(output, output_splits), blocks(input, input_splits));
  return done(w);
}

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::alltoall(Tensors& outputs, Tensors& inputs,
                                                     const c10d::AllToAllOptions&) {
  TORCH_CHECK(!inputs.empty(), "dlpg: all_to_all: no tensors");
  auto w = begin(c10d::OpType::ALLTOALL, inputs[0], outputs);
  exchange(*w, outputs, inputs);
  return done(w);
}

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::gather(std::vector<Tensors>& outputs, Tensors& inputs,
                                                   const c10d::GatherOptions& opts) {
  TORCH_CHECK(inputs.size() == 1, "dlpg: gather takes one input tensor per process");
  const int root = static_cast<int>(opts.rootRank);
  const at::Tensor& in = inputs[0];
  auto w = begin(c10d::OpType::GATHER, in, rank_ == root ? outputs[0] : Tensors{});
  if (rank_ != root) {
    p2p(*w, true, in, root, kInternalTag);
    return done(w);
  }
  TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
              "dlpg: gather needs one output list of ", size_, " tensors on the root");
  batch([&] {
    for (int r = 0; r < size_; r++)
      if (r != root) p2p(*w, false, outputs[0][r], r, kInternalTag);
  });
  outputs[0][root].copy_(in.reshape(outputs[0][root].sizes()));
  return done(w);
}

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                                                    const c10d::ScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1, "dlpg: scatter takes one output tensor per process");
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor& out = outputs[0];
  auto w = begin(c10d::OpType::SCATTER, out, outputs);
  if (rank_ != root) {
    p2p(*w, false, out, root, kInternalTag);
    return done(w);
  }
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
              "dlpg: scatter needs one input list of ", size_, " tensors on the root");
  batch([&] {
    for (int r = 0; r < size_; r++)
      if (r != root) p2p(*w, true, inputs[0][r], r, kInternalTag);
  });
  out.copy_(inputs[0][root].reshape(out.sizes()));
  return done(w);
}

// ------------------------------------------------------------------ send and recv

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::point_to_point(bool is_send, Tensors& tensors,
                                                           int peer, int tag) {
  const char* what = is_send ? "send" : "recv";
  TORCH_CHECK(tensors.size() == 1, "dlpg: ", what, " takes one tensor, got ", tensors.size());
  auto type = is_send ? c10d::OpType::SEND : c10d::OpType::RECV;
  if (coalescing_) {
    auto w = begin(type, tensors[0], tensors);
    if (!is_send) w->peer = peer;
    p2p(*w, is_send, tensors[0], peer, tag);
    return done(w);
  }
  core_->reap();
  auto w = c10::make_intrusive<WorkDlpg>(core_, type, tensors[0].is_cuda(), tensors[0].device(),
                                         tensors);
  if (!is_send) w->peer = peer;
  use(*w, tensors[0], !is_send);  // a received non-contiguous tensor is copied back
  core_->defer_p2p(is_send, w->keep.back(), peer, tag, w);
  return w;
}

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::send(Tensors& tensors, int dst, int tag) {
  return point_to_point(true, tensors, dst, tag);
}

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::recv(Tensors& tensors, int src, int tag) {
  return point_to_point(false, tensors, src, tag);
}

// dlpg_recv from DLPG_ANY_SOURCE (host memory): the work's sourceRank() asks the completed
// handle which rank's message it matched (dlpg_work_source).
ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::recvAnysource(Tensors& tensors, int tag) {
  const dlpg_api_t& a = api();
  TORCH_CHECK(a.struct_size >= offsetof(dlpg_api_t, work_source) + sizeof(a.work_source),
              "dlpg: recv without a source rank needs a libdlpg with dlpg_work_source (the "
              "loaded one's table is ", a.struct_size, " bytes)");
  return point_to_point(false, tensors, DLPG_ANY_SOURCE, tag);
}

// ------------------------------------------------------------------ coalescing

void ProcessGroupDlpg::startCoalescing() {
  if (core_->has_pending_p2p()) core_->flush_p2p();
  check(api().group_start(core_->g()), "dlpg_group_start");
  coalescing_ = true;
  coalesced_.clear();
}

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::endCoalescing() {
  std::vector<WorkDlpgPtr> works;
  works.swap(coalesced_);
  coalescing_ = false;
  check(api().group_end(core_->g()), "dlpg_group_end");
  bool cuda = !works.empty() && works[0]->result().size() && works[0]->result()[0].is_cuda();
  c10::Device dev = cuda ? works[0]->result()[0].device() : c10::Device(c10::kCPU);
  auto w = c10::make_intrusive<WorkDlpg>(core_, c10d::OpType::COALESCED, cuda, dev, Tensors{});
  w->children = std::move(works);
  return w;
}

}  // namespace dlpg_torch
