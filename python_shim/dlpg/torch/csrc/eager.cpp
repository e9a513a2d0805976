// ProcessGroupDlpg::eagerConnectSingleDevice: init_process_group(device_id=...) binds the
// group to one accelerator and asks its backend to connect now rather than at the first
// operation (ProcessGroupNCCL creates its communicator here). libdlpg makes a group's NCCL
// communicator at the first operation on a device, so a one-element all_reduce on that
// device, on its current stream, makes it: init returns with the communicator made (or the
// error naming what failed), and the job's first real collective pays no setup.
#include <ATen/ATen.h>

#include "backend.h"

namespace dlpg_torch {

void ProcessGroupDlpg::eagerConnectSingleDevice(at::Device device) {
  // Host memory has nothing to connect ahead: its connections are made per operation kind
  // at first use, and a collective here would only delay init.
  if (!device.is_cuda()) return;
  TORCH_CHECK(device.has_index(), "dlpg: eager connect needs a device with an index, got ",
              device);
  at::Tensor one = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(device));
  std::vector<at::Tensor> ts{one};
  c10d::AllreduceOptions opts;
  allreduce(ts, opts)->wait();
}

}  // namespace dlpg_torch
