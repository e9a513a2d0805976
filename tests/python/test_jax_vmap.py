"""jax.vmap of every dlpg.jax collective: a batched call (one custom call on the stacked
array) equals a Python loop of unbatched calls, and both equal a NumPy reference built from
every rank's seeded random data. Two JAX CPU-platform processes, in the three ordering modes
of dlpg.jax.init, with the batch on axis 0 and on axis 1, eager, under jit and inside a
jitted loop; gather, scatter and alltoallv (single dlpg calls) are checked, batched and
not, where libdlpg implements them (skipped with the reason while it refuses them).
Skipped where jax or libdlpg_xla.so is missing, as test_jax.py."""

import functools
import os
import random
import traceback

import numpy as np
import pytest

from conftest import dlpg_store, run_ranks
from test_jax import _skip_without_jax, assert_ok, data, run_check

WORLD = 2
B = 3  # examples per batch


def _vmap_checks(rank, world, seed, ordered):
    import jax
    import jax.numpy as jnp
    import dlpg.jax as dj

    results = {}
    W = world
    check = functools.partial(run_check, results)

    def close(got, want, what, tol=1e-5):
        got = np.asarray(got, np.float64)
        if got.shape != np.shape(want) or not np.allclose(got, want, rtol=tol, atol=tol):
            raise AssertionError("%s on rank %d: got %s expected %s" % (what, rank, got, want))

    def batches(tag, shape, axis, dtype=np.float32):
        """Every rank's batch: B examples of shape `shape`, stacked on `axis`."""
        return [np.moveaxis(data(seed + tag, r, (B,) + shape, dtype), 0, axis) for r in range(W)]

    def example(x, i, axis):
        return np.take(x, i, axis=axis)

    def both(fn, xs, axis, ref, what, tol=1e-5):
        """fn under vmap (eager and jitted) equals the loop of unbatched jitted calls, and
        the reference ref(i) of example i."""
        x = jnp.asarray(xs[rank])
        got = jax.vmap(fn, in_axes=axis)(x)
        got_jit = jax.jit(jax.vmap(fn, in_axes=axis))(x)
        loop = np.stack([np.asarray(jax.jit(fn)(jnp.asarray(example(xs[rank], i, axis))))
                         for i in range(B)])
        want = np.stack([ref(i) for i in range(B)])
        close(loop, want, what + " (loop of unbatched calls)", tol)
        close(got, loop, what + " (vmap, eager)", tol)
        close(got_jit, loop, what + " (jit of vmap)", tol)

    ex = lambda xs, i, axis: [example(x, i, axis) for x in xs]  # noqa: E731

    def t_allreduce():
        for axis in (0, 1):
            xs = batches(1, (4, 2), axis)
            both(dj.allreduce, xs, axis, lambda i: sum(ex(xs, i, axis)), "allreduce sum")
            both(lambda x: dj.allreduce(x, op="max"), xs, axis,
                 lambda i: np.max(ex(xs, i, axis), axis=0), "allreduce max")

    def t_broadcast():
        for axis in (0, 1):
            xs = batches(2, (5, 2), axis)
            both(lambda x: dj.broadcast(x, root=W - 1), xs, axis,
                 lambda i: ex(xs, i, axis)[W - 1], "broadcast")

    def t_reduce():
        xs = batches(3, (3, 2), 1)
        both(lambda x: dj.reduce(x, root=0), xs, 1,
             lambda i: sum(ex(xs, i, 1)) if rank == 0 else ex(xs, i, 1)[rank], "reduce")

    def t_allgather():
        for axis in (0, 1):
            xs = batches(4, (2, 3), axis)
            both(dj.allgather, xs, axis, lambda i: np.stack(ex(xs, i, axis)), "allgather")

    def t_reduce_scatter():
        for axis in (0, 1):
            xs = batches(5, (2 * W, 3), axis)
            both(dj.reduce_scatter, xs, axis,
                 lambda i: sum(ex(xs, i, axis))[2 * rank:2 * rank + 2], "reduce_scatter")

    def t_alltoall():
        for axis in (0, 1):
            xs = batches(6, (2 * W, 3), axis)
            both(dj.alltoall, xs, axis,
                 lambda i: np.concatenate([e[2 * rank:2 * rank + 2] for e in ex(xs, i, axis)]),
                 "alltoall")

    def t_sendrecv_ring():
        nxt, prv = (rank + 1) % W, (rank - 1) % W
        xs = batches(7, (8,), 0)
        like = jax.ShapeDtypeStruct((8,), jnp.float32)
        both(lambda x: dj.sendrecv(x, like, source=prv, dest=nxt), xs, 0,
             lambda i: xs[prv][i], "sendrecv ring")

    def t_send_batched_recv_stacked():
        # A batched send goes as one message (batch first): the receiver asks for it whole.
        xs = batches(8, (4,), 1)
        if rank == 0:
            jax.block_until_ready(jax.jit(jax.vmap(lambda x: dj.send(x, 1) or x,
                                                   in_axes=1))(jnp.asarray(xs[0])))
        elif rank == 1:
            got = jax.jit(lambda: dj.recv(jax.ShapeDtypeStruct((B, 4), jnp.float32), 0))()
            close(got, np.moveaxis(xs[0], 1, 0), "recv of a batched send")

    def t_grad_under_vmap():
        xs = batches(9, (3,), 0)

        def loss(x):
            return jnp.sum(dj.allreduce(x) ** 2)
        g = jax.jit(jax.vmap(jax.grad(loss)))(jnp.asarray(xs[rank]))
        close(g, 2 * W * sum(xs), "vmap of grad of allreduce", tol=1e-4)

    def t_vmap_in_loop_and_mixed():
        # Batched and unbatched calls in one jitted function, one of them in a loop (the
        # effect in the default mode; refused with ordered=False, as every loop).
        xs = batches(10, (4,), 0)

        def f(x):
            a = jax.vmap(dj.allgather)(x)              # (B, W, 4)
            s = dj.allreduce(x[0])                     # unbatched
            return a, s, jax.vmap(lambda y: dj.broadcast(y, root=0))(x)
        a, s, b = jax.jit(f)(jnp.asarray(xs[rank]))
        close(a, np.stack([np.stack([x[i] for x in xs]) for i in range(B)]), "vmapped allgather")
        close(s, sum(x[0] for x in xs), "unbatched allreduce between")
        close(b, xs[0], "vmapped broadcast")
        if ordered is not False:
            loop = jax.jit(lambda x: jax.lax.fori_loop(
                0, 2, lambda i, y: jax.vmap(dj.allreduce)(y) / W, x))
            close(loop(jnp.asarray(xs[rank])), sum(xs) / W, "vmapped allreduce in a loop")

    for name, fn in sorted(locals().items()):
        if name.startswith("t_"):
            check(name[2:], fn)
    return results


