// A group's state shared by the backend and its Works, and tensor borrowing.
#include "dlpg_c10d.h"

namespace dlpg_torch {

std::shared_ptr<Borrowed> borrow(const at::Tensor& t) {
  TORCH_CHECK(t.layout() == at::kStrided, "dlpg: only dense tensors are supported, got a ",
              t.layout(), " tensor (call .to_dense() first)");
  auto b = std::make_shared<Borrowed>();
  b->user = t;
  // Not contiguous: libdlpg works on a contiguous copy, written back on completion (as
  // Gloo's backend does); copy_back() is the caller's post step.
  b->tensor = t.is_contiguous() ? t : t.contiguous();
  DLTensor& d = b->dl;
  d.data = b->tensor.numel() ? b->tensor.data_ptr() : nullptr;
  if (t.is_cuda()) {
    d.device.device_type = kDLCUDA;
    d.device.device_id = t.get_device();
  } else {
    TORCH_CHECK(t.is_cpu(), "dlpg: tensors must be on cpu or cuda, got ", t.device());
    d.device.device_type = kDLCPU;
    d.device.device_id = 0;
  }
  b->shape_storage[0] = t.numel();
  d.ndim = 1;
  d.shape = b->shape_storage;
  d.strides = nullptr;
  d.byte_offset = 0;
  d.dtype.lanes = 1;
  d.dtype.bits = static_cast<uint8_t>(t.element_size() * 8);
  switch (t.scalar_type()) {
    case at::kHalf: case at::kFloat: case at::kDouble:
      d.dtype.code = kDLFloat; break;
    case at::kBFloat16:
      d.dtype.code = kDLBfloat; break;
    case at::kChar: case at::kShort: case at::kInt: case at::kLong:
      d.dtype.code = kDLInt; break;
    case at::kByte:
      d.dtype.code = kDLUInt; break;
    case at::kBool:
      d.dtype.code = DLPG_DL_BOOL; break;
    case at::kComplexFloat: case at::kComplexDouble:
      d.dtype.code = kDLComplex; break;
    default:
      TORCH_CHECK(false, "dlpg: dtype ", t.scalar_type(), " is not supported");
  }
  return b;
}

namespace {

// Whether the loaded library's table has the reduce descriptor calls (appended after the
// first table: an older libdlpg lacks them).
bool has_reduce_ex() {
  const dlpg_api_t& a = api();
  return a.struct_size >= offsetof(dlpg_api_t, reduce_scatter_ex) + sizeof(a.reduce_scatter_ex);
}

// PREMUL_SUM's factor: a double, or a one-element tensor (read here: dlpg takes a host
// scalar, so a CUDA factor is copied to the host, which waits for its stream).
double premul_factor(const c10d::ReduceOp& op, const char* what) {
  // torch stores only this supplement for PREMUL_SUM (ProcessGroupNCCL casts it the same way).
  // Its older name: torch 2.11 has only that one, 2.13 keeps it as an alias.
  auto* sup = static_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(sup, "dlpg: ", what, ": reduce op PREMUL_SUM has no factor (make it with "
              "torch.distributed._make_nccl_premul_sum(factor))");
  if (!sup->tensor_factor.defined()) return sup->double_factor;
  const at::Tensor& f = sup->tensor_factor;
  TORCH_CHECK(f.numel() == 1 && !f.is_complex(), "dlpg: ", what, ": PREMUL_SUM's factor must "
              "be one real element, got a ", f.scalar_type(), " tensor of ", f.numel(),
              " elements");
  return f.item<double>();
}

}  // namespace

dlpg_reduce_desc_t reduce_desc(const c10d::ReduceOp& op, const char* what) {
  dlpg_reduce_desc_t d{};
  d.struct_size = sizeof d;
  d.scalar = 0.0;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: d.op = DLPG_SUM; break;
    case c10d::ReduceOp::AVG: d.op = DLPG_AVG; break;
    case c10d::ReduceOp::PRODUCT: d.op = DLPG_PROD; break;
    case c10d::ReduceOp::MIN: d.op = DLPG_MIN; break;
    case c10d::ReduceOp::MAX: d.op = DLPG_MAX; break;
    case c10d::ReduceOp::BAND: d.op = DLPG_BAND; break;
    case c10d::ReduceOp::BOR: d.op = DLPG_BOR; break;
    case c10d::ReduceOp::BXOR: d.op = DLPG_BXOR; break;
    case c10d::ReduceOp::PREMUL_SUM:
      TORCH_CHECK(has_reduce_ex(), "dlpg: ", what, ": reduce op PREMUL_SUM needs a libdlpg "
                  "with dlpg_allreduce_ex (the loaded one's table is ", api().struct_size,
                  " bytes)");
      d.op = DLPG_PREMUL_SUM;
      d.scalar = premul_factor(op, what);
      break;
    default:
      TORCH_CHECK(false, "dlpg: ", what, ": reduce op ", static_cast<int>(op.op_),
                  " is not supported; use SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR or "
                  "PREMUL_SUM");
  }
  return d;
}

