"""`import dlpg.torch` registers the torch.distributed backend "dlpg" (cpu and cuda), so

    torch.distributed.init_process_group("dlpg", ...)

and torchrun work unchanged. The backend is the C++ extension dlpg.torch._C_dlpg (built by
`python3 -m dlpg.build_torch_ext`) when it imports; otherwise the Python backend
(dlpg.torch.process_group), with a one-line warning saying why. DLPG_TORCH_BACKEND=python
picks the Python backend on purpose (no warning). Version differences between torch 1.13 and
2.x live in dlpg.torch._compat (Python) and csrc/compat.h (C++).
"""

import os
import warnings

from . import _compat
from . import rendezvous as _rendezvous
from .options import Options
from .process_group import ProcessGroupDlpg
from .work import DlpgWork

BACKEND_NAME = "dlpg"


def _load_native():
    """(module, None) for the C++ backend, or (None, why not)."""
    choice = os.environ.get("DLPG_TORCH_BACKEND", "").lower()
    if choice == "python":
        return None, None
    try:
        from . import _C_dlpg
    except ImportError as e:
        why = ("the C++ extension is not built (python3 -m dlpg.build_torch_ext builds it)"
               if "_C_dlpg" in str(e) and "No module" in str(e) else
               "the C++ extension does not import (%s; rebuild it with python3 -m "
               "dlpg.build_torch_ext)" % str(e).splitlines()[0])
        return None, why
    from dlpg import _abi
    try:
        _C_dlpg.load_library(_abi.library_path())
    except _abi.LibraryNotFoundError:
        return _C_dlpg, None  # Reported by the first group, like the Python backend does.
    except Exception as e:  # noqa: BLE001 - any failure means: use the Python backend.
        return None, "the C++ extension cannot load libdlpg (%s)" % str(e).splitlines()[0]
    return _C_dlpg, None


_native, _why_not = _load_native()
if _native is None and _why_not:
    if os.environ.get("DLPG_TORCH_BACKEND", "").lower() == "cpp":
        raise ImportError("dlpg.torch: DLPG_TORCH_BACKEND=cpp, but " + _why_not)
    warnings.warn("dlpg.torch: using the slower Python backend: " + _why_not, RuntimeWarning,
                  stacklevel=2)

IMPLEMENTATION = "cpp" if _native is not None else "python"


def create_process_group(store, rank, size, timeout, options=None):
    """A "dlpg" process group on torch's (prefix) store: group rank, size, timeout (a
    timedelta or seconds), options (dlpg.torch.Options, a dict of its fields, or None)."""
    opts = Options.of(options)
    timeout_s = _compat.timeout_seconds(timeout) or 300.0
    if _native is not None:
        from dlpg import _abi
        _native.load_library(_abi.library_path())  # raises LibraryNotFoundError, if missing
        return _native.create(store, int(rank), int(size), timeout_s, opts.name)
    return ProcessGroupDlpg(store, rank, size, timeout_s, name=opts.name)


def _create_extended(backend_options, pg_options):
    """The creator torch calls (extended API: it also hands us pg_options)."""
    o = backend_options
    pg = _rendezvous.create_backend(o, pg_options, _native)  # init_method="dlpg://..."
    if pg is not None:
        return pg
    return create_process_group(o.store, o.group_rank, o.group_size, o.timeout, pg_options)


def register():
    """Register the backend (idempotent); returns True when this call registered it."""
    return _compat.register(BACKEND_NAME, _create_extended)


register()
_rendezvous.register()

__all__ = ["ProcessGroupDlpg", "DlpgWork", "Options", "create_process_group", "register",
           "BACKEND_NAME", "IMPLEMENTATION"]
