// ProcessGroupDlpg: point to point, and coalescing (torch's _coalescing_manager given a
// device). The backend claims supportsCoalescing, so batch_isend_irecv brackets its sends and
// receives with startCoalescing/endCoalescing: one dlpg_group_start/end batch. Single sends
// and receives outside such a block are deferred by Core and issued together as one batch.
#include "backend.h"

namespace dlpg_torch {

void ProcessGroupDlpg::p2p(WorkDlpg& w, bool send, const at::Tensor& t, int peer, int tag) {
  DLTensor* d = &use(w, t, !send)->dl;
  auto hp = slot(w, t.is_cuda());
  dlpg_status_t st = send ? api().send(core_->g(), d, peer, tag, stream(t), hp)
                          : api().recv(core_->g(), d, peer, tag, stream(t), hp);
  issued(w, st, send ? "dlpg_send" : "dlpg_recv");
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
