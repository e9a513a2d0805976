"""Everything that differs between torch 1.13 and torch 2.x, in one place.

1.13: Backend.register_backend(name, func, extended_api) and _new_process_group_helper
      uses whatever func returns as the process group; a Python subclass of
      torch._C._distributed_c10d.ProcessGroup (c10d's PyProcessGroup trampoline) works.
2.x:  register_backend(name, func, extended_api, devices); the helper builds a
      ProcessGroup and registers func's result as the Backend of each device, except that
      a result which is itself a ProcessGroup subclass is used as the group directly. So
      the same ProcessGroup subclass serves both; only registration and a few names differ.
"""

import inspect

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as c10d

ProcessGroupBase = c10d.ProcessGroup
WorkBase = c10d.Work
TORCH_VERSION = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]
                      if x.isdigit())

# c10d's RedOpType values -> dlpg_reduce_op_t (SUM PROD MIN MAX AVG BAND BOR BXOR = 0..7).
_RED_OP_TO_DLPG = {0: 0, 1: 4, 2: 1, 3: 2, 4: 3, 5: 5, 6: 6, 7: 7}


def red_op_code(reduce_op):
    """c10d RedOpType value of a ReduceOp / RedOpType (both versions have .op or int())."""
    op = getattr(reduce_op, "op", reduce_op)
    try:
        return int(op)
    except TypeError:
        return int(getattr(op, "value"))


def dlpg_reduce_op(reduce_op):
    """dlpg_reduce_op_t for a c10d reduce op, or None when dlpg has no equivalent
    (PREMUL_SUM)."""
    return _RED_OP_TO_DLPG.get(red_op_code(reduce_op))


def register(name, creator):
    """Register creator(backend_options, pg_options) (torch's extended API, the same in 1.13
    and 2.x) as backend name for cpu and cuda."""
    params = inspect.signature(dist.Backend.register_backend).parameters
    if name.upper() in getattr(dist.Backend, "_plugins", {}):
        return False
    if "devices" in params:
        dist.Backend.register_backend(name, creator, extended_api=True, devices=["cpu", "cuda"])
    else:
        dist.Backend.register_backend(name, creator, extended_api=True)
    return True


def make_future(devices):
    """A torch Future; CUDA devices must be named at construction (CUDA-aware futures
    record events on the current streams when completed)."""
    if devices:
        return torch.futures.Future(devices=list(devices))
    return torch.futures.Future()


def timeout_seconds(timeout):
    """Seconds from what Work.wait receives: a timedelta (C++ callers pass 0 for "none"),
    a number, or None. 0 / None mean the group's default."""
    if timeout is None:
        return 0.0
    if hasattr(timeout, "total_seconds"):
        return max(0.0, timeout.total_seconds())
    return max(0.0, float(timeout))


def work_init(work):
    WorkBase.__init__(work)


def pg_init(pg, rank, size):
    ProcessGroupBase.__init__(pg, rank, size)
