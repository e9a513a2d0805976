"""Ranks of different frameworks -- torch, JAX, CuPy, NumPy -- in one dlpg group.

    python3 examples/cross_framework.py --frameworks torch,numpy,jax,numpy        # CPU
    python3 examples/cross_framework.py --frameworks torch,jax,cupy --device cuda # a GPU each
    python3 examples/cross_framework.py --frameworks torch,jax,numpy --jax-ordered true

Every rank joins one group, named NAME, on one dlpg store, by a library call:
    torch:  dist.init_process_group("dlpg", init_method="dlpg://HOST:PORT?name=NAME&serve=0",
                                    rank=r, world_size=n)
            (serve=0: the store is served here, not by torch's rank 0 as dlpg:// otherwise does)
    NumPy:  dlpg.Group(dlpg.Store("tcp://HOST:PORT"), r, n, name=NAME)     (CuPy alike)
    JAX:    dlpg.jax.init("tcp://HOST:PORT", rank=r, world_size=n, name=NAME)
            (--jax-ordered: dlpg.jax.init's ordered, default None)
Each rank allreduces, broadcasts, sends and receives float32 and bfloat16 data (NumPy and
CuPy through dlpg.bf16) and checks the results against a NumPy reference computed from every
rank's seeded data. The tests (tests/python/test_cross_framework.py) run these rank bodies.
"""

import argparse
import multiprocessing as mp
import os
import sys
import traceback

import numpy as np

NAME = "xf"


def data(seed, r, shape=(4, 5)):
    """Rank r's float32 data (differs by rank and seed)."""
    return np.random.RandomState(seed * 1000 + r).standard_normal(shape).astype(np.float32)


def bf16_round(x):
    import dlpg
    return dlpg.bf16.to_float32(dlpg.bf16.from_float32(x))


class TorchRank(object):
    def __init__(self, url, rank, world, device):
        import torch
        import torch.distributed as dist
        import dlpg.torch  # noqa: F401 - registers the backend and dlpg://
        self.torch, self.dist = torch, dist
        self.device = torch.device("cuda", 0) if device == "cuda" else torch.device("cpu")
        # serve=0: this example's parent process serves the store, not rank 0.
        dist.init_process_group("dlpg", init_method=url.replace("tcp://", "dlpg://")
                                + "?name=" + NAME + "&serve=0",
                                rank=rank, world_size=world)

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
    """NumPy (CPU) or CuPy (CUDA) arrays; bfloat16 as uint16 bits viewed by dlpg.bf16."""

    def __init__(self, url, rank, world, device):
        import dlpg
        self.dlpg = dlpg
        self.g = dlpg.Group(dlpg.Store(url), rank, world, name=NAME)
        if device == "cuda":
            import cupy
            self.xp = cupy
        else:
            self.xp = np

    def tensor(self, x, bf16):
        x = self.xp.asarray(np.array(x, np.float32))
        return self.dlpg.bf16.view(self.dlpg.bf16.from_float32(x)) if bf16 else x

    def numpy(self, t):
        if isinstance(t, self.dlpg.bf16.BFloat16View):
            t = self.dlpg.bf16.to_float32(t)
        return t.get() if self.xp is not np else np.asarray(t)

    def allreduce(self, t):
        self.g.allreduce(t)
        return t

    def broadcast(self, t, root):
        self.g.broadcast(t, root=root)
        return t

    def send(self, t, peer):
        self.g.send(t, peer)

    def recv(self, like, peer):
        if isinstance(like, self.dlpg.bf16.BFloat16View):
            t = self.dlpg.bf16.view(self.xp.zeros_like(like.array))
        else:
            t = self.xp.zeros_like(like)
        self.g.recv(t, peer)
        return t

    def close(self):
        self.g.destroy()


class JaxRank(object):
    """dlpg.jax inside jax.jit (CPU platform through Gloo, or CUDA through NCCL)."""

    def __init__(self, url, rank, world, device, ordered=None):
        os.environ["JAX_PLATFORMS"] = "cuda" if device == "cuda" else "cpu"
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        import jax
        import jax.numpy as jnp
        import dlpg.jax as dj
        dj.init(url, rank=rank, world_size=world, name=NAME, ordered=ordered)
        assert dj.ordered() is ordered, (dj.ordered(), ordered)
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


def run_rank(framework, rank, world, url, device, seed, jax_ordered=None):
    """The whole exchange on one rank; returns {check: "ok" | traceback}. jax_ordered: a JAX
    rank's dlpg.jax.init(ordered=...)."""
    results = {}

    def check(name, fn):
        try:
            fn()
            results[name] = "ok"
        except Exception:  # noqa: BLE001 - reported to the caller
            results[name] = traceback.format_exc()

    kw = {"ordered": jax_ordered} if framework == "jax" else {}
    fw = FRAMEWORKS[framework](url, rank, world, device, **kw)

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
                close(fw.numpy(fw.recv(like, rank - 1)), msg(rank - 1, rank), bf16,
                      "recv from %d %s" % (rank - 1, kind))
                fw.send(fw.tensor(msg(rank, rank - 1), bf16), rank - 1)
            if rank < world - 1:
                fw.send(fw.tensor(msg(rank, rank + 1), bf16), rank + 1)
                close(fw.numpy(fw.recv(like, rank + 1)), msg(rank + 1, rank), bf16,
                      "recv from %d %s" % (rank + 1, kind))

        check("allreduce " + kind, t_allreduce)
        check("broadcast " + kind, t_broadcast)
        check("send/recv " + kind, t_chain)
    check("close", fw.close)
    return results


def rank_entry(framework, rank, world, url, device, seed, queue, jax_ordered=None):
    """multiprocessing target: runs one rank and reports (rank, results)."""
    if device == "cuda":
        os.environ["CUDA_VISIBLE_DEVICES"] = str(rank)
    try:
        res = run_rank(framework, rank, world, url, device, seed, jax_ordered)
    except Exception:  # noqa: BLE001 - reported to the caller
        res = {"setup": traceback.format_exc()}
    queue.put((rank, res))


def main():
    import dlpg
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frameworks", default="torch,numpy,torch")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jax-ordered", default="default", choices=["default", "true", "false"],
                    help="the JAX ranks' dlpg.jax.init(ordered=...): None, True or False")
    a = ap.parse_args()
    jax_ordered = {"default": None, "true": True, "false": False}[a.jax_ordered]
    fws = a.frameworks.split(",")
    server = dlpg.Store("tcp://127.0.0.1:0?serve=1")  # the job's store, on a free port
    url = "tcp://127.0.0.1:%d" % server.port
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=rank_entry,
                         args=(fw, r, len(fws), url, a.device, a.seed, q, jax_ordered))
             for r, fw in enumerate(fws)]
    for p in procs:
        p.start()
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
