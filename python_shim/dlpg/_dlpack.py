"""Borrowing DLPack tensors from any object that has __dlpack__.

The capsule is read with PyCapsule_GetPointer and is NOT consumed (its name stays
"dltensor"), so the capsule's own destructor still runs the producer's deleter. The caller
keeps the returned capsule (and the object) alive until the dlpg operation completes; dlpg
only reads the DLTensor struct during the call and the memory until completion.
"""

import ctypes
import sys

from . import bf16 as _bf16

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
    if stream is None:
        return f()
    return f(stream=1 if stream == 0 else int(stream))


def tensor_pointer(capsule):
    """The DLTensor * inside a "dltensor" capsule (dl_tensor is DLManagedTensor's first
    member, so the managed tensor's address is the DLTensor's)."""
    if not _is_valid(capsule, _NAME):
        raise TypeError("dlpg: expected an unconsumed DLPack capsule named 'dltensor'")
    return _get_pointer(capsule, _NAME)


def borrow(obj, stream=None):
    """(DLTensor address, keep-alive) for obj; keep the second until the work completes."""
    cap = capsule_of(obj, stream)
    return tensor_pointer(cap), (obj, cap)
