// ProcessGroupDlpg: the collectives (see backend.h).
#include "backend.h"

namespace dlpg_torch {

namespace {
void one_tensor(const std::vector<at::Tensor>& ts, const char* what) {
  TORCH_CHECK(ts.size() == 1, "dlpg: ", what, " takes one tensor per process, got ", ts.size());
}
}  // namespace

void* ProcessGroupDlpg::stream(const at::Tensor& t) {
  return t.is_cuda() ? native_stream(current_stream(t.device())) : nullptr;
}

ProcessGroupDlpg::WorkDlpgPtr ProcessGroupDlpg::begin(c10d::OpType type, const at::Tensor& like,
                                                      Tensors result) {
  if (core_->has_pending_p2p()) core_->flush_p2p();
  core_->reap();
  now_ = false;
  return c10::make_intrusive<WorkDlpg>(core_, type, like.is_cuda(), like.device(),
                                       std::move(result));
}

Borrowed* ProcessGroupDlpg::use(WorkDlpg& w, const at::Tensor& t, bool written) {
  auto b = borrow(t);
  if (written && !b->tensor.is_same(b->user)) {
    at::Tensor user = b->user, tmp = b->tensor;
    w.post.push_back([user, tmp]() mutable { user.copy_(tmp); });
  }
  w.keep.push_back(b);
  return b.get();
}

dlpg_work_t** ProcessGroupDlpg::slot(WorkDlpg& w, bool cuda) {
  (void)w;
  h_ = nullptr;
  return cuda ? nullptr : &h_;
}

dlpg_work_t** ProcessGroupDlpg::slot_now(WorkDlpg& w, bool cuda) {
  if (cuda || coalescing_) return slot(w, cuda);
  h_ = nullptr;
  now_ = true;
  return nullptr;
}

void ProcessGroupDlpg::issued(WorkDlpg& w, dlpg_status_t st, const char* what) {
  dlpg_work_t* h = h_;
  h_ = nullptr;
  check(st, what);
  if (h) w.handles.push_back(h);
}

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::done(WorkDlpgPtr w) {
  w->issued();
  if (coalescing_) coalesced_.push_back(w);
  if (now_) {
    now_ = false;
    w->wait(std::chrono::milliseconds(0));  // complete: runs the copies out, if any
  }
  return w;
}

// ------------------------------------------------------------------ rooted and reducing

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::broadcast(Tensors& tensors,
                                                      const c10d::BroadcastOptions& opts) {
  one_tensor(tensors, "broadcast");
  auto w = begin(c10d::OpType::BROADCAST, tensors[0], tensors);
  DLTensor* in = &use(*w, tensors[0], true)->dl;
  void* s = stream(tensors[0]);
  auto hp = slot(*w, tensors[0].is_cuda());
  issued(*w, api().broadcast(core_->g(), &in, nullptr, 1, static_cast<int>(opts.rootRank),
                                 &s, hp), "dlpg_broadcast");
  return done(w);
}

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::allreduce(Tensors& tensors,
                                                      const c10d::AllreduceOptions& opts) {
  one_tensor(tensors, "all_reduce");
  if (tensors[0].is_sparse()) return allreduce_sparse(tensors, opts);
  const at::Tensor& t = tensors[0];
  dlpg_reduce_desc_t op = reduce_desc(opts.reduceOp, "all_reduce");
  auto w = begin(c10d::OpType::ALLREDUCE, t, tensors);
  DLTensor* in = &use(*w, t, true)->dl;
  void* s = stream(t);
  auto hp = slot_now(*w, t.is_cuda());
  issued(*w, allreduce_desc(core_->g(), &in, nullptr, op, &s, hp), "dlpg_allreduce");
  return done(w);
}

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::allreduce_coalesced(
    Tensors& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "dlpg: allreduce_coalesced: no tensors");
  dlpg_reduce_desc_t op = reduce_desc(opts.reduceOp, "allreduce_coalesced");
  auto w = begin(c10d::OpType::ALLREDUCE_COALESCED, tensors[0], tensors);
  batch([&] {
    for (auto& t : tensors) {
      DLTensor* in = &use(*w, t, true)->dl;
      void* s = stream(t);
      auto hp = slot(*w, t.is_cuda());
      issued(*w, allreduce_desc(core_->g(), &in, nullptr, op, &s, hp), "dlpg_allreduce");
    }
  });
  return done(w);
}

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::reduce(Tensors& tensors,
                                                   const c10d::ReduceOptions& opts) {
  one_tensor(tensors, "reduce");
  dlpg_reduce_desc_t op = reduce_desc(opts.reduceOp, "reduce");
  auto w = begin(c10d::OpType::REDUCE, tensors[0], tensors);
  DLTensor* in = &use(*w, tensors[0], true)->dl;
  void* s = stream(tensors[0]);
  auto hp = slot(*w, tensors[0].is_cuda());
  issued(*w, reduce_desc_call(core_->g(), &in, nullptr, op, static_cast<int>(opts.rootRank),
                              &s, hp), "dlpg_reduce");
  return done(w);
}

