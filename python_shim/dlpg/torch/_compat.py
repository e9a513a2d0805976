"""What differs between torch 1.13 and torch 2.x on the Python side of the backend (the C++
side's differences are in csrc/compat.h): how a backend is registered, and the timeout
torch hands the creator."""

import inspect

import torch.distributed as dist


def register(name, creator):
    """Register creator(backend_options, pg_options) (torch's extended API, the same in 1.13
    and 2.x) as backend name for cpu and cuda; 2.x also takes the devices."""
    params = inspect.signature(dist.Backend.register_backend).parameters
    if name.upper() in getattr(dist.Backend, "_plugins", {}):
        return False
    if "devices" in params:
        dist.Backend.register_backend(name, creator, extended_api=True, devices=["cpu", "cuda"])
    else:
        dist.Backend.register_backend(name, creator, extended_api=True)
    return True


def timeout_seconds(timeout):
    """Seconds from a timedelta, a number, or None (0: the group's default)."""
    if timeout is None:
        return 0.0
    if hasattr(timeout, "total_seconds"):
        return max(0.0, timeout.total_seconds())
    return max(0.0, float(timeout))
