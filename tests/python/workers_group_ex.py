"""Rank bodies of test_group_ex.py: dlpg.Group's premul_sum (scalar=), complex arrays and
receives from any source, on NumPy arrays, each result checked against a reference computed
here from every rank's seeded data."""

import traceback


def _data(np, seed, r, shape, dtype):
    rng = np.random.default_rng(seed * 1000 + r)
    if np.issubdtype(dtype, np.complexfloating):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _close(np, got, want, what, tol):
    assert got.dtype == want.dtype, "%s: dtype %s, want %s" % (what, got.dtype, want.dtype)
    assert np.allclose(got, want, rtol=tol, atol=tol), "%s: got %s, want %s" % (what, got, want)


def reductions(rank, world, url, seed, queue):
    """premul_sum through allreduce, reduce and reduce_scatter (each rank its own factor),
    complex sum/avg/premul_sum, and the errors of a premul_sum without its scalar."""
    res = {}
    try:
        import numpy as np
        import dlpg
        g = dlpg.Group(dlpg.Store(url, 60), rank, world, timeout=60, name="group-ex")

        def scalar(r):
            return 0.5 + r  # each rank's own factor, as dlpg allows

        for dt, tol in ((np.float32, 1e-5), (np.float64, 1e-12), (np.complex64, 1e-5),
                        (np.complex128, 1e-12)):
            name = np.dtype(dt).name
            x = _data(np, seed, rank, (11, 3), dt)
            g.allreduce(x, op=dlpg.PREMUL_SUM, scalar=scalar(rank))
            want = sum(_data(np, seed, r, (11, 3), dt) * dt(scalar(r)) for r in range(world))
            _close(np, x, want, "allreduce premul_sum " + name, tol)

            out = np.zeros((5,), dt)
            g.reduce(_data(np, seed, rank, (5,), dt), root=1, output=out, op="premul_sum",
                     scalar=scalar(rank))
            if rank == 1:
                want = sum(_data(np, seed, r, (5,), dt) * dt(scalar(r)) for r in range(world))
                _close(np, out, want, "reduce premul_sum " + name, tol)

            rs = np.empty((4,), dt)
            w = g.reduce_scatter(_data(np, seed, rank, (world * 4,), dt), rs,
                                 op=dlpg.PREMUL_SUM, scalar=scalar(rank), async_op=True)
            w.wait()
            full = sum(_data(np, seed, r, (world * 4,), dt) * dt(scalar(r)) for r in range(world))
            _close(np, rs, full[rank * 4:(rank + 1) * 4], "reduce_scatter premul_sum " + name, tol)

        for dt, tol in ((np.complex64, 1e-5), (np.complex128, 1e-12)):
            name = np.dtype(dt).name
            x = _data(np, seed + 1, rank, (300,), dt)
            g.allreduce(x)
            _close(np, x, sum(_data(np, seed + 1, r, (300,), dt) for r in range(world)),
                   "allreduce sum " + name, tol)
            x = _data(np, seed + 2, rank, (7,), dt)
            g.allreduce(x, op="avg")
            _close(np, x, sum(_data(np, seed + 2, r, (7,), dt) for r in range(world)) / world,
                   "allreduce avg " + name, tol)
            b = _data(np, seed + 3, rank, (6,), dt)
            g.broadcast(b, root=world - 1)
            _close(np, b, _data(np, seed + 3, world - 1, (6,), dt), "broadcast " + name, 0)
            out = np.empty((world, 3), dt)
            g.allgather(_data(np, seed + 4, rank, (3,), dt), out)
            _close(np, out, np.stack([_data(np, seed + 4, r, (3,), dt) for r in range(world)]),
                   "allgather " + name, 0)

        errors = {}
        x = np.ones(4, np.float32)
        for what, call in (
                ("no scalar", lambda: g.allreduce(x, op=dlpg.PREMUL_SUM)),
                ("scalar without premul", lambda: g.allreduce(x, op="sum", scalar=2.0)),
                ("reduce no scalar", lambda: g.reduce(x, op="premul_sum")),
                ("reduce_scatter no scalar",
                 lambda: g.reduce_scatter(np.ones(4 * world, np.float32), x, op=dlpg.PREMUL_SUM))):
            try:
                call()
                errors[what] = "no error"
            except ValueError as e:
                errors[what] = str(e)
        # A reduce op complex tensors lack: the library's UNSUPPORTED, naming the dtype.
        try:
            g.allreduce(np.ones(4, np.complex64), op="max")
            errors["complex max"] = "no error"
        except dlpg.DlpgError as e:
            errors["complex max"] = "%s: %s" % (e.status_name, e)
        res["errors"] = errors
        g.barrier()
        g.destroy()
        res["results"] = "ok"
    except Exception:  # noqa: BLE001 - reported to the test.
        res["error"] = traceback.format_exc()
    queue.put((rank, res))


def any_source(rank, world, url, seed, queue):
    """Every rank but 0 sends 3 messages to rank 0 with tag 5 (its own data per message);
    rank 0 receives them with recv(src=None), alternately blocking (the sender returned) and
    async (Work.source), and reports the order in which it saw each sender's messages."""
    res = {}
    try:
        import numpy as np
        import dlpg
        g = dlpg.Group(dlpg.Store(url, 60), rank, world, timeout=60, name="group-any")
        msgs, n = 3, 257
        if rank != 0:
            ws = [g.send(_data(np, seed + k, rank, (n,), np.complex64), 0, tag=5, async_op=True)
                  for k in range(msgs)]
            for w in ws:
                w.wait()
        else:
            seen = {r: 0 for r in range(1, world)}
            for i in range(msgs * (world - 1)):
                t = np.zeros((n,), np.complex64)
                if i % 2:
                    src = g.recv(t, tag=5)
                else:
                    w = g.recv(t, src=None, tag=5, async_op=True)
                    w.wait()
                    src = w.source
                assert 1 <= src < world, src
                _close(np, t, _data(np, seed + seen[src], src, (n,), np.complex64),
                       "message %d of rank %d" % (seen[src], src), 0)
                seen[src] += 1
            res["seen"] = seen
            # A named receive's work tells its peer too.
            w = g.recv(np.zeros(2), 1, tag=6, async_op=True)
        if rank == 1:
            g.send(np.arange(2.0), 0, tag=6)
        if rank == 0:
            w.wait()
            res["named_source"] = w.source
        g.barrier()
        g.destroy()
        res["results"] = "ok"
    except Exception:  # noqa: BLE001 - reported to the test.
        res["error"] = traceback.format_exc()
    queue.put((rank, res))
