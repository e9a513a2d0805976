// WorkDlpg: the c10d::Work of the "dlpg" backend.
//
// CPU work waits on its dlpg work handles, then runs its post steps (copies out of flat or
// contiguous buffers). CUDA work was enqueued on the caller's current stream with no dlpg
// handle, so wait() only orders the caller's current stream after it (an event recorded and
// waited on, both legal under CUDA-graph capture), as ProcessGroupNCCL does: the host never
// blocks.
#include <thread>

#include "dlpg_c10d.h"

namespace dlpg_torch {

WorkDlpg::WorkDlpg(std::shared_ptr<Core> core, c10d::OpType type, bool cuda,
                   c10::Device device, std::vector<at::Tensor> result)
    : c10d::Work(core->rank(), type),
      core_(std::move(core)),
      cuda_(cuda),
      device_(device),
      result_(std::move(result)) {
  if (cuda_) stream_ = current_stream(device_);
}

WorkDlpg::~WorkDlpg() {
  if (handles.empty()) return;
  if (done_ || cuda_) {
    for (auto* h : handles) api().work_free(h);
  } else {
    // Unfinished: the tensors must outlive the operation; the group frees it later.
    core_->park(std::move(handles), std::move(keep));
  }
}

void WorkDlpg::issued() {
  if (!cuda_) return;
  // Stream-ordered: the copies follow the operation on the same stream.
  for (auto& p : post) p();
  post.clear();
}

void WorkDlpg::fail(std::exception_ptr e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_) error_ = e;
  done_ = true;
}

void WorkDlpg::finish(double timeout_s) {
  if (deferred) core_->flush_p2p();
  std::lock_guard<std::mutex> lock(mu_);
  if (done_) return;
  for (auto& c : children) {
    c->finish(timeout_s);
    if (!error_ && c->error_) error_ = c->error_;
  }
  for (auto* h : handles) {
    dlpg_status_t st = api().work_wait(h, timeout_s);
    if (st != DLPG_OK && !error_) {
      try {
        check_work(st, h);
      } catch (...) {
        error_ = std::current_exception();
      }
    }
  }
  if (!error_ && !cuda_) {
    try {
      for (auto& p : post) p();
    } catch (...) {
      error_ = std::current_exception();
    }
  }
  post.clear();
  done_ = true;
}

bool WorkDlpg::isCompleted() {
  if (deferred) core_->flush_p2p();
  if (cuda_ || done_) return true;
  for (auto* h : handles) {
    int done = 0;
    if (api().work_test(h, &done) == DLPG_OK && !done) return false;
  }
  for (auto& c : children)
    if (!c->isCompleted()) return false;
  finish(0.0);
  return true;
}

bool WorkDlpg::isSuccess() const { return done_ && !error_; }

std::exception_ptr WorkDlpg::exception() const { return error_; }

int WorkDlpg::sourceRank() const {
  if (peer == -2) return c10d::Work::sourceRank();  // not a receive: torch's own error
  if (peer != DLPG_ANY_SOURCE) return peer;
  TORCH_CHECK(!deferred && handles.size() == 1, "dlpg: the sender of a receive from any "
              "source is known once the receive has completed (wait() first)");
  int src = -1;
  check(api().work_source(handles[0], &src), "dlpg_work_source");
  return src;
}

bool WorkDlpg::wait(std::chrono::milliseconds timeout) {
  if (deferred) core_->flush_p2p();
  if (cuda_ && !error_) {
    for (auto& c : children) c->wait(timeout);
    c10::Stream cur = current_stream(device_);
    if (cur != *stream_) {
      c10::Event ev(device_.type());
      ev.record(*stream_);
      ev.block(cur);
    }
    return true;
  }
  finish(timeout.count() > 0 ? timeout.count() / 1000.0 : core_->wait_timeout());
  if (error_) std::rethrow_exception(error_);
  return true;
}

void WorkDlpg::synchronize() { wait(std::chrono::milliseconds(0)); }

std::vector<at::Tensor> WorkDlpg::result() { return result_; }

void WorkDlpg::complete_future() {
  if (error_) future_->setError(error_);
  else future_->markCompleted(c10::IValue(result_));
}

c10::intrusive_ptr<c10::ivalue::Future> WorkDlpg::getFuture() {
  if (future_) return future_;
  if (deferred) core_->flush_p2p();
  std::vector<c10::Device> devices;
  if (cuda_) devices.push_back(device_);
  future_ = make_future(devices);
  if (cuda_ || done_ || isCompleted()) {
    complete_future();
    return future_;
  }
  // CPU and still running: a thread completes the future (torch's Gloo does the same on
  // its own worker threads).
  c10::intrusive_ptr<WorkDlpg> self = c10::intrusive_ptr<WorkDlpg>::reclaim_copy(this);
  std::thread([self] {
    self->finish(self->core_->wait_timeout());
    self->complete_future();
  }).detach();
  return future_;
}

}  // namespace dlpg_torch
