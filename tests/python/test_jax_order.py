"""dlpg.jax keeps each rank's collectives in program order, in the three modes of
dlpg.jax.init (ordered=True: an ordered JAX effect; ordered=False: a hidden chain between
the custom calls of one jitted body and JAX's in-order dispatch between computations;
ordered=None, the default: the chain where it suffices, the effect elsewhere, joined). Three JAX
CPU-platform processes (dlpg's Gloo path, which compares sizes across ranks, so a swapped
pair of collectives fails loudly instead of hanging); every result is checked against a
NumPy reference built from every rank's seeded random data. Skipped where jax or
libdlpg_xla.so is missing, as test_jax.py."""

import functools
import os
import random
import re
import traceback

import numpy as np
import pytest

from conftest import dlpg_store, run_ranks
from test_jax import _skip_without_jax, assert_ok, data, run_check

WORLD = 3


def _custom_calls(text):
    """[(target, result names, operands)] of the dlpg custom calls in a lowered module's text,
    in program order."""
    calls = []
    for line in text.splitlines():
        if "custom_call" not in line or "dlpg_" not in line:
            continue
        m = re.match(r'\s*(%[\w.$-]+)(?::(\d+))?\s*=\s*(.*)$', line)
        ops = re.search(r'custom_call"?\s*(?:@[\w.$-]+)?\s*\(([^)]*)\)', line)
        target = re.search(r'dlpg_(\w+)', line)
        assert m and ops and target, "cannot parse: %s" % line
        name, n = m.group(1), int(m.group(2) or 1)
        results = [name] if n == 1 else ["%s#%d" % (name, i) for i in range(n)]
        operands = [o.strip() for o in ops.group(1).split(",") if o.strip()]
        calls.append((target.group(1), results, operands))
    return calls


def _assert_linked(text, expected):
    """Each dlpg call's last operand is the previous dlpg call's last result: XLA cannot
    schedule them in another order."""
    calls = _custom_calls(text)
    assert [c[0] for c in calls] == expected, (calls, text)
    for prev, cur in zip(calls, calls[1:]):
        assert cur[2][-1] == prev[1][-1], "%s does not consume %s's link:\n%s" % (
            cur, prev, text)


def _work(x, m, rounds):
    """Rank-dependent non-collective work: XLA schedules it, and what feeds the collectives,
    differently on each rank. int32 with small values: NumPy gives the same integers."""
    for _ in range(rounds):
        x = (m @ x) % 101
    return x


