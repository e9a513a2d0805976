"""The Ray actor of test_ray*.py and its per-rank data. Every rank draws its data from
numpy's generator seeded with (seed, rank), so the test's process computes the references
from the same draws independently of anything the actors or dlpg do."""

import threading
import time

import numpy as np
import ray

N = 6  # elements of the per-rank tensors


def rank_data(seed, rank, tag, n=N):
    """Small integer-valued float32 values: sums, products, min and max are exact."""
    rng = np.random.default_rng([seed, rank, sum(map(ord, tag))])
    return rng.integers(-4, 5, size=n).astype(np.float32)


def to_fw(a, fw):
    if fw == "numpy":
        return np.array(a)
    if fw == "torch":
        import torch
        return torch.from_numpy(np.array(a))
    if fw == "jax":
        import jax.numpy as jnp
        return jnp.asarray(a)
    raise ValueError(fw)


def to_np(x):
    if type(x).__module__.startswith("torch"):
        return x.numpy().copy()
    return np.asarray(x).copy()


def run_ops(group, fw, seed, rank, world):
    """Every operation of dlpg.ray on group; returns {name: numpy result}. NumPy and torch
    go through ray.util.collective's own functions where Ray accepts them (in place), JAX
    through dlpg.ray's (which return the result)."""
    import ray.util.collective as col
    import dlpg.ray as dr
    from ray.util.collective.types import ReduceOp
    jax = fw == "jax"
    out = {}

    def d(tag, n=N):
        return to_fw(rank_data(seed, rank, tag, n), fw)

    for name, op in (("sum", ReduceOp.SUM), ("prod", ReduceOp.PRODUCT),
                     ("min", ReduceOp.MIN), ("max", ReduceOp.MAX)):
        x = d("allreduce-" + name)
        if jax:
            r = dr.allreduce(x, group_name=group, op=op)
            assert type(r).__module__.startswith("jax"), type(r)
        else:
            col.allreduce(x, group_name=group, op=op)
            r = x
        out["allreduce-" + name] = to_np(r)
    col.barrier(group_name=group) if not jax else dr.barrier(group)

    root = world - 1
    x = d("reduce")
    r = dr.reduce(x, dst_rank=root, group_name=group) if jax else \
        (col.reduce(x, dst_rank=root, group_name=group), x)[1]
    out["reduce"] = to_np(r)

    src = 1 % world
    x = d("broadcast")
    r = dr.broadcast(x, src_rank=src, group_name=group) if jax else \
        (col.broadcast(x, src_rank=src, group_name=group), x)[1]
    out["broadcast"] = to_np(r)

    x = d("allgather")
    lst = [to_fw(np.zeros(N, np.float32), fw) for _ in range(world)]
    r = dr.allgather(lst, x, group_name=group) if jax else \
        (col.allgather(lst, x, group_name=group), lst)[1]
    out["allgather"] = np.stack([to_np(t) for t in r])

    ins = [d("reducescatter-%d" % b) for b in range(world)]
    y = to_fw(np.zeros(N, np.float32), fw)
    r = dr.reducescatter(y, ins, group_name=group) if jax else \
        (col.reducescatter(y, ins, group_name=group), y)[1]
    out["reducescatter"] = to_np(r)

    # A chain: even ranks send first, odd ranks receive first.
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    x = d("sendrecv")
    y = to_fw(np.zeros(N, np.float32), fw)
    for step in ((0, 1) if rank % 2 == 0 else (1, 0)):
        if step == 0:
            dr.send(x, nxt, group) if jax else col.send(x, nxt, group_name=group)
        else:
            y = dr.recv(y, prv, group) if jax else (col.recv(y, prv, group_name=group), y)[1]
    out["sendrecv"] = to_np(y)

    # n_elements: the first 3 elements only (dlpg.ray's *_multigpu forms run on the CPU).
    y = to_fw(np.full(N, 7.0, np.float32), fw)
    if rank == 0:
        dr.send_multigpu(d("prefix"), 1, 0, group, n_elements=3)
    elif rank == 1:
        y = dr.recv_multigpu(y, 0, 0, group, n_elements=3)
    out["prefix"] = to_np(y)

    # Extras: gather, scatter, alltoall and the v-forms.
    x = d("gather")
    g = to_fw(np.zeros(N * world, np.float32), fw) if rank == 0 else None
    r = dr.gather(x, g, dst_rank=0, group_name=group)
    out["gather"] = to_np(r) if rank == 0 else None
    y = to_fw(np.zeros(N, np.float32), fw)
    src_in = d("scatter", N * world) if rank == src else None
    out["scatter"] = to_np(dr.scatter(y, src_in, src_rank=src, group_name=group))
    y = to_fw(np.zeros(N * world, np.float32), fw)
    out["alltoall"] = to_np(dr.alltoall(d("alltoall", N * world), y, group_name=group))
    counts = [r_ + 1 for r_ in range(world)]
    y = to_fw(np.zeros(sum(counts), np.float32), fw)
    out["allgatherv"] = to_np(dr.allgatherv(d("allgatherv", counts[rank]), y, counts,
                                            group_name=group))
    sc = [(rank + j) % 3 + 1 for j in range(world)]         # to rank j
    rc = [(i + rank) % 3 + 1 for i in range(world)]         # from rank i
    y = to_fw(np.zeros(sum(rc), np.float32), fw)
    out["alltoallv"] = to_np(dr.alltoallv(d("alltoallv", sum(sc)), sc, y, rc,
                                          group_name=group))
    y = to_fw(np.zeros(counts[rank], np.float32), fw)
    out["reduce_scatter_v"] = to_np(dr.reduce_scatter_v(d("rsv", sum(counts)), y, counts,
                                                        group_name=group))
    return out