// ------------------------------------------------------------------ gathering

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::allgather(std::vector<Tensors>& outputs,
                                                      Tensors& inputs,
                                                      const c10d::AllgatherOptions&) {
  one_tensor(inputs, "all_gather");
  TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
              "dlpg: all_gather needs one output list of ", size_, " tensors");
  const at::Tensor& in = inputs[0];
  Tensors& outs = outputs[0];
  same_kind(outs, in, "all_gather", "output", "the input");
  std::vector<int64_t> counts = numels(outs);
  bool even = true;
  for (int64_t c : counts) even = even && c == in.numel();
  // Different sizes per rank, as torch's NCCL backend allows (Gloo's refuses them).
  if (!even) require_vcoll("all_gather with outputs of different sizes", "dlpg_allgatherv");
  auto w = begin(c10d::OpType::ALLGATHER, in, outs);
  if (even) {
    gather_flat(*w, in, outs, true);
    return done(w);
  }
  DLTensor* din = &use(*w, in, false)->dl;
  DLTensor* dout = &use(*w, landing(*w, outs), true)->dl;
  auto hp = slot_now(*w, in.is_cuda());
  issued(*w, api().allgatherv(core_->g(), din, dout, counts.data(), nullptr, stream(in), hp),
         "dlpg_allgatherv");
  return done(w);
}

