// ProcessGroupDlpg: the "dlpg" backend. One torch operation becomes one dlpg call (lists of
// per-rank tensors become one flat tensor and counts: blocks.cpp), or one
// dlpg_group_start/end batch of them for the *_coalesced forms.
#pragma once

#include "dlpg_c10d.h"

namespace dlpg_torch {

class ProcessGroupDlpg : public c10d::Backend {
 public:
  ProcessGroupDlpg(std::shared_ptr<Core> core, int rank, int size)
      : c10d::Backend(rank, size), core_(std::move(core)) {}
  ~ProcessGroupDlpg() override = default;

  const std::string getBackendName() const override { return "dlpg"; }
  void abort() override;
  void shutdown() override { core_->destroy(); }

  using Work = c10d::Work;
  using WorkPtr = c10::intrusive_ptr<Work>;
  using Tensors = std::vector<at::Tensor>;

  WorkPtr broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) override;
  WorkPtr allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override;
  WorkPtr allreduce_coalesced(Tensors& tensors,
                              const c10d::AllreduceCoalescedOptions& opts) override;
  WorkPtr reduce(Tensors& tensors, const c10d::ReduceOptions& opts) override;
  WorkPtr allgather(std::vector<Tensors>& outputs, Tensors& inputs,
                    const c10d::AllgatherOptions& opts) override;
  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input,
                          const c10d::AllgatherOptions& opts) override;
  WorkPtr allgather_coalesced(std::vector<Tensors>& outputs, Tensors& inputs,
                              const c10d::AllgatherOptions& opts) override;
  WorkPtr gather(std::vector<Tensors>& outputs, Tensors& inputs,
                 const c10d::GatherOptions& opts) override;
  WorkPtr scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                  const c10d::ScatterOptions& opts) override;
  WorkPtr reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                         const c10d::ReduceScatterOptions& opts) override;
  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                               const c10d::ReduceScatterOptions& opts) override;
  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input,
                        std::vector<int64_t>& output_splits, std::vector<int64_t>& input_splits,
                        const c10d::AllToAllOptions& opts) override;
  WorkPtr alltoall(Tensors& outputs, Tensors& inputs, const c10d::AllToAllOptions& opts) override;
  WorkPtr send(Tensors& tensors, int dst, int tag) override;
  WorkPtr recv(Tensors& tensors, int src, int tag) override;
  WorkPtr recvAnysource(Tensors& tensors, int tag) override;
  WorkPtr barrier(const c10d::BarrierOptions& opts) override;
  // monitored.cpp: rank 0 waits for every rank's arrival, then releases them, through the
  // rendezvous store (never through the group, so a rank that does not come costs no abort).
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  // surface.cpp: sequence numbers, timeout, capabilities; sparse.cpp: sparse all_reduce.
  // dlpg's counter starts at 0 on every rank when the group is created: already agreed.
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  bool supportsCoalescing() const override { return true; }
  bool supportsTensorAlloc(c10::DeviceIndex) override { return false; }
  WorkPtr allreduce_sparse(Tensors& tensors, const c10d::AllreduceOptions& opts) override;
  // The store the group met on (torch's, per group): monitoredBarrier's meeting place.
  void set_store(c10::intrusive_ptr<c10d::Store> store) { store_ = std::move(store); }
  WorkPtr allgather_into_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                          const c10d::AllgatherOptions& opts) override;
  WorkPtr reduce_scatter_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                          const c10d::ReduceScatterOptions& opts) override;
  void startCoalescing() override;
  WorkPtr endCoalescing() override;

  // Subgroups (split.cpp): a child of this group by dlpg_group_split, no new rendezvous.
  bool supportsSplitting() const override { return true; }
  // eager.cpp: init_process_group(device_id=cuda:N) makes the device's NCCL communicator.
  void eagerConnectSingleDevice(at::Device device) override;
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  c10::intrusive_ptr<Options> getBackendOptions() override;
  // The group's timeout, for getBackendOptions (what a split child inherits).
  void set_timeout_s(double s) { timeout_s_ = s; }
  // new_group's and DeviceMesh's subgroups of this (default) group, made by their members
  // only (subset.cpp): dlpg_group_create_subset, no rendezvous.
  c10::intrusive_ptr<ProcessGroupDlpg> subset(const std::vector<int>& ranks, double timeout_s,
                                              const std::string& name,
                                              c10::intrusive_ptr<c10d::Store> torch_store);
  // On the default group's rank 0: admit the other ranks into the group's job now, so that
  // members of a subgroup rank 0 is not in never wait for its first operation (subset.cpp).
  void admit_now();

 private:
  using WorkDlpgPtr = c10::intrusive_ptr<WorkDlpg>;
  // A new Work for an operation on tensors like `like`; flushes deferred send/recv first.
  WorkDlpgPtr begin(c10d::OpType type, const at::Tensor& like, Tensors result);
  // Borrow t for w; when t needed a contiguous copy and `written`, copy back afterwards.
  Borrowed* use(WorkDlpg& w, const at::Tensor& t, bool written);
  // The handle out-parameter for w's next call: CPU work gets a handle; CUDA work is
  // stream-ordered and gets none (so nothing ever records or queries an event for it,
  // which keeps every operation capturable into a CUDA graph).
  dlpg_work_t** slot(WorkDlpg& w, bool cuda);
  // slot(), except for CPU work outside a coalescing block: no handle, so libdlpg runs the
  // operation on this thread when the group is idle (two thread hand-offs fewer, which is
  // most of a small operation's time on a loaded machine), and done() completes the Work.
  dlpg_work_t** slot_now(WorkDlpg& w, bool cuda);
  // Check a call's status and keep the handle slot() handed out, if it was filled.
  void issued(WorkDlpg& w, dlpg_status_t st, const char* what);
  WorkPtr done(WorkDlpgPtr w);
  void* stream(const at::Tensor& t);
  // ts (one per rank) as one flat tensor in rank order, for libdlpg to read: a view when
  // they lie back to back in one storage, else a packed copy.
  at::Tensor packed(const Tensors& ts);
  // A flat tensor for libdlpg to write outs (one per rank) into, in rank order: a view when
  // they lie back to back in one storage, else a scratch copied out to them by a post step
  // of w.
  at::Tensor landing(WorkDlpg& w, const Tensors& outs);
  void p2p(WorkDlpg& w, bool send, const at::Tensor& t, int peer, int tag);
  // Run f() between dlpg_group_start and dlpg_group_end.
  template <typename F>
  void batch(F&& f) {
    check(api().group_start(core_->g()), "dlpg_group_start");
    try {
      f();
    } catch (...) {
      api().group_end(core_->g());
      throw;
    }
    check(api().group_end(core_->g()), "dlpg_group_end");
  }

  // One batch of call(&in, &out, &stream, handle slot) over outputs[i], inputs[i] (the
  // *_tensor_coalesced forms).
  template <typename Call>
  WorkPtr pairwise(Tensors& outputs, Tensors& inputs, const char* what, Call call) {
    TORCH_CHECK(!inputs.empty() && outputs.size() == inputs.size(), "dlpg: ", what,
                " needs one output per input, got ", outputs.size(), " and ", inputs.size());
    auto w = begin(c10d::OpType::COALESCED, inputs[0], outputs);
    batch([&] {
      for (size_t i = 0; i < inputs.size(); i++) {
        DLTensor* din = &use(*w, inputs[i], false)->dl;
        DLTensor* dout = &use(*w, outputs[i], true)->dl;
        void* s = stream(inputs[i]);
        auto hp = slot(*w, inputs[i].is_cuda());
        issued(*w, call(&din, &dout, &s, hp), what);
      }
    });
    return done(w);
  }
  // all_gather of `in` into outs (rank r's part to outs[r]) through landing(); `now`: with
  // slot_now() (a single call, not part of a batch).
  void gather_flat(WorkDlpg& w, const at::Tensor& in, Tensors outs, bool now);
  // send (is_send) or recv: deferred outside a coalescing block (see Core::defer_p2p).
  WorkPtr point_to_point(bool is_send, Tensors& tensors, int peer, int tag);

  std::shared_ptr<Core> core_;
  c10::intrusive_ptr<c10d::Store> store_;
  uint64_t monitored_rounds_ = 0;  // monitoredBarrier calls so far (the round's keys)
  uint64_t seq_ = 0;               // the highest coll_seq seen in the flight recorder
  bool coalescing_ = false;
  std::vector<WorkDlpgPtr> coalesced_;
  dlpg_work_t* h_ = nullptr;  // the out-parameter slot() hands out
  bool now_ = false;          // slot_now() handed out no handle: done() completes the Work
  double timeout_s_ = 0;
  // torch's splitGroup calls split once per device type (cpu, cuda) with the same store,
  // and this one backend serves both: the second call returns the first's child.
  c10::intrusive_ptr<c10d::Store> split_store_;
  std::vector<int> split_ranks_;
  c10::intrusive_ptr<c10d::Backend> split_child_;
};

}  // namespace dlpg_torch