@ray.remote(num_cpus=0)
class Worker(object):
    def __init__(self):
        import dlpg.ray as dr
        dr.register()

    def pid(self):
        import os
        return os.getpid()

    def set_timeout(self, seconds):
        import dlpg.ray as dr
        dr.register(timeout=seconds)

    def init_group(self, world, rank, group):
        import ray.util.collective as col
        col.init_collective_group(world, rank, backend="dlpg", group_name=group)

    def run_ops(self, group, fw, seed):
        import ray.util.collective as col
        import dlpg.ray as dr
        g = dr.group(group)  # created here when the driver declared it
        return col.get_rank(group), col.get_collective_group_size(group), \
            run_ops(group, fw, seed, g.rank, g.world_size)

    def allreduce_threads(self, group, seed, threads, rounds):
        """threads threads each issue rounds allreduces on one group at once. Every
        rank's contribution depends on its rank only, so however the ranks' calls pair up
        the result is the same; returns the results seen by every call."""
        import ray.util.collective as col
        import dlpg.ray as dr
        g = dr.group(group)
        results, errors = [], []

        def body():
            try:
                for _ in range(rounds):
                    x = rank_data(seed, g.rank, "threads")
                    col.allreduce(x, group_name=group)
                    results.append(x)
            except Exception as e:  # noqa: BLE001 - reported to the test
                errors.append(repr(e))
        ts = [threading.Thread(target=body) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return errors, results

    def allreduce_timed(self, group, delay=0.0):
        """(seconds, error text or None) of one allreduce, started after delay."""
        import ray.util.collective as col
        time.sleep(delay)
        x = np.ones(N, np.float32)
        t0 = time.monotonic()
        try:
            col.allreduce(x, group_name=group)
            return time.monotonic() - t0, None
        except Exception as e:  # noqa: BLE001 - reported to the test
            return time.monotonic() - t0, "%s: %s" % (type(e).__name__, e)

    def bad_calls(self, group):
        """{case: the message of the error it raised} for calls dlpg.ray refuses."""
        import dlpg.ray as dr
        x = np.zeros(N, np.float32)
        cases = {
            "allgather": lambda: dr.allgather([x], x, group),
            "prefix": lambda: dr.send_multigpu(x, 1, 0, group, n_elements=99),
            "root_tensor": lambda: dr.broadcast_multigpu([x], 0, 3, group),
            "rank": lambda: dr.reduce(x, 5, group),
            "self": lambda: dr.send(x, 0, group),
            # Two CPU tensors as a device list: dlpg takes one CPU tensor per call.
            "multigpu": lambda: dr.allreduce_multigpu([x, x.copy()], group),
        }
        errs = {}
        for name, call in cases.items():
            try:
                call()
                errs[name] = None
            except Exception as e:  # noqa: BLE001 - reported to the test
                errs[name] = str(e)
        return errs

    def destroy(self, group):
        import ray.util.collective as col
        t0 = time.monotonic()
        col.destroy_collective_group(group)
        return time.monotonic() - t0
