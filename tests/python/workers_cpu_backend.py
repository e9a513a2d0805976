"""Rank bodies of test_cpu_backend.py: a 2-rank dlpg.Group on NumPy arrays and a 2-rank
torch "dlpg" group on CPU tensors run their collectives, each checked against a reference
computed here from every rank's seeded data, and report which host-memory backend ran them:
the flight record's backend of each collective (dlpg.Group) and the INFO log line of the
group's choice (both). The library's log goes to stderr, so fd 2 is pointed at a file
first; the test sets DLPG_DEBUG=INFO in the environment the ranks inherit."""

import os
import re
import traceback

# The choice's INFO line (core/lines/backend_choice.c): collectives on <devices> tensors run on
# <backend> (<why>).
CHOICE = re.compile(r"collectives on ([a-z_, ]+) tensors run on ([a-z0-9_]+) \((.*)\)")


def _log_to(path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 2)
    os.close(fd)


def choices(path):
    """[(devices, backend, why)] of the INFO lines in a rank's log."""
    with open(path, errors="replace") as f:
        return [m.groups() for m in map(CHOICE.search, f) if m]


def _data(np, seed, r, shape, dtype):
    rng = np.random.default_rng(seed * 1000 + r)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-50, 50, shape).astype(dtype)


def numpy_group(rank, world, url, name, log_path, queue):
    res = {}
    try:
        _log_to(log_path)
        import numpy as np
        import dlpg
        seed = 23
        store = dlpg.Store(url, 60)
        g = dlpg.Group(store, rank, world, timeout=60, name=name)

        def data(r, shape=(7, 5), dtype=np.float64):
            return _data(np, seed, r, shape, dtype)

        def close(got, want, what):
            # Two ranks: a sum of two terms is the same in either order; the tolerance is
            # for a reduction order over more terms, not needed here but harmless.
            if np.issubdtype(want.dtype, np.floating):
                ok = np.allclose(got, want, rtol=1e-12, atol=1e-12)
            else:
                ok = np.array_equal(got, want)
            assert ok, "%s: got %s, want %s" % (what, got, want)

        x = data(rank)
        g.allreduce(x)
        close(x, sum(data(r) for r in range(world)), "allreduce sum float64")
        i = data(rank, (33,), np.int32)
        g.allreduce(i, op="max")
        close(i, np.maximum.reduce([data(r, (33,), np.int32) for r in range(world)]),
              "allreduce max int32")
        b = data(rank, (9,), np.float32)
        g.broadcast(b, root=world - 1)
        close(b, data(world - 1, (9,), np.float32), "broadcast")
        out = np.empty((world, 4, 3))
        g.allgather(data(rank, (4, 3)), out)
        close(out, np.stack([data(r, (4, 3)) for r in range(world)]), "allgather")
        rs = np.empty((6,), np.int64)
        g.reduce_scatter(data(rank, (world * 6,), np.int64), rs)
        full = sum(data(r, (world * 6,), np.int64) for r in range(world))
        close(rs, full[rank * 6:(rank + 1) * 6], "reduce_scatter")
        a2a = np.empty((world * 5,), np.float64)
        g.alltoall(data(rank, (world * 5,)), a2a)
        close(a2a, np.concatenate([data(q, (world * 5,))[rank * 5:(rank + 1) * 5]
                                   for q in range(world)]), "alltoall")
        # A large one: pipelined through the segment's slots on shared memory.
        big = data(rank, (1 << 20,), np.float32)
        g.allreduce(big)
        close(big, sum(data(r, (1 << 20,), np.float32) for r in range(world)), "allreduce 4 MiB")
        g.barrier()
        res["results"] = "ok"
        ops = {}
        for line in g.flight_record():
            f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
            ops.setdefault(f.get("op"), set()).add(f.get("backend"))
        res["flight"] = {k: sorted(v) for k, v in ops.items()}
        g.destroy()
        store.close()
    except Exception:  # noqa: BLE001 - reported to the test.
        res["error"] = traceback.format_exc()
    queue.put((rank, res))


def torch_group(rank, world, init, log_path, queue):
    res = {}
    try:
        _log_to(log_path)
        import torch
        import torch.distributed as dist
        import dlpg_workers
        dlpg_workers.use_backend()
        dlpg_workers.init_torch("dlpg", init, rank, world)
        seed = 29

        def data(r, shape=(5, 3), dtype=torch.float64):
            return dlpg_workers._data(torch, seed, r, shape, dtype, "cpu")

        def close(got, want, what):
            if want.dtype.is_floating_point:
                ok = torch.allclose(got, want, rtol=1e-12, atol=1e-12)
            else:
                ok = torch.equal(got, want)
            assert ok, "%s: got %s, want %s" % (what, got, want)

        x = data(rank)
        dist.all_reduce(x)
        close(x, sum(data(r) for r in range(world)), "all_reduce sum float64")
        m = data(rank, (17,), torch.int64)
        dist.all_reduce(m, op=dist.ReduceOp.MIN)
        close(m, torch.stack([data(r, (17,), torch.int64) for r in range(world)]).min(0).values,
              "all_reduce min int64")
        b = data(rank, (8,), torch.float32)
        dist.broadcast(b, src=world - 1)
        close(b, data(world - 1, (8,), torch.float32), "broadcast")
        outs = [torch.empty(4, 2, dtype=torch.float64) for _ in range(world)]
        dist.all_gather(outs, data(rank, (4, 2)))
        for r in range(world):
            close(outs[r], data(r, (4, 2)), "all_gather[%d]" % r)
        rs = torch.empty(3, dtype=torch.int32)
        dist.reduce_scatter_tensor(rs, data(rank, (world * 3,), torch.int32))
        full = sum(data(r, (world * 3,), torch.int32) for r in range(world))
        close(rs, full[rank * 3:(rank + 1) * 3], "reduce_scatter_tensor")
        a2a = torch.empty(world * 4, dtype=torch.float64)
        dist.all_to_all_single(a2a, data(rank, (world * 4,)))
        close(a2a, torch.cat([data(q, (world * 4,))[rank * 4:(rank + 1) * 4]
                              for q in range(world)]), "all_to_all_single")
        big = data(rank, (1 << 20,), torch.float32)
        dist.all_reduce(big)
        close(big, sum(data(r, (1 << 20,), torch.float32) for r in range(world)),
              "all_reduce 4 MiB")
        dist.barrier()
        res["results"] = "ok"
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        res["error"] = traceback.format_exc()
    queue.put((rank, res))
