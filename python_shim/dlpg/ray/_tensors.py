"""Tensors of the Ray backend: where an operation's result is written, scratch buffers and
copies, for any object with __dlpack__ (NumPy, torch, CuPy, JAX).

JAX arrays are immutable and their DLPack export is not flagged read-only, so dlpg would
write into memory JAX considers constant: an operation never writes into one. A JAX array
that receives a result gets a NumPy (CPU) or CuPy (CUDA) buffer instead, and the caller is
handed back a new JAX array on the same device (dlpg.ray's functions and DlpgGroup's methods
return their results for this reason; Ray's own API returns None).
"""

import sys

import numpy as np

from .. import _dlpack


def is_jax(x):
    mod = type(x).__module__ or ""
    return mod.startswith("jax") and "jax" in sys.modules


def is_torch(x):
    return _dlpack.is_torch_tensor(x)


def _cupy():
    try:
        import cupy
    except ImportError:
        raise RuntimeError("dlpg.ray: a CUDA array that is neither torch's nor CuPy's needs "
                           "CuPy for the buffer its result is written to; install cupy")
    return cupy


def view(x):
    """A NumPy (CPU) or CuPy (CUDA) array sharing x's memory (JAX: a read-only one)."""
    if isinstance(x, np.ndarray):
        return x
    if is_torch(x):
        x = x.detach()
    if _dlpack.is_cuda(x):
        return _cupy().from_dlpack(x)
    return np.from_dlpack(x)


def empty(like, count):
    """A flat buffer of count elements of like's dtype, in like's framework and on its
    device (NumPy/CuPy for JAX)."""
    if is_torch(like):
        import torch
        return torch.empty(int(count), dtype=like.dtype, device=like.device)
    v = view(like)
    mod = np if isinstance(v, np.ndarray) else _cupy()
    if mod is not np:
        with mod.cuda.Device(v.device.id):
            return mod.empty(int(count), dtype=v.dtype)
    return np.empty(int(count), dtype=v.dtype)


def block(flat, i, like):
    """Block i (numel(like) elements) of flat, shaped as like."""
    n = numel(like)
    return flat[i * n:(i + 1) * n].reshape(tuple(like.shape))


def numel(x):
    n = 1
    for d in x.shape:
        n *= int(d)
    return n


def copy(dst, src):
    """dst[...] = src (dst writable, not JAX)."""
    if is_torch(dst):
        import torch
        dst.copy_(src if is_torch(src) else torch.from_dlpack(view(src)))
        return
    d = view(dst)
    s = view(src)
    if isinstance(d, np.ndarray):
        host = s if isinstance(s, np.ndarray) else (s.get() if hasattr(s, "get") else s)
        d[...] = np.asarray(host).reshape(d.shape)  # CuPy copies to the host with get()
        return
    cupy = _cupy()
    with d.device:  # CuPy copies from another device (or the host) onto dst's with asarray
        d[...] = cupy.asarray(s).reshape(d.shape)


def target(x, keep=False):
    """Where an operation that writes x's result writes it: x itself, or for a JAX array a
    new NumPy/CuPy array of its shape and dtype (finish() turns it into a JAX array); keep:
    with x's values (the operation writes part of it)."""
    if not is_jax(x):
        return x
    v = view(x)
    mod = np if isinstance(v, np.ndarray) else _cupy()
    return mod.array(v, copy=True) if keep else mod.empty(v.shape, v.dtype)


def finish(x, written):
    """The result the caller sees for x after the operation wrote written (target(x))."""
    if written is x or not is_jax(x):
        return x
    import jax
    devices = list(x.devices())
    return jax.device_put(written, devices[0]) if len(devices) == 1 else jax.numpy.asarray(written)


def prefix(x, n, what):
    """The first n elements of x (flattened, sharing its memory): Ray's n_elements."""
    total = numel(x)
    if n > total:
        raise ValueError("dlpg.ray %s: n_elements=%d but the tensor has %d elements"
                         % (what, n, total))
    if is_torch(x):
        if not x.is_contiguous():
            raise ValueError("dlpg.ray %s: n_elements=%d needs a contiguous tensor" % (what, n))
        return x.view(-1)[:n]
    if is_jax(x):
        return x.reshape(-1)[:n]
    flags = getattr(x, "flags", None)
    if flags is not None and not flags.c_contiguous:
        raise ValueError("dlpg.ray %s: n_elements=%d needs a C-contiguous array" % (what, n))
    return x.reshape(-1)[:n]
