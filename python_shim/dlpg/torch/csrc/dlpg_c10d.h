// The "dlpg" torch.distributed backend in C++: declarations shared by its files.
//
//   api.cpp      the library (dlopen + dlpg_get_api), status checks, the c10d::Store adapter
//   core.cpp     one group's state shared by the backend and its Works: deferred send/recv,
//                parked work handles, tensor borrowing (DLTensor views, contiguous copies)
//   work.cpp     WorkDlpg, the c10d::Work over dlpg work handles
//   backend.cpp  ProcessGroupDlpg (a c10d::Backend, which torch wraps in a ProcessGroup for
//                cpu and cuda): the reducing and gathering collectives, and barrier
//   rooted.cpp   gather, scatter, all_to_all_single and all_to_all
//   blocks.cpp   lists of per-rank tensors as one flat tensor and counts
//   p2p.cpp      send, recv and coalescing
//   split.cpp    split (torch's split_group): a dlpg_group_split child, no new rendezvous
//   monitored.cpp  monitoredBarrier, on the group's rendezvous store
//   surface.cpp  the sequence number, setTimeout
//   sparse.cpp   sparse all_reduce (SUM), as gloo's: gather every rank's entries, coalesce
//   eager.cpp    eagerConnectSingleDevice: a bound device's communicator made at init
//   module.cpp   the Python module (pybind11): create(store, rank, size, timeout_s, library)
//
// Exceptions never cross into libdlpg: every dlpg call returns a status that check() turns
// into a c10::Error naming the function and carrying libdlpg's message.
#pragma once

#include <dlpg/dlpg.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace dlpg_torch {

// The current stream of a CUDA device, and its cudaStream_t, through the device-generic
// interface, so that the extension needs no CUDA headers and builds against CPU-only torch.
inline c10::Stream current_stream(c10::Device device) {
  return c10::impl::getDeviceGuardImpl(device.type())->getStream(device);
}

inline void* native_stream(const c10::Stream& s) { return s.native_handle(); }

// The Future type of a Work's result (a list of tensors), CUDA-aware when devices is not empty.
inline c10::intrusive_ptr<c10::ivalue::Future> make_future(std::vector<c10::Device> devices) {
  return c10::make_intrusive<c10::ivalue::Future>(
      c10::ListType::create(c10::TensorType::get()), std::move(devices));
}

// The loaded library: the function table of libdlpg (never unloaded).
const dlpg_api_t& api();
// Load libdlpg from path (once per process; a second, different path is an error).
void load_library(const std::string& path);
// Throw a c10::Error for a non-OK status: "<what>: <libdlpg's message>".
void check(dlpg_status_t status, const char* what);
// Throw for a failed work handle, with the work's own message.
void check_work(dlpg_status_t status, dlpg_work_t* w);
// A dlpg store whose callbacks call a torch store (the rendezvous store torch hands us).
dlpg_store_t* store_from_torch(c10::intrusive_ptr<c10d::Store> store, double timeout_s);

// A tensor handed to libdlpg: a contiguous view (the tensor itself or a copy) and the
// DLTensor describing it, valid while the Borrowed lives.
struct Borrowed {
  at::Tensor tensor;  // contiguous; what libdlpg reads or writes
  at::Tensor user;    // the caller's tensor, written back from `tensor` when they differ
  DLTensor dl;
  int64_t shape_storage[1];
};

class WorkDlpg;

