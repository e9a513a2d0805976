"""dlpg.jax with complex arrays (sum, avg, reduce_scatter; moved by allgather and broadcast)
and premul_sum with each rank's own scalar (allreduce, reduce, reduce_scatter), under jit,
against NumPy references built from every rank's seeded random data. Two JAX CPU-platform
processes. Skipped where jax or libdlpg_xla.so is missing, as test_jax.py."""

import functools
import random

import numpy as np
import pytest

from conftest import dlpg_store, run_ranks
from test_jax import _skip_without_jax, assert_ok, data, run_check
from test_jax_vmap import _rank

WORLD = 2


def cdata(seed, r, shape, dtype):
    return (data(seed, r, shape, np.float64) + 1j * data(seed + 7, r, shape, np.float64)).astype(dtype)


def _checks(rank, world, seed, ordered):
    import jax
    import jax.numpy as jnp
    import dlpg.jax as dj

    jax.config.update("jax_enable_x64", True)  # else complex128 arrays become complex64
    results = {}
    W = world
    check = functools.partial(run_check, results)

    def close(got, want, what, tol):
        got = np.asarray(got)
        if got.shape != np.shape(want) or not np.allclose(got, want, rtol=tol, atol=tol):
            raise AssertionError("%s on rank %d: got %s expected %s" % (what, rank, got, want))

    def t_complex():
        for dt, tol in ((np.complex64, 1e-5), (np.complex128, 1e-12)):
            xs = [cdata(seed, r, (5, 3), dt) for r in range(W)]
            x = jnp.asarray(xs[rank])
            close(jax.jit(dj.allreduce)(x), sum(xs), "complex sum %s" % dt.__name__, tol)
            close(jax.jit(lambda v: dj.allreduce(v, op="avg"))(x), sum(xs) / W,
                  "complex avg %s" % dt.__name__, tol)
            bs = [cdata(seed + 1, r, (2 * W, 3), dt) for r in range(W)]
            close(jax.jit(dj.reduce_scatter)(jnp.asarray(bs[rank])),
                  sum(bs)[2 * rank:2 * rank + 2], "complex reduce_scatter", tol)
            close(jax.jit(dj.allgather)(x), np.stack(xs), "complex allgather", tol)
            close(jax.jit(lambda v: dj.broadcast(v, root=1))(x), xs[1], "complex broadcast", tol)
        try:
            dj.allreduce(jnp.asarray(cdata(seed, rank, (2,), np.complex64)), op="max")
        except Exception as e:  # noqa: BLE001 - the refusal must name the dtype
            if "complex64" not in str(e):
                raise AssertionError("complex max refused without naming complex64: %s" % e)
        else:
            raise AssertionError("complex max was not refused")

    def t_premul():
        scalars = [0.5 + r for r in range(W)]
        xs = [data(seed + 2, r, (4, 2)) for r in range(W)]
        want = sum(s * x for s, x in zip(scalars, xs))
        x, s = jnp.asarray(xs[rank]), scalars[rank]
        close(jax.jit(lambda v: dj.allreduce(v, op="premul_sum", scalar=s))(x), want,
              "premul allreduce", 1e-5)
        for root in range(W):
            y = jax.jit(lambda v: dj.reduce(v, op="premul_sum", root=root, scalar=s))(x)
            close(y, want if rank == root else xs[rank], "premul reduce to %d" % root, 1e-5)
        bs = [data(seed + 3, r, (W, 3)) for r in range(W)]
        y = jax.jit(lambda v: dj.reduce_scatter(v, op="premul_sum", scalar=s))(jnp.asarray(bs[rank]))
        close(y, sum(sc * b for sc, b in zip(scalars, bs))[rank:rank + 1], "premul reduce_scatter",
              1e-5)
        for bad, words in ((lambda: dj.allreduce(x, op="premul_sum"), "needs scalar="),
                           (lambda: dj.allreduce(x, scalar=2.0), "only for op premul_sum")):
            try:
                bad()
            except ValueError as e:
                if words not in str(e):
                    raise AssertionError("message lacks %r: %s" % (words, e))
            else:
                raise AssertionError("no ValueError for %r" % words)

    for name, fn in sorted(locals().items()):
        if name.startswith("t_"):
            check(name[2:], fn)
    return results


@pytest.mark.parametrize("ordered", [None, True], ids=["default", "ordered"])
def test_jax_complex_and_premul_sum(ordered):
    _skip_without_jax()
    seed = random.randrange(1, 10 ** 6)
    with dlpg_store() as url:
        res = run_ranks(_rank, WORLD, lambda r: (WORLD, url, seed, ordered, _checks),
                        deadline_s=170)
    assert_ok(res, WORLD, checks=2)
