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

dlpg_reduce_op_t reduce_op(const c10d::ReduceOp& op, const char* what) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return DLPG_SUM;
    case c10d::ReduceOp::AVG: return DLPG_AVG;
    case c10d::ReduceOp::PRODUCT: return DLPG_PROD;
    case c10d::ReduceOp::MIN: return DLPG_MIN;
    case c10d::ReduceOp::MAX: return DLPG_MAX;
    case c10d::ReduceOp::BAND: return DLPG_BAND;
    case c10d::ReduceOp::BOR: return DLPG_BOR;
    case c10d::ReduceOp::BXOR: return DLPG_BXOR;
    default:
      TORCH_CHECK(false, "dlpg: ", what, ": reduce op ", static_cast<int>(op.op_),
                  " (PREMUL_SUM) is not supported; use SUM, AVG, PRODUCT, MIN, MAX, BAND, "
                  "BOR or BXOR");
  }
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
