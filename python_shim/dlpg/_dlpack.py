"""Borrowing DLPack tensors from any object that has __dlpack__.

Producers of DLPack 1.0 are asked for a versioned capsule ("dltensor_versioned"), which
says whether the memory is read-only; older ones give a legacy "dltensor" capsule. The
capsule is read with PyCapsule_GetPointer and is NOT consumed (its name stays), so the
capsule's own destructor still runs the producer's deleter. The caller
keeps the returned capsule (and the object) alive until the dlpg operation completes; dlpg
only reads the DLTensor struct during the call and the memory until completion.
"""

import ctypes
import sys

from . import bf16 as _bf16
from ._abi import ERR_INVALID_ARGUMENT, DlpgError

# DLDeviceType values used here (dlpack.h).
KDL_CPU = 1
KDL_CUDA = 2
KDL_CUDA_HOST = 3
KDL_CUDA_MANAGED = 13
_CUDA_TYPES = (KDL_CUDA, KDL_CUDA_MANAGED)

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_is_valid.restype = ctypes.c_int
_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]

_NAME = b"dltensor"
_NAME_VERSIONED = b"dltensor_versioned"
_FLAG_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _VersionedHead(ctypes.Structure):
    """DLManagedTensorVersioned (dlpack.h 1.x) up to its DLTensor, which follows."""
    _fields_ = [("version", _Version), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64)]


def _is_bf16_view(obj):
    return isinstance(obj, _bf16.BFloat16View)
_torch_to_dlpack = None


def _torch_tensor_type():
    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None) if torch is not None else None


def is_torch_tensor(obj):
    tt = _torch_tensor_type()
    return tt is not None and isinstance(obj, tt)


def device_of(obj):
    """(DLDeviceType, device id) of obj, without exporting it."""
    if is_torch_tensor(obj):
        d = obj.device
        if d.type == "cuda":
            return KDL_CUDA, d.index if d.index is not None else 0
        return KDL_CPU, 0
    f = getattr(obj, "__dlpack_device__", None)
    if f is None:
        raise TypeError("dlpg: %s has no __dlpack__ / __dlpack_device__; pass a torch, NumPy, "
                        "CuPy or JAX array" % type(obj).__name__)
    dev_type, dev_id = f()
    return int(dev_type), int(dev_id)


def is_cuda(obj):
    return device_of(obj)[0] in _CUDA_TYPES


def default_stream(obj):
    """The stream the producer's pending work on obj is ordered on, as an int handle, or
    None for CPU objects and producers without a notion of a current stream."""
    if not is_cuda(obj):
        return None
    if is_torch_tensor(obj):
        import torch
        return torch.cuda.current_stream(obj.device).cuda_stream
    mod = type(getattr(obj, "array", obj) if _is_bf16_view(obj) else obj).__module__ or ""
    if mod.startswith("cupy"):
        import cupy
        return cupy.cuda.get_current_stream().ptr
    return None


def capsule_of(obj, stream=None):
    """A legacy "dltensor" capsule for obj. For torch tensors the fast to_dlpack path is
    used (no stream synchronisation: the caller orders dlpg on torch's current stream).
    For other CUDA producers, stream (an int handle) is handed to __dlpack__ so that the
    producer orders its pending work before that stream; 0 (the legacy default stream)
    is spelled 1 as the DLPack protocol asks."""
    global _torch_to_dlpack
    if is_torch_tensor(obj):
        if _torch_to_dlpack is None:
            from torch.utils.dlpack import to_dlpack
            _torch_to_dlpack = to_dlpack
        return _torch_to_dlpack(obj.detach() if obj.requires_grad else obj)
    if _bf16.is_bfloat16_array(obj):  # ml_dtypes' bfloat16, which NumPy cannot export
        obj = _bf16.view(obj)
    f = getattr(obj, "__dlpack__", None)
    if f is None:
        raise TypeError("dlpg: %s has no __dlpack__; pass a torch, NumPy, CuPy or JAX array"
                        % type(obj).__name__)
    kw = {} if stream is None else {"stream": 1 if stream == 0 else int(stream)}
    try:
        return f(max_version=(1, 0), **kw)
    except TypeError:  # a producer older than DLPack 1.0 takes no max_version
        return f(**kw)


def tensor_pointer(capsule):
    """(DLTensor *, read-only) of an unconsumed capsule: in a "dltensor" one, dl_tensor is
    DLManagedTensor's first member, so the managed tensor's address is the DLTensor's, and
    whether the memory is read-only is not said (False); in a "dltensor_versioned" one the
    DLTensor follows the version, context, deleter and flags."""
    if _is_valid(capsule, _NAME):
        return _get_pointer(capsule, _NAME), False
    if _is_valid(capsule, _NAME_VERSIONED):
        p = _get_pointer(capsule, _NAME_VERSIONED)
        head = _VersionedHead.from_address(p)
        if head.version.major != 1:
            raise TypeError("dlpg: the producer gave a DLPack %d.%d tensor; dlpg reads 1.x and "
                            "the legacy form" % (head.version.major, head.version.minor))
        return p + ctypes.sizeof(_VersionedHead), bool(head.flags & _FLAG_READ_ONLY)
    raise TypeError("dlpg: expected an unconsumed DLPack capsule named 'dltensor' or "
                    "'dltensor_versioned'")


def _read_only_error(written, why):
    return DlpgError(ERR_INVALID_ARGUMENT,
                     "%s is read-only (%s) and the operation writes into it: pass a writeable "
                     "array" % (written, why))


def borrow(obj, stream=None, written=None):
    """(DLTensor address, keep-alive) for obj; keep the second until the work completes.
    written: how to name obj when the operation writes into it ("dlpg.Group.recv: tensor"),
    which refuses read-only memory (NumPy's writeable=False, DLPack 1.0's read-only flag)
    with DLPG_ERR_INVALID_ARGUMENT before anything is written; None when it is only read."""
    flags = getattr(obj, "flags", None) if written else None
    if flags is not None and getattr(flags, "writeable", True) is False:
        raise _read_only_error(written, "writeable=False")
    cap = capsule_of(obj, stream)
    ptr, read_only = tensor_pointer(cap)
    if written and read_only:
        raise _read_only_error(written, "its DLPack export is flagged read-only")
    return ptr, (obj, cap)
