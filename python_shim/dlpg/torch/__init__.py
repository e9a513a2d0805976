"""`import dlpg.torch` registers the torch.distributed backend "dlpg" (cpu and cuda), so

    torch.distributed.init_process_group("dlpg", ...)

and torchrun work unchanged (torch >= 2.11). The backend is the C++ extension
dlpg.torch._C_dlpg (csrc/: a c10d Backend, which torch wraps in a ProcessGroup), compiled
once per torch into a cache at the first import (dlpg._torch_load; it says so on one line, or
raises ImportError naming what is missing). The extension dlopens libdlpg and uses only
dlpg_get_api.
"""

import torch.distributed as _dist

from dlpg import _abi, _torch_load

from . import rendezvous as _rendezvous
from .options import Options

BACKEND_NAME = "dlpg"
IMPLEMENTATION = "cpp"  # the only one; kept so callers can still check it

_native = _torch_load.load()
try:
    _native.load_library(_abi.library_path())
except _abi.LibraryNotFoundError:
    pass  # reported by the first group, with every place tried


def create_process_group(store, rank, size, timeout, options=None):
    """A "dlpg" process group on torch's (prefix) store: group rank, size, timeout (a
    timedelta or seconds), options (dlpg.torch.Options, a dict of its fields, or None)."""
    opts = Options.of(options)
    timeout_s = opts.timeout or _timeout_seconds(timeout) or 300.0
    _native.load_library(_abi.library_path())  # raises LibraryNotFoundError, if missing
    return _native.create(store, int(rank), int(size), timeout_s, opts.name, opts.nccl_config)


def _create_extended(backend_options, pg_options):
    """The creator torch calls (extended API: it also hands us pg_options)."""
    o = backend_options
    ranks = list(getattr(o, "global_ranks_in_group", None) or [])
    parent = _default_dlpg_group() if ranks else None
    if parent is not None:
        # A subgroup (new_group, DeviceMesh): torch calls this on its members only, with
        # their ranks in the default group, which is dlpg's; made from it with no rendezvous.
        opts = Options.of(pg_options)
        timeout_s = opts.timeout or _timeout_seconds(o.timeout) or 300.0
        # Without pg_options the child is named "<default group's name>/<its ranks>".
        name = opts.name if pg_options is not None else ""
        return _native.create_subset(parent, [int(r) for r in ranks], timeout_s, name, o.store)
    pg = _rendezvous.create_backend(o, pg_options, _native)  # init_method="dlpg://..."
    if pg is None:
        pg = create_process_group(o.store, o.group_rank, o.group_size, o.timeout, pg_options)
    if not ranks:
        _native.admit_now(pg)  # the default group: see csrc/subset.cpp
    return pg


def _default_dlpg_group():
    """The default group's CPU backend when it is dlpg's, else None."""
    try:
        import torch
        if not _dist.is_initialized():
            return None
        be = _dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    except (RuntimeError, ValueError, AttributeError):
        return None
    return be if isinstance(be, _native.ProcessGroupDlpg) else None


def _timeout_seconds(timeout):
    """Seconds from a timedelta, a number, or None (0: the group's default)."""
    if timeout is None:
        return 0.0
    if hasattr(timeout, "total_seconds"):
        return max(0.0, timeout.total_seconds())
    return max(0.0, float(timeout))


def register():
    """Register the backend (idempotent); returns True when this call registered it."""
    if BACKEND_NAME.upper() in _dist.Backend._plugins:
        return False
    # The extended API: torch hands the creator its backend options (store, ranks, timeout,
    # group id) and the user's pg_options.
    _dist.Backend.register_backend(BACKEND_NAME, _create_extended, extended_api=True,
                                   devices=["cpu", "cuda"])
    return True


register()
_rendezvous.register()

__all__ = ["Options", "create_process_group", "register", "BACKEND_NAME", "IMPLEMENTATION"]