def _rooted_checks(rank, world, seed, ordered):
    """gather, scatter and alltoallv as single dlpg calls, unbatched and under vmap."""
    import jax
    import jax.numpy as jnp
    import dlpg.jax as dj

    results = {}
    W = world
    check = functools.partial(run_check, results)

    def close(got, want, what):
        got = np.asarray(got, np.float64)
        if got.shape != np.shape(want) or not np.allclose(got, want, rtol=1e-6, atol=1e-6):
            raise AssertionError("%s on rank %d: got %s expected %s" % (what, rank, got, want))

    def t_gather():
        for root in range(W):
            xs = [data(seed + root, r, (3, 2)) for r in range(W)]
            y = jax.jit(lambda x: dj.gather(x, root=root))(jnp.asarray(xs[rank]))
            close(y, np.stack(xs) if rank == root else xs[rank], "gather to %d" % root)
            bs = [data(seed + 10 + root, r, (B, 3)) for r in range(W)]
            y = jax.jit(jax.vmap(lambda x: dj.gather(x, root=root)))(jnp.asarray(bs[rank]))
            want = np.stack([np.stack([b[i] for b in bs]) for i in range(B)])
            close(y, want if rank == root else bs[rank], "vmapped gather to %d" % root)

    def t_scatter():
        for root in range(W):
            blocks = data(seed + 20 + root, root, (W, 4))
            x = jnp.asarray(blocks) if rank == root else jax.ShapeDtypeStruct((4,), jnp.float32)
            close(jax.jit(lambda x: dj.scatter(x, root=root))(x) if rank == root
                  else jax.jit(lambda: dj.scatter(x, root=root))(), blocks[rank],
                  "scatter from %d" % root)
            # Batched: root's examples (W, 4) stacked on axis 0; the others pass a batched
            # array of the block's shape.
            bb = data(seed + 30 + root, root, (B, W, 4))
            x = jnp.asarray(bb) if rank == root else jnp.zeros((B, 4), jnp.float32)
            y = jax.jit(jax.vmap(lambda x: dj.scatter(x, root=root)))(x)
            close(y, bb[:, rank], "vmapped scatter from %d" % root)

    def t_alltoallv():
        rs = np.random.RandomState(seed)
        counts = rs.randint(0, 4, size=(W, W))  # counts[i, j]: rows rank i sends to rank j
        xs = [data(seed + 40, r, (int(counts[r].sum()) + 1, 2)) for r in range(W)]
        send = tuple(int(c) for c in counts[rank])
        recv = tuple(int(c) for c in counts[:, rank])
        off = lambda i, j: int(counts[i, :j].sum())  # noqa: E731
        want = np.concatenate([xs[i][off(i, rank):off(i, rank) + counts[i, rank]]
                               for i in range(W)])
        y = jax.jit(lambda x: dj.alltoallv(x, send, recv))(jnp.asarray(xs[rank]))
        close(y, want, "alltoallv %s" % counts.tolist())
        bs = [np.stack([data(seed + 50 + i, r, xs[r].shape) for i in range(B)]) for r in range(W)]
        y = jax.jit(jax.vmap(lambda x: dj.alltoallv(x, send, recv)))(jnp.asarray(bs[rank]))
        want = np.stack([np.concatenate([bs[i][e][off(i, rank):off(i, rank) + counts[i, rank]]
                                         for i in range(W)]) for e in range(B)])
        close(y, want, "vmapped alltoallv %s" % counts.tolist())

    for name, fn in sorted(locals().items()):
        if name.startswith("t_"):
            check(name[2:], fn)
    return results


