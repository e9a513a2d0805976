// Everything that differs between the torch versions this extension builds against (Debian's
// 1.13 and 2.x), in one place. The rest of the extension uses only the names below.
//
// 1.13: a backend is a c10d::ProcessGroup subclass; torch uses the creator's result as the
//       group itself; coalescing is startCoalescing() / endCoalescing(std::vector<Work>&).
// 2.x:  a backend is a c10d::Backend subclass that torch wraps in a ProcessGroup per device;
//       coalescing is startCoalescing() / endCoalescing() -> Work; there are the
//       *_tensor_coalesced collectives; c10::Stream::native_handle gives the cudaStream_t.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/version.h>

#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#define DLPG_TORCH_2 1
#else
#define DLPG_TORCH_2 0
#endif

namespace dlpg_torch {

#if DLPG_TORCH_2
using BackendBase = c10d::Backend;
constexpr c10d::OpType kCoalescedOp = c10d::OpType::COALESCED;
#else
using BackendBase = c10d::ProcessGroup;
constexpr c10d::OpType kCoalescedOp = c10d::OpType::UNKNOWN;
#endif

// The coalescing end as the torch version declares it; both forward to endCoalescingWork().
#if DLPG_TORCH_2
#define DLPG_END_COALESCING_DECL c10::intrusive_ptr<c10d::Work> endCoalescing() override
#define DLPG_END_COALESCING_BODY return endCoalescingWork()
#else
#define DLPG_END_COALESCING_DECL \
  void endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& reqs) override
#define DLPG_END_COALESCING_BODY \
  reqs.push_back(endCoalescingWork())
#endif

// The current stream of a CUDA device, and its cudaStream_t, through the device-generic
// interface, so that the extension needs no CUDA headers and builds against CPU-only torch.
inline c10::Stream current_stream(c10::Device device) {
  return c10::impl::getDeviceGuardImpl(device.type())->getStream(device);
}

inline void* native_stream(const c10::Stream& s) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
  return s.native_handle();
#else
  (void)s;
  TORCH_CHECK(false, "dlpg: CUDA tensors need torch >= 2.2 for the C++ backend (this is torch ",
              TORCH_VERSION_MAJOR, ".", TORCH_VERSION_MINOR,
              "); set DLPG_TORCH_BACKEND=python to use the Python backend");
#endif
}

// The Future type of a Work's result (a list of tensors), CUDA-aware when devices is not empty.
inline c10::intrusive_ptr<c10::ivalue::Future> make_future(std::vector<c10::Device> devices) {
  return c10::make_intrusive<c10::ivalue::Future>(
      c10::ListType::create(c10::TensorType::get()), std::move(devices));
}

}  // namespace dlpg_torch
