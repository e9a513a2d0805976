"""Work-handle lifetime, in one place for dlpg.Work and the torch backend's Work.

A dlpg work handle reads and writes the memory of the tensors it was issued on until it
completes, so whoever drops a handle before completion must keep those tensors (their
DLPack capsules) alive. release() parks such a handle with its keep-alive in a module-level
list; reap(), called before every new operation, frees the parked handles that have since
completed and lets their tensors go.
"""

import ctypes
import sys
import threading

from . import _abi
from ._abi import lib

# (work handle, keep-alive) of handles released while their operation may still run.
_orphans = []
_orphans_lock = threading.Lock()


def test(h, failed_is_done=False):
    """True when the operation of work handle h has completed (successfully or not); a
    failing dlpg_work_test counts as completed only when failed_is_done (reaping)."""
    done = ctypes.c_int()
    if lib.dlpg_work_test(h, ctypes.byref(done)) != _abi.OK:
        return failed_is_done
    return bool(done.value)


def wait(h, timeout_s=0.0):
    """dlpg_work_wait's status (0.0: the group's timeout); raises nothing, so callers can
    tell a timeout of a still-running work from the work's own failure."""
    return lib.dlpg_work_wait(h, float(timeout_s or 0.0))


def finish(h, timeout_s=0.0):
    """Wait for h and return None on success, else the DlpgError naming its failure."""
    try:
        _abi.check(wait(h, timeout_s), work=h)
    except _abi.DlpgError as e:
        return e
    return None


def capturing():
    """True while torch's or CuPy's current stream is being captured into a CUDA graph.
    Testing a CUDA work handle queries its event, which a capture in CUDA's default
    (global) mode forbids: it would invalidate the capture. So nothing is tested then."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing():
        return True
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            s = cupy.cuda.get_current_stream()
            return bool(s.is_capturing())
        except Exception:  # noqa: BLE001 - no device, or an older CuPy: not capturing.
            return False
    return False


def release(handles, alive):
    """Free work handles, or park them with alive (the tensors they use) when alive is not
    None and one of them may still run (or cannot be tested now: capturing())."""
    # Freeing an unfinished CUDA handle queries its event too: park while capturing.
    if capturing() or (alive is not None and not all(test(h) for h in handles)):
        with _orphans_lock:
            _orphans.extend((h, alive) for h in handles)
        return
    for h in handles:
        lib.dlpg_work_free(h)


def reap():
    """Free parked handles whose operation has completed (cheap when none are parked)."""
    if not _orphans or capturing():
        return
    with _orphans_lock:
        keep = []
        for h, alive in _orphans:
            if test(h, failed_is_done=True):
                lib.dlpg_work_free(h)
            else:
                keep.append((h, alive))
        _orphans[:] = keep


def parked():
    """How many handles are parked (for tests)."""
    return len(_orphans)
