"""Ranks of different frameworks -- torch, JAX, CuPy, NumPy -- in one dlpg group.

    python3 examples/cross_framework.py --frameworks torch,numpy,jax,numpy        # CPU
    python3 examples/cross_framework.py --frameworks torch,jax,cupy --device cuda # a GPU each

Every rank meets the others on one dlpg TCP store under one group name ("torch", the name
dlpg's torch backend uses): torch ranks call torch.distributed (init_process_group("dlpg")
with a torch Store over the dlpg store), JAX ranks call dlpg.jax inside jax.jit, NumPy and
CuPy ranks call dlpg.Group. Each rank allreduces, broadcasts, sends and receives float32
and bfloat16 data and checks the results against a NumPy reference computed from every
rank's seeded data. The tests (tests/python/test_cross_framework.py) run these rank bodies.
"""

import argparse
import ctypes
import multiprocessing as mp
import os
import sys
import traceback

import numpy as np

GROUP_NAME = "torch"
# The key torch 1.13's init_process_group counts ranks on (a store-based barrier); ranks of
# other frameworks add themselves too. torch 2.x does not wait on it by default.
TORCH_INIT_BARRIER_KEY = "store_based_barrier_key:1"


# ------------------------------------------------------------------ data and references

def data(seed, r, shape=(4, 5)):
    """Rank r's float32 data (differs by rank and seed)."""
    return np.random.RandomState(seed * 1000 + r).standard_normal(shape).astype(np.float32)


