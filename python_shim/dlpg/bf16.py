"""bfloat16 NumPy and CuPy arrays for dlpg, with or without ml_dtypes.

NumPy and CuPy have no bfloat16 dtype of their own, and NumPy's DLPack export refuses
ml_dtypes' bfloat16. dlpg.bf16.view(a) is an object dlpg operations accept as a bfloat16
tensor over the same memory: a is a uint16 array of bfloat16 bit patterns (the only choice
without ml_dtypes) or an ml_dtypes.bfloat16 array. Operations write into a.

    bits = dlpg.bf16.from_float32(x)          # uint16 bit patterns, rounded to nearest even
    g.allreduce(dlpg.bf16.view(bits))          # bits now hold the sum
    total = dlpg.bf16.to_float32(bits)

dlpg.Group also takes ml_dtypes.bfloat16 NumPy/CuPy arrays as they are (it views them here).
The view is the array's own DLPack export with the dtype marked bfloat16, so the producer's
stream ordering, strides, lifetime and deleter are the array's.
"""

import ctypes

__all__ = ["view", "from_float32", "to_float32", "BFloat16View"]

_KDL_UINT = 1
_KDL_BFLOAT = 4


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensorHead(ctypes.Structure):
    """The leading fields of DLTensor (dlpack.h), up to its dtype."""
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32), ("dtype", _DLDataType)]


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _is_array_module(a):
    mod = type(a).__module__ or ""
    return mod.startswith("numpy") or mod.startswith("cupy")


def is_bfloat16_array(a):
    """True for a NumPy or CuPy array whose dtype is ml_dtypes' bfloat16 (JAX and torch
    export bfloat16 through DLPack themselves)."""
    dt = getattr(a, "dtype", None)
    return _is_array_module(a) and getattr(dt, "name", "") == "bfloat16" and dt.itemsize == 2


def _bits_of(a):
    import numpy as np
    if is_bfloat16_array(a):
        return a.view(np.uint16)
    if not _is_array_module(a):
        raise TypeError("dlpg.bf16.view: expected a NumPy or CuPy array, got %s"
                        % type(a).__name__)
    if a.dtype != np.uint16:
        raise TypeError("dlpg.bf16.view: expected uint16 bfloat16 bit patterns or an "
                        "ml_dtypes.bfloat16 array, got dtype %s (dlpg.bf16.from_float32 "
                        "converts floats)" % a.dtype)
    return a


class BFloat16View(object):
    """A bfloat16 DLPack view of a NumPy/CuPy array (see the module docstring)."""

    __slots__ = ("array", "_bits")

    def __init__(self, array):
        self.array = array
        self._bits = _bits_of(array)

    @property
    def shape(self):
        return self._bits.shape

    def __dlpack_device__(self):
        return self._bits.__dlpack_device__()

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        # Consumers of the DLPack 1.0 protocol (torch 2.x) pass max_version, dl_device and
        # copy; the legacy capsule answers all of them (copy=True excepted), and every
        # consumer accepts it.
        if copy:
            raise BufferError("dlpg.bf16.view: copy=True is not supported (the view shares "
                              "the array's memory)")
        here = tuple(self.__dlpack_device__())
        if dl_device is not None and tuple(dl_device) != here:
            raise BufferError("dlpg.bf16.view: the array is on device %s, not %s"
                              % (here, tuple(dl_device)))
        cap = self._bits.__dlpack__() if stream is None else self._bits.__dlpack__(stream=stream)
        head = _DLTensorHead.from_address(_get_pointer(cap, b"dltensor"))
        if head.dtype.code != _KDL_UINT or head.dtype.bits != 16 or head.dtype.lanes != 1:
            raise TypeError("dlpg.bf16: the array exported dtype (code %d, %d bits) instead of "
                            "uint16" % (head.dtype.code, head.dtype.bits))
        head.dtype.code = _KDL_BFLOAT  # the same 16 bits, read as bfloat16
        return cap

    def __repr__(self):
        return "dlpg.bf16.view(%s array of shape %s)" % (type(self.array).__module__,
                                                         tuple(self.shape))


def view(a):
    """A bfloat16 view of a (uint16 bit patterns, or ml_dtypes.bfloat16) for dlpg."""
    return a if isinstance(a, BFloat16View) else BFloat16View(a)


def _xp(a):
    if (type(a).__module__ or "").startswith("cupy"):
        import cupy
        return cupy
    import numpy
    return numpy


def from_float32(x):
    """bfloat16 bit patterns (uint16) of x, rounded to nearest even (NaN stays NaN); a NumPy
    result for NumPy input or lists, CuPy for CuPy."""
    xp = _xp(x)
    f = xp.asarray(x, dtype=xp.float32)
    # ascontiguousarray makes a 0-d array 1-d; the bit patterns keep x's shape.
    u = xp.ascontiguousarray(f).reshape(f.shape).view(xp.uint32)
    rounded = ((u + xp.uint32(0x7FFF) + ((u >> 16) & xp.uint32(1))) >> 16).astype(xp.uint16)
    nan = (u & xp.uint32(0x7FFFFFFF)) > xp.uint32(0x7F800000)
    return xp.where(nan, ((u >> 16) | xp.uint32(0x40)).astype(xp.uint16), rounded)


def to_float32(a):
    """float32 values of bfloat16 data: uint16 bit patterns, an ml_dtypes.bfloat16 array or
    a view()."""
    if isinstance(a, BFloat16View):
        a = a.array
    xp = _xp(a)
    if is_bfloat16_array(a):
        a = a.view(xp.uint16)
    # A uint32 shift (a Python int would widen a 0-d array to int64 under NumPy 1.x's
    # value-based casting, and the view would then change the itemsize).
    return (xp.asarray(a, dtype=xp.uint16).astype(xp.uint32) << xp.uint32(16)).view(xp.float32)
