"""dlpg: a process group over DLPack tensors (Python binding of libdlpg.so).

    import dlpg
    store = dlpg.Store("tcp://127.0.0.1:29600?serve=1")
    g = dlpg.Group(store, rank, world_size)
    g.allreduce(numpy_or_torch_or_cupy_array)

`import dlpg.torch` registers the "dlpg" torch.distributed backend. The library is found
through DLPG_LIBRARY, then beside this package, then the repository's build*/ folders.
"""

from ._abi import (ABI_MAJOR, DlpgError, LibraryNotFoundError, build_info, library_path,
                   reduce_supported, status_name, version)
from ._abi import (AVG, BAND, BOR, BXOR, MAX, MIN, PREMUL_SUM, PROD, SUM,  # noqa: F401
                   ANY_SOURCE)
from ._abi import (OK, ERR_INVALID_ARGUMENT, ERR_UNSUPPORTED, ERR_TIMEOUT, ERR_REMOTE,  # noqa: F401
                   ERR_ABORTED, ERR_SYSTEM, ERR_INTERNAL, STATUS_NAMES)
from .group import Group, Work, reduce_op
from .store import Store
from . import bf16  # noqa: F401 - dlpg.bf16.view(a): bfloat16 NumPy/CuPy arrays



def __getattr__(name):
    # __version__ is read when asked for (dlpg/_version.py says from where), so that a copy
    # that must ask the library for it does not load the library at import.
    if name == "__version__":
        from ._version import version
        return version()
    raise AttributeError("module 'dlpg' has no attribute %r" % name)


__all__ = ["Store", "Group", "Work", "DlpgError", "LibraryNotFoundError", "version",
           "build_info", "library_path", "status_name", "reduce_op", "reduce_supported",
           "ABI_MAJOR", "bf16"]