// One group's state, shared by the backend and by its Works (which may outlive it).
class Core {
 public:
  Core(dlpg_group_t* g, int rank, int size) : g_(g), rank_(rank), size_(size) {}
  ~Core();
  // The group, for an operation: after shutdown() an error in the user's terms (not
  // libdlpg's "group is NULL").
  dlpg_group_t* g() const {
    TORCH_CHECK(g_, "dlpg: this process group was shut down (shutdown() or "
                "destroy_process_group); create a new group for further operations");
    return g_;
  }
  dlpg_group_t* g_or_null() const { return g_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  // Send/recv outside a coalescing block are deferred and issued together as one dlpg
  // batch at the next operation or at a wait/test of any of them, in issue order (an isend
  // then an irecv on both ranks must not reach libdlpg as two separate blocking sends).
  void defer_p2p(bool send, std::shared_ptr<Borrowed> t, int peer, int tag,
                 c10::intrusive_ptr<WorkDlpg> work);
  void flush_p2p();
  bool has_pending_p2p();

  // Work handles whose Work was dropped before completion, with the tensors they use;
  // freed by reap() (at every operation) once complete.
  void park(std::vector<dlpg_work_t*> handles, std::vector<std::shared_ptr<Borrowed>> keep);
  void reap();
  void destroy();
  // What wait() without a timeout waits for, in seconds (0: the group's timeout); set by
  // the backend's setTimeout.
  double wait_timeout() const { return wait_timeout_s_.load(); }
  void set_wait_timeout(double s) { wait_timeout_s_.store(s); }

 private:
  struct PendingP2P {
    bool send;
    std::shared_ptr<Borrowed> t;
    int peer, tag;
    c10::intrusive_ptr<WorkDlpg> work;
  };
  dlpg_group_t* g_;
  int rank_, size_;
  // Counts of pending_ and parked_, read without the lock on every operation's fast path.
  std::atomic<int> npending_{0}, nparked_{0};
  std::atomic<double> wait_timeout_s_{0.0};
  std::mutex mu_;
  std::vector<PendingP2P> pending_;
  std::vector<std::pair<dlpg_work_t*, std::vector<std::shared_ptr<Borrowed>>>> parked_;
};

// A DLTensor view of t for libdlpg (a contiguous copy when t is not contiguous; copy_back
// then writes results into t). Flattened to one dimension: dlpg's rules are on element
// counts, and torch's shapes are the caller's business.
std::shared_ptr<Borrowed> borrow(const at::Tensor& t);

// The dlpg reduce descriptor of a c10d reduce op: PREMUL_SUM carries its factor (the
// double or one-element tensor of its PreMulSumSupplement, as ProcessGroupNCCL reads it);
// throws for ops dlpg has no equivalent of.
dlpg_reduce_desc_t reduce_desc(const c10d::ReduceOp& op, const char* what);

// The reducing collectives with a descriptor: the _ex calls where the loaded library has
// them, else the plain ones (which take every op but PREMUL_SUM; reduce_desc refuses that
// one with such a library).
dlpg_status_t allreduce_desc(dlpg_group_t* g, DLTensor* const* in, DLTensor* const* out,
                             const dlpg_reduce_desc_t& op, void* const* s, dlpg_work_t** w);
dlpg_status_t reduce_desc_call(dlpg_group_t* g, DLTensor* const* in, DLTensor* const* out,
                               const dlpg_reduce_desc_t& op, int root, void* const* s,
                               dlpg_work_t** w);
// Whether the loaded library's table has the rooted and uneven collectives (dlpg_gather ..
// dlpg_reduce_scatter_v, appended together); require_vcoll throws, naming what needs fn.
bool has_vcoll();
void require_vcoll(const char* what, const char* fn);
// Throws unless every tensor of ts has like's dtype and device, naming ts[i] as "<name> i".
void same_kind(const std::vector<at::Tensor>& ts, const at::Tensor& like, const char* what,
               const char* name, const char* like_name);
std::vector<int64_t> numels(const std::vector<at::Tensor>& ts);

dlpg_status_t reduce_scatter_desc(dlpg_group_t* g, DLTensor* const* in, DLTensor* const* out,
                                  const dlpg_reduce_desc_t& op, void* const* s, dlpg_work_t** w);

class WorkDlpg : public c10d::Work {
 public:
  WorkDlpg(std::shared_ptr<Core> core, c10d::OpType type, bool cuda, c10::Device device,
           std::vector<at::Tensor> result);
  ~WorkDlpg() override;

  // Filled while the operation is issued.
  std::vector<dlpg_work_t*> handles;
  std::vector<std::shared_ptr<Borrowed>> keep;  // borrowed tensors (written back on finish)
  std::vector<std::function<void()>> post;      // copies after completion
  std::vector<c10::intrusive_ptr<WorkDlpg>> children;
  bool deferred = false;  // a send/recv waiting in Core's queue
  // A receive's peer (DLPG_ANY_SOURCE for recvAnysource, whose sender its handle tells);
  // -2 for every other operation.
  int peer = -2;
  void issued();          // CUDA: runs the post steps now (they are stream-ordered)
  void fail(std::exception_ptr e);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  bool wait(std::chrono::milliseconds timeout) override;
  void synchronize() override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  void finish(double timeout_s);  // CPU: wait for every handle, then the post steps
  void complete_future();

  std::shared_ptr<Core> core_;
  bool cuda_;
  c10::Device device_;
  std::optional<c10::Stream> stream_;  // CUDA: the stream the operation was enqueued on
  std::vector<at::Tensor> result_;
  std::mutex mu_;
  bool done_ = false;
  std::exception_ptr error_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace dlpg_torch