def _order_checks(rank, world, seed, ordered):
    import jax
    import jax.numpy as jnp
    import dlpg.jax as dj

    results = {}
    W = world
    check = functools.partial(run_check, results)

    def same(got, want, what):
        got = np.asarray(got)
        if got.shape != np.shape(want) or not np.array_equal(got, want):
            raise AssertionError("%s on rank %d: got %s expected %s" % (what, rank, got, want))

    peer = (rank + 1) % W

    def t_links_in_lowered_module():
        like = jax.ShapeDtypeStruct((4,), jnp.float32)

        def f(a, b, c, d):
            dj.send(d, peer)
            return (dj.allreduce(a, op="max"), dj.allreduce(a), dj.broadcast(b, root=W - 1),
                    dj.allgather(c), dj.recv(like, (rank - 1) % W), dj.reduce_scatter(b),
                    dj.alltoall(b))
        args = [jnp.ones((3,)), jnp.ones((2 * W,)), jnp.ones((2, 2)), jnp.ones((4,))]
        text = jax.jit(f).lower(*args).as_text()
        _assert_linked(text, ["send", "allreduce", "allreduce", "broadcast", "allgather",
                              "recv", "reduce_scatter", "alltoall"])

    def t_dispatch_path():
        # Any JAX effect keeps a computation off JAX's C++ dispatch path
        # (pjit._get_fastpath_data); ordered=False must leave none.
        compiled = jax.jit(dj.allreduce).lower(jnp.ones((4,))).compile()
        call = compiled._executable.unsafe_call
        effects = (list(call.ordered_effects), bool(call.has_unordered_effects))
        if ordered:
            assert effects[0] and not effects[1], effects
        else:  # ordered=False, and the default for a call in the jitted body itself
            assert effects == ([], False), effects
        if ordered is None:  # a call in a loop: the default gives that computation the effect
            loop = jax.jit(lambda x: jax.lax.fori_loop(0, 1, lambda i, y: dj.allreduce(y), x))
            call = loop.lower(jnp.ones((4,))).compile()._executable.unsafe_call
            assert list(call.ordered_effects) and not call.has_unordered_effects, (
                list(call.ordered_effects), call.has_unordered_effects)

    def t_nested_calls():
        x = jnp.asarray(data(seed, rank, (5,)))
        xs = [data(seed, r, (5,)) for r in range(W)]
        loop = jax.jit(lambda x: jax.lax.fori_loop(0, 2, lambda i, y: dj.allreduce(y), x))
        inner = jax.jit(lambda y: dj.broadcast(y, root=W - 1))
        nested = jax.jit(lambda x: (inner(x), dj.allreduce(x)))
        if ordered is not False:  # the effect's token runs through both: they run, in order
            np.testing.assert_allclose(np.asarray(loop(x)), W * sum(xs), rtol=1e-5, atol=1e-5)
            b, s = nested(x)
            np.testing.assert_allclose(np.asarray(b), xs[W - 1], rtol=1e-6)
            np.testing.assert_allclose(np.asarray(s), sum(xs), rtol=1e-5, atol=1e-5)
            return
        # ordered=False: a call in a loop body is refused at compile time; one in a nested
        # jit is refused too, unless JAX inlined that function into the body (then linked).
        for fn, inlinable in ((loop, False), (nested, True)):
            try:
                text = fn.lower(x).as_text()
            except Exception as e:  # noqa: BLE001 - the point of the test
                assert "ordered=True" in str(e), str(e)
                continue
            assert inlinable, "a dlpg call in a fori_loop body lowered with ordered=False"
            _assert_linked(text, ["broadcast", "allreduce"])

    def t_chain_then_effect_then_chain():
        # The default mode: calls in the body (chained), a loop (the effect), calls after it
        # (the effect too), on inputs of different sizes fed by rank-dependent work, so that
        # an order that differed between ranks would pair collectives of different sizes
        # (an error on this path) or mix up data. ordered=False refuses the loop.
        if ordered is False:
            return
        m = np.random.RandomState(seed).randint(0, 2, size=(16, 16)).astype(np.int32)
        rounds = [(rank + k) % 4 for k in range(3)]
        rounds_of = [[(r + k) % 4 for k in range(3)] for r in range(W)]

        def f(a, b, c):
            a, b, c = (_work(v, jnp.asarray(m), n) for v, n in zip((a, b, c), rounds))
            s = dj.allreduce(a)
            t = jax.lax.fori_loop(0, 2, lambda i, y: dj.allreduce(y, op="max") + i, b)
            return s, t, dj.broadcast(c, root=W - 1)
        shapes = [(16,), (16, 3), (16, 2)]
        ins = [[_work(data(seed, 10 * k + r, sh, np.int32), m, rounds_of[r][k])
                for k, sh in enumerate(shapes)] for r in range(W)]
        fj = jax.jit(f)
        args = [jnp.asarray(data(seed, 10 * k + rank, sh, np.int32)) for k, sh in enumerate(shapes)]
        if ordered is None:
            text = fj.lower(*args).as_text()
            assert text.count("dlpg_link") == 1, text
        s, t, b = fj(*args)
        same(s, sum(ins[r][0] for r in range(W)), "allreduce before the loop")
        want = np.max([ins[r][1] for r in range(W)], axis=0)
        want = np.max([want] * W, axis=0) + 1  # second iteration: every rank holds want
        same(t, want, "allreduce max in the loop")
        same(b, ins[W - 1][2], "broadcast after the loop")

    def t_reused_trace_is_refused():
        # The default mode's one refusal: a jitted function traced on its own first
        # (chained), then called inside a loop, where JAX reuses that first trace.
        if ordered is not None:
            return
        gj = jax.jit(lambda y: dj.allreduce(y))
        x = jnp.asarray(data(seed, rank, (3,)))
        gj(x)
        loop = jax.jit(lambda x: jax.lax.fori_loop(0, 1, lambda i, y: gj(y), x))
        try:
            loop.lower(x).as_text()
        except Exception as e:  # noqa: BLE001 - the point of the test
            assert "ordered=True" in str(e), str(e)
        else:  # JAX traced it again: then it must carry the effect
            call = loop.lower(x).compile()._executable.unsafe_call
            assert list(call.ordered_effects), "a reused chained trace compiled in a loop"

    def t_rank_dependent_programs():
        # The same collectives in the same order on every rank, on independent inputs of
        # different sizes, fed by rank-dependent amounts of work: a reordering on one rank
        # pairs collectives of different sizes or kinds (an error on this path) or mixes
        # up data (wrong results), both caught here.
        m = np.random.RandomState(seed).randint(0, 2, size=(16, 16)).astype(np.int32)
        shapes = [(16,), (16, 3), (16, 5), (16, 2), (16, 4)]
        rounds = [(rank * 2 + k) % 5 for k in range(5)]
        rounds_of = [[(r * 2 + k) % 5 for k in range(5)] for r in range(W)]

        def f(a, b, c, d, e):
            a, b, c, d, e = (_work(v, jnp.asarray(m), n) for v, n in zip((a, b, c, d, e), rounds))
            return (dj.allreduce(a), dj.broadcast(b, root=W - 1), dj.allreduce(c, op="max"),
                    dj.broadcast(d, root=0), dj.allgather(e))
        fj = jax.jit(f)
        for it in range(3):
            ins = [[_work(data(seed + it, 10 * k + r, s, np.int32), m, rounds_of[r][k])
                    for k, s in enumerate(shapes)] for r in range(W)]
            got = fj(*[jnp.asarray(data(seed + it, 10 * k + rank, s, np.int32))
                       for k, s in enumerate(shapes)])
            want = (sum(ins[r][0] for r in range(W)), ins[W - 1][1],
                    np.max([ins[r][2] for r in range(W)], axis=0), ins[0][3],
                    np.stack([ins[r][4] for r in range(W)]))
            for i, (g, w) in enumerate(zip(got, want)):
                same(g, w, "iteration %d, collective %d" % (it, i))

    def t_many_dispatches_in_order():
        # Separately jitted collectives dispatched back to back without waiting: the same
        # seeded plan on every rank, random data, checked once all are dispatched.
        rs = np.random.RandomState(seed)
        fns = {"sum": jax.jit(dj.allreduce), "max": jax.jit(lambda x: dj.allreduce(x, "max")),
               "gather": jax.jit(dj.allgather)}
        for root in range(W):
            fns["bcast%d" % root] = jax.jit(lambda x, root=root: dj.broadcast(x, root=root))
        kinds = sorted(fns)
        shapes = [(5,), (64,), (3, 7), (1 << 14,)]
        plan = [(kinds[rs.randint(len(kinds))], shapes[rs.randint(len(shapes))])
                for _ in range(60)]
        outs = [fns[k](jnp.asarray(data(seed + i, rank, s, np.int32)))
                for i, (k, s) in enumerate(plan)]
        for i, ((k, s), y) in enumerate(zip(plan, outs)):
            xs = [data(seed + i, r, s, np.int32) for r in range(W)]
            if k == "sum":
                want = sum(xs)
            elif k == "max":
                want = np.max(xs, axis=0)
            elif k == "gather":
                want = np.stack(xs)
            else:
                want = xs[int(k[len("bcast"):])]
            same(y, want, "dispatch %d (%s %s)" % (i, k, s))

    def t_unused_result_still_runs():
        # Rank 0 uses the result, the others drop it: if JAX removed the call where the
        # result is unused, rank 0's allreduce would wait for them and time out.
        x = jnp.asarray(data(seed, rank, (6,), np.int32))
        if rank == 0:
            f = jax.jit(lambda x: dj.allreduce(x) * 0 + x + 1)
        else:
            f = jax.jit(lambda x: (dj.allreduce(x), x + 1)[1])
        same(f(x), np.asarray(x) + 1, "x + 1")
        y = jax.jit(dj.allreduce)(x)
        same(y, sum(data(seed, r, (6,), np.int32) for r in range(W)), "the allreduce after")

    for name, fn in sorted(locals().items()):
        if name.startswith("t_"):
            check(name[2:], fn)
    return results


def _order_rank(rank, world, url, seed, ordered, queue):
    os.environ["JAX_PLATFORMS"] = "cpu"
    try:
        import dlpg.jax as dj
        dj.init(url, rank=rank, world_size=world, timeout=30, ordered=ordered)
        assert dj.ordered() is ordered
        res = _order_checks(rank, world, seed, ordered)
        dj.finalize()
    except Exception:  # noqa: BLE001 - reported to the test
        res = {"setup": traceback.format_exc()}
    queue.put((rank, res))


@pytest.mark.parametrize("ordered", [None, True, False], ids=["default", "ordered", "fast"])
def test_jax_program_order(ordered):
    _skip_without_jax()
    seed = random.randrange(1, 10 ** 6)
    with dlpg_store() as url:
        res = run_ranks(_order_rank, WORLD, lambda r: (WORLD, url, seed, ordered),
                        deadline_s=170)
    assert_ok(res, WORLD, checks=6)