void ProcessGroupDlpg::gather_flat(WorkDlpg& w, const at::Tensor& in, Tensors outs, bool now) {
  DLTensor* din = &use(w, in, false)->dl;
  DLTensor* dout = &use(w, landing(w, outs), true)->dl;
  void* s = stream(in);
  auto hp = now ? slot_now(w, in.is_cuda()) : slot(w, in.is_cuda());
  issued(w, api().allgather(core_->g(), &din, &dout, 1, &s, hp), "dlpg_allgather");
}

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                            const c10d::AllgatherOptions&) {
  auto w = begin(c10d::OpType::_ALLGATHER_BASE, input, {output});
  DLTensor* din = &use(*w, input, false)->dl;
  DLTensor* dout = &use(*w, output, true)->dl;
  void* s = stream(input);
  auto hp = slot(*w, input.is_cuda());
  issued(*w, api().allgather(core_->g(), &din, &dout, 1, &s, hp), "dlpg_allgather");
  return done(w);
}

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::allgather_coalesced(std::vector<Tensors>& outputs,
                                                                Tensors& inputs,
                                                                const c10d::AllgatherOptions&) {
  // outputs[r][i] receives input i of rank r (Gloo's layout).
  TORCH_CHECK(!inputs.empty() && static_cast<int>(outputs.size()) == size_,
              "dlpg: allgather_coalesced needs ", size_, " output lists (one per rank), got ",
              outputs.size());
  for (auto& o : outputs)
    TORCH_CHECK(o.size() == inputs.size(), "dlpg: allgather_coalesced: an output list has ",
                o.size(), " tensors for ", inputs.size(), " inputs");
  auto w = begin(c10d::OpType::ALLGATHER_COALESCED, inputs[0], {});
  batch([&] {
    for (size_t i = 0; i < inputs.size(); i++) {
      Tensors o;
      for (auto& per_rank : outputs) o.push_back(per_rank[i]);
      gather_flat(*w, inputs[i], o, false);
    }
  });
  return done(w);
}

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::allgather_into_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const c10d::AllgatherOptions&) {
  return pairwise(outputs, inputs, "allgather_into_tensor_coalesced",
                  [&](DLTensor** in, DLTensor** out, void** s, dlpg_work_t** hp) {
                    return api().allgather(core_->g(), in, out, 1, s, hp);
                  });
}

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::reduce_scatter_tensor_coalesced(
    Tensors& outputs, Tensors& inputs, const c10d::ReduceScatterOptions& opts) {
  dlpg_reduce_desc_t op = reduce_desc(opts.reduceOp, "reduce_scatter_tensor_coalesced");
  return pairwise(outputs, inputs, "reduce_scatter_tensor_coalesced",
                  [&](DLTensor** in, DLTensor** out, void** s, dlpg_work_t** hp) {
                    return reduce_scatter_desc(core_->g(), in, out, op, s, hp);
                  });
}

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::reduce_scatter(Tensors& outputs,
                                                           std::vector<Tensors>& inputs,
                                                           const c10d::ReduceScatterOptions& opts) {
  one_tensor(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
              "dlpg: reduce_scatter needs one input list of ", size_, " tensors");
  at::Tensor& out = outputs[0];
  same_kind(inputs[0], out, "reduce_scatter", "input", "the output");
  // Input j reduces into rank j's output: the sizes may differ per rank (as Gloo's and
  // NCCL's backends allow), this rank's input must match its output.
  std::vector<int64_t> counts = numels(inputs[0]);
  TORCH_CHECK(counts[rank_] == out.numel(), "dlpg: reduce_scatter: input ", rank_, " (this "
              "rank's) has ", counts[rank_], " elements but the output has ", out.numel());
  bool even = true;
  for (int64_t c : counts) even = even && c == out.numel();
  at::Tensor flat = packed(inputs[0]);
  if (even) return _reduce_scatter_base(out, flat, opts);
  require_vcoll("reduce_scatter with inputs of different sizes", "dlpg_reduce_scatter_v");
  dlpg_reduce_desc_t op = reduce_desc(opts.reduceOp, "reduce_scatter");
  auto w = begin(c10d::OpType::REDUCE_SCATTER, flat, outputs);
  DLTensor* din = &use(*w, flat, false)->dl;
  DLTensor* dout = &use(*w, out, true)->dl;
  auto hp = slot_now(*w, out.is_cuda());
  issued(*w, api().reduce_scatter_v(core_->g(), din, dout, counts.data(), nullptr, &op,
                                    stream(out), hp), "dlpg_reduce_scatter_v");
  return done(w);
}

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  dlpg_reduce_desc_t op = reduce_desc(opts.reduceOp, "reduce_scatter");
  auto w = begin(c10d::OpType::_REDUCE_SCATTER_BASE, input, {output});
  DLTensor* din = &use(*w, input, false)->dl;
  DLTensor* dout = &use(*w, output, true)->dl;
  void* s = stream(input);
  auto hp = slot(*w, input.is_cuda());
  issued(*w, reduce_scatter_desc(core_->g(), &din, &dout, op, &s, hp), "dlpg_reduce_scatter");
  return done(w);
}

ProcessGroupDlpg::WorkPtr ProcessGroupDlpg::barrier(const c10d::BarrierOptions&) {
  if (core_->has_pending_p2p()) core_->flush_p2p();
  core_->reap();
  auto w = c10::make_intrusive<WorkDlpg>(core_, c10d::OpType::BARRIER, false,
                                         c10::Device(c10::kCPU), Tensors{});
  h_ = nullptr;
  issued(*w, api().barrier(core_->g(), &h_), "dlpg_barrier");
  return done(w);
}

// After shutdown there is nothing left to abort (torch may call both).
void ProcessGroupDlpg::abort() {
  if (dlpg_group_t* g = core_->g_or_null()) api().group_abort(g);
}

}  // namespace dlpg_torch