def bf16_bits(x):
    """float32 -> bfloat16 bit patterns (uint16), rounded to nearest even."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_to_f32(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def bf16_round(x):
    return bf16_to_f32(bf16_bits(x))


# ------------------------------------------------------------------ DLPack bf16 for NumPy/CuPy

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class Bf16Array(object):
    """A uint16 NumPy or CuPy array exported through DLPack as bfloat16 (neither library
    has a bfloat16 dtype). The object owns the DLPack structs; keep it alive while dlpg
    uses it (dlpg.Group does, until the operation completes)."""

    def __init__(self, bits):
        self.bits = bits
        cuda = type(bits).__module__.startswith("cupy")
        self._shape = (ctypes.c_int64 * bits.ndim)(*bits.shape)
        self._mt = _DLManagedTensor()
        t = self._mt.dl_tensor
        t.data = bits.data.ptr if cuda else bits.ctypes.data
        t.device = _DLDevice(2 if cuda else 1, bits.device.id if cuda else 0)
        t.ndim = bits.ndim
        t.dtype = _DLDataType(4, 16, 1)  # kDLBfloat, 16 bits
        t.shape = self._shape

    def __dlpack_device__(self):
        t = self._mt.dl_tensor
        return (t.device.device_type, t.device.device_id)

    def __dlpack__(self, stream=None):
        return _capsule_new(ctypes.addressof(self._mt), b"dltensor", None)


# ------------------------------------------------------------------ frameworks

class TorchRank(object):
    """torch.distributed on the "dlpg" backend, with a torch Store over the dlpg store."""

    def __init__(self, store, rank, world, device):
        import datetime
        import torch
        import torch.distributed as dist
        import dlpg.torch  # noqa: F401 - registers the backend
        self.torch, self.dist = torch, dist
        self.device = torch.device("cuda", 0) if device == "cuda" else torch.device("cpu")
        # Keep the Python store object alive: torch 2.x holds only its C++ side, and a
        # Python subclass whose object is gone no longer finds its overrides.
        self.store = torch_store_over(store)
        dist.init_process_group("dlpg", store=self.store, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=60))

    def tensor(self, x, bf16):
        t = self.torch.from_numpy(np.array(x, np.float32))
        return (t.to(self.torch.bfloat16) if bf16 else t).to(self.device)

    def numpy(self, t):
        return t.float().cpu().numpy()

    def allreduce(self, t):
        self.dist.all_reduce(t)
        return t

    def broadcast(self, t, root):
        self.dist.broadcast(t, src=root)
        return t

    def send(self, t, peer):
        self.dist.send(t, dst=peer)

    def recv(self, like, peer):
        t = self.torch.empty_like(like)
        self.dist.recv(t, src=peer)
        return t

    def close(self):
        self.dist.destroy_process_group()


class ArrayRank(object):
    """dlpg.Group on NumPy (CPU) or CuPy (CUDA) arrays; bfloat16 travels as Bf16Array."""

    def __init__(self, store, rank, world, device):
        import dlpg
        store.add(TORCH_INIT_BARRIER_KEY, 1)
        self.g = dlpg.Group(store, rank, world, timeout=60, name=GROUP_NAME)
        if device == "cuda":
            import cupy
            self.xp, self.cuda = cupy, True
        else:
            self.xp, self.cuda = np, False

    def tensor(self, x, bf16):
        x = np.array(x, np.float32)
        if bf16:
            return Bf16Array(self.xp.asarray(bf16_bits(x)))
        return self.xp.asarray(x)

    def numpy(self, t):
        if isinstance(t, Bf16Array):
            return bf16_to_f32(t.bits.get() if self.cuda else t.bits)
        return t.get() if self.cuda else np.asarray(t)

    def _sync(self):
        if self.cuda:  # Bf16Array has no stream of its own: finish CuPy's work first
            self.xp.cuda.Device().synchronize()

    def allreduce(self, t):
        self._sync()
        self.g.allreduce(t)
        self._sync()
        return t

    def broadcast(self, t, root):
        self._sync()
        self.g.broadcast(t, root=root)
        self._sync()
        return t

    def send(self, t, peer):
        self._sync()
        self.g.send(t, peer)
        self._sync()

    def recv(self, like, peer):
        if isinstance(like, Bf16Array):
            t = Bf16Array(self.xp.zeros_like(like.bits))
        else:
            t = self.xp.zeros_like(like)
        self._sync()
        self.g.recv(t, peer)
        self._sync()
        return t

    def close(self):
        self.g.destroy()


class JaxRank(object):
    """dlpg.jax inside jax.jit (CPU platform through Gloo, or CUDA through NCCL)."""

    def __init__(self, store, rank, world, device):
        os.environ["JAX_PLATFORMS"] = "cuda" if device == "cuda" else "cpu"
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        import jax
        import jax.numpy as jnp
        import dlpg.jax as dj
        store.add(TORCH_INIT_BARRIER_KEY, 1)
        dj.init(store, rank=rank, world_size=world, name=GROUP_NAME, timeout=60)
        self.jax, self.jnp, self.dj = jax, jnp, dj
        self._allreduce = jax.jit(dj.allreduce)
        self._broadcast = jax.jit(dj.broadcast, static_argnums=1)
        self._send = jax.jit(dj.send, static_argnums=1)
        self._recv = jax.jit(dj.recv, static_argnums=(0, 1))

    def tensor(self, x, bf16):
        return self.jnp.asarray(np.array(x, np.float32),
                                self.jnp.bfloat16 if bf16 else self.jnp.float32)

    def numpy(self, t):
        return np.asarray(t.astype(self.jnp.float32))

    def allreduce(self, t):
        return self._allreduce(t)

    def broadcast(self, t, root):
        return self._broadcast(t, root)

    def send(self, t, peer):
        self._send(t, peer)

    def recv(self, like, peer):
        return self._recv(self.jax.ShapeDtypeStruct(like.shape, like.dtype), peer)

    def close(self):
        self.dj.finalize()


FRAMEWORKS = {"torch": TorchRank, "numpy": ArrayRank, "cupy": ArrayRank, "jax": JaxRank}


def torch_store_over(store):
    """A torch.distributed Store whose keys live in the dlpg store. torch hands its backend
    a store with a per-group prefix ("0/", "default_pg/0/cpu/", ...): the keys dlpg's own
    group writes ("<prefix>torch/gloo/...", ".../torch/nccl/...", ".../torch/shm/..." and
    core's ".../torch/dlpg/...", where each rank publishes where it runs) lose that prefix
    here, so ranks of other frameworks find them under the plain group name."""
    import torch.distributed as dist

    marks = ["%s/%s" % (GROUP_NAME, part) for part in ("gloo", "nccl", "shm", "dlpg")]

    def plain(key):
        for m in marks:
            i = key.find(m)
            if i > 0 and key[i - 1] == "/":
                return key[i:]
        return key

    def logged(fn):
        # torch turns an exception here into a bare status for dlpg: print it first.
        def call(*args):
            try:
                return fn(*args)
            except Exception:
                traceback.print_exc()
                sys.stderr.flush()
                raise
        return call

    class DlpgBackedStore(dist.Store):
        def __init__(self):
            super().__init__()

        @logged
        def set(self, key, value):
            store.set(plain(key), value if isinstance(value, bytes) else str(value).encode())

        @logged
        def get(self, key):
            return store.get(plain(key))

        @logged
        def add(self, key, delta):
            return store.add(plain(key), delta)

        @logged
        def wait(self, keys, timeout=None):
            t = timeout.total_seconds() if timeout is not None else 0.0
            store.wait([plain(k) for k in keys], t)

        @logged
        def check(self, keys):
            return store.check([plain(k) for k in keys])

        @logged
        def delete_key(self, key):
            return store.delete_key(plain(key))

        def set_timeout(self, timeout):
            pass

    return DlpgBackedStore()


# ------------------------------------------------------------------ one rank

def run_rank(framework, rank, world, url, device, seed):
    """The whole exchange on one rank; returns {check: "ok" | traceback}."""
    import dlpg
    results = {}

    def check(name, fn):
        try:
            fn()
            results[name] = "ok"
        except Exception:  # noqa: BLE001 - reported to the caller
            results[name] = traceback.format_exc()

    store = dlpg.Store(url, 60)
    fw = FRAMEWORKS[framework](store, rank, world, device)

    def close(a, b, bf16, what):
        tol = 2e-2 * world if bf16 else 1e-5
        if not np.allclose(a, b, rtol=tol, atol=tol):
            raise AssertionError("%s on rank %d (%s): got %s expected %s" % (what, rank, framework, a, b))

    for bf16 in (False, True):
        kind = "bf16" if bf16 else "f32"
        src = (lambda r: bf16_round(data(seed, r))) if bf16 else (lambda r: data(seed, r))

        def t_allreduce():
            out = fw.numpy(fw.allreduce(fw.tensor(src(rank), bf16)))
            close(out, sum(src(r) for r in range(world)), bf16, "allreduce " + kind)

        def t_broadcast():
            root = world - 1 if not bf16 else 0
            out = fw.numpy(fw.broadcast(fw.tensor(src(rank) + 7, bf16), root))
            close(out, bf16_round(src(root) + 7) if bf16 else src(root) + 7, bf16, "broadcast " + kind)

        def t_chain():
            # rank r: recv from r-1 and send back, then send to r+1 and receive back:
            # every pair meets in the same order, so there is no cycle.
            msg = lambda a, b: src(100 + a * world + b)  # noqa: E731 - what a sends to b
            like = fw.tensor(np.zeros((4, 5), np.float32), bf16)
            if rank > 0:
                got = fw.numpy(fw.recv(like, rank - 1))
                close(got, msg(rank - 1, rank), bf16, "recv from %d %s" % (rank - 1, kind))
                fw.send(fw.tensor(msg(rank, rank - 1), bf16), rank - 1)
            if rank < world - 1:
                fw.send(fw.tensor(msg(rank, rank + 1), bf16), rank + 1)
                got = fw.numpy(fw.recv(like, rank + 1))
                close(got, msg(rank + 1, rank), bf16, "recv from %d %s" % (rank + 1, kind))

        check("allreduce " + kind, t_allreduce)
        check("broadcast " + kind, t_broadcast)
        check("send/recv " + kind, t_chain)
    check("close", fw.close)
    return results


def rank_entry(framework, rank, world, url, device, seed, queue):
    """multiprocessing target: runs one rank and reports (rank, results)."""
    if device == "cuda":
        os.environ["CUDA_VISIBLE_DEVICES"] = str(rank)
    try:
        res = run_rank(framework, rank, world, url, device, seed)
    except Exception:  # noqa: BLE001 - reported to the caller
        res = {"setup": traceback.format_exc()}
    queue.put((rank, res))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frameworks", default="torch,numpy,torch")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--port", type=int, default=29650)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    fws = a.frameworks.split(",")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = []
    for r, fw in enumerate(fws):
        url = "tcp://127.0.0.1:%d%s" % (a.port, "?serve=1" if r == 0 else "")
        p = ctx.Process(target=rank_entry, args=(fw, r, len(fws), url, a.device, a.seed, q))
        p.start()
        procs.append(p)
    bad = 0
    for _ in fws:
        rank, res = q.get(timeout=300)
        for name, v in sorted(res.items()):
            print("rank %d %-6s %-22s %s" % (rank, fws[rank], name, "ok" if v == "ok" else "FAILED\n" + v))
            bad += v != "ok"
    for p in procs:
        p.join(30)
    print("cross-framework: %s" % ("OK" if bad == 0 else "%d checks FAILED" % bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python_shim"))
    sys.exit(main())