def _rank(rank, world, url, seed, ordered, body, queue):
    os.environ["JAX_PLATFORMS"] = "cpu"
    try:
        import dlpg.jax as dj
        dj.init(url, rank=rank, world_size=world, timeout=30, ordered=ordered)
        res = body(rank, world, seed, ordered)
        dj.finalize()
    except Exception:  # noqa: BLE001 - reported to the test
        res = {"setup": traceback.format_exc()}
    queue.put((rank, res))


MODES = pytest.mark.parametrize("ordered", [None, True, False], ids=["default", "ordered", "fast"])


@MODES
def test_jax_vmap_matches_a_loop(ordered):
    _skip_without_jax()
    seed = random.randrange(1, 10 ** 6)
    with dlpg_store() as url:
        res = run_ranks(_rank, WORLD, lambda r: (WORLD, url, seed, ordered, _vmap_checks),
                        deadline_s=170)
    assert_ok(res, WORLD, checks=10)


def _skip_unless_implemented(*names):
    from dlpg._jax_group import implemented
    missing = ["dlpg_" + n for n in names if not implemented(n)]
    if missing:
        pytest.skip("libdlpg answers DLPG_ERR_UNSUPPORTED for %s (not implemented in this "
                    "build yet)" % ", ".join(missing))


@MODES
def test_jax_gather_scatter_alltoallv(ordered):
    _skip_without_jax()
    _skip_unless_implemented("gather", "scatter", "alltoallv")
    seed = random.randrange(1, 10 ** 6)
    with dlpg_store() as url:
        res = run_ranks(_rank, WORLD, lambda r: (WORLD, url, seed, ordered, _rooted_checks),
                        deadline_s=170)
    assert_ok(res, WORLD, checks=3)


def _refusal_rank(rank, world, url, seed, ordered, queue):
    """With the single-call forms forced on, each custom call decodes its attributes (the
    count arrays of alltoallv too) and reaches dlpg, whose refusal comes back as the
    computation's error naming the function."""
    os.environ["JAX_PLATFORMS"] = "cpu"
    res = {}
    try:
        import jax
        import jax.numpy as jnp
        import dlpg.jax as dj
        dj.init(url, rank=rank, world_size=world, timeout=30, ordered=ordered)
        calls = {"gather": lambda x: dj.gather(x), "scatter": lambda x: dj.scatter(x[None]),
                 "alltoallv": lambda x: dj.alltoallv(x, (3,), (3,))}
        for name, fn in calls.items():
            dj._HAS[name] = True
            try:
                jax.block_until_ready(jax.jit(fn)(jnp.ones((3, 2), jnp.float32)))
            except Exception as e:  # noqa: BLE001 - the point of the test
                text = str(e)
                ok = "DLPG_ERR_UNSUPPORTED" in text and "dlpg_%s:" % name in text
                res[name] = "ok" if ok else text
            else:
                res[name] = "dlpg_%s ran although libdlpg refuses it" % name
        dj.finalize()
    except Exception:  # noqa: BLE001 - reported to the test
        res["setup"] = traceback.format_exc()
    queue.put((rank, res))


def test_jax_rooted_calls_reach_dlpg_while_unsupported():
    # The handlers of gather, scatter and alltoallv, checked before libdlpg implements them
    # (test_jax_gather_scatter_alltoallv checks their results once it does).
    _skip_without_jax()
    from dlpg._jax_group import implemented
    if all(implemented(n) for n in ("gather", "scatter", "alltoallv")):
        pytest.skip("libdlpg implements dlpg_gather, dlpg_scatter and dlpg_alltoallv: "
                    "test_jax_gather_scatter_alltoallv checks them")
    with dlpg_store() as url:
        res = run_ranks(_refusal_rank, 1, lambda r: (1, url, 0, None), deadline_s=120)
    from dlpg._jax_group import implemented as impl
    for name in ("gather", "scatter", "alltoallv"):
        if impl(name):
            res[0].pop(name, None)
    assert_ok(res, 1, checks=0)