dlpg_status_t allreduce_desc(dlpg_group_t* g, DLTensor* const* in, DLTensor* const* out,
                             const dlpg_reduce_desc_t& op, void* const* s, dlpg_work_t** w) {
  if (!has_reduce_ex()) return api().allreduce(g, in, out, 1, op.op, s, w);
  return api().allreduce_ex(g, in, out, 1, &op, s, w);
}

dlpg_status_t reduce_desc_call(dlpg_group_t* g, DLTensor* const* in, DLTensor* const* out,
                               const dlpg_reduce_desc_t& op, int root, void* const* s,
                               dlpg_work_t** w) {
  if (!has_reduce_ex()) return api().reduce(g, in, out, 1, op.op, root, s, w);
  return api().reduce_ex(g, in, out, 1, &op, root, s, w);
}

dlpg_status_t reduce_scatter_desc(dlpg_group_t* g, DLTensor* const* in, DLTensor* const* out,
                                  const dlpg_reduce_desc_t& op, void* const* s, dlpg_work_t** w) {
  if (!has_reduce_ex()) return api().reduce_scatter(g, in, out, 1, op.op, s, w);
  return api().reduce_scatter_ex(g, in, out, 1, &op, s, w);
}

Core::~Core() { destroy(); }

void Core::destroy() {
  dlpg_group_t* g = nullptr;
  std::vector<std::pair<dlpg_work_t*, std::vector<std::shared_ptr<Borrowed>>>> parked;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::swap(g, g_);
    parked.swap(parked_);
    nparked_.store(0);
  }
  if (!g) return;
  // Destroying the group waits for its queued operations, so parked work is done after.
  api().group_destroy(g);
  for (auto& p : parked) api().work_free(p.first);
}

void Core::defer_p2p(bool send, std::shared_ptr<Borrowed> t, int peer, int tag,
                     c10::intrusive_ptr<WorkDlpg> work) {
  std::lock_guard<std::mutex> lock(mu_);
  work->deferred = true;
  pending_.push_back(PendingP2P{send, std::move(t), peer, tag, std::move(work)});
  npending_.store(static_cast<int>(pending_.size()));
}

bool Core::has_pending_p2p() { return npending_.load(std::memory_order_relaxed) > 0; }

void Core::flush_p2p() {
  std::vector<PendingP2P> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending.swap(pending_);
    npending_.store(0);
  }
  if (pending.empty()) return;
  const dlpg_api_t& a = api();
  check(a.group_start(g_), "dlpg_group_start");
  for (auto& p : pending) {
    WorkDlpg& w = *p.work;
    w.deferred = false;
    const at::Tensor& t = p.t->tensor;
    void* stream = t.is_cuda() ? native_stream(current_stream(t.device())) : nullptr;
    // CUDA: stream-ordered, no handle (no event to record or query).
    dlpg_work_t* h = nullptr;
    dlpg_work_t** hp = t.is_cuda() ? nullptr : &h;
    dlpg_status_t st = p.send ? a.send(g_, &p.t->dl, p.peer, p.tag, stream, hp)
                              : a.recv(g_, &p.t->dl, p.peer, p.tag, stream, hp);
    try {
      check(st, p.send ? "dlpg_send" : "dlpg_recv");
      if (h) w.handles.push_back(h);
      w.issued();
    } catch (...) {
      w.fail(std::current_exception());
    }
  }
  check(a.group_end(g_), "dlpg_group_end");
}

void Core::park(std::vector<dlpg_work_t*> handles, std::vector<std::shared_ptr<Borrowed>> keep) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto* h : handles) parked_.emplace_back(h, keep);
  nparked_.store(static_cast<int>(parked_.size()));
}

void Core::reap() {
  if (nparked_.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<dlpg_work_t*, std::vector<std::shared_ptr<Borrowed>>>> keep;
  for (auto& p : parked_) {
    int done = 0;
    if (api().work_test(p.first, &done) != DLPG_OK || done) api().work_free(p.first);
    else keep.push_back(std::move(p));
  }
  parked_.swap(keep);
  nparked_.store(static_cast<int>(parked_.size()));
}

}  // namespace dlpg_torch
