"""Rank bodies of test_vcoll.py: dlpg.Group's rooted and uneven collectives on NumPy arrays
against references computed here from every rank's seeded data; reports {check: "ok" |
traceback} through the queue."""

import traceback


def _block(np, seed, key, n, dtype):
    rng = np.random.default_rng([seed, key])
    return (rng.integers(-50, 50, size=n) / 4).astype(dtype)


def vcoll(rank, world, url, seed, q):
    import numpy as np
    import dlpg
    res = {}

    def check(name, fn):
        try:
            fn()
            res[name] = "ok"
        except Exception:  # noqa: BLE001 - reported to the test.
            res[name] = traceback.format_exc()

    g = dlpg.Group(url, rank, world, timeout=60, name="vcoll-%d" % seed)
    W = world
    rng = np.random.default_rng(seed)  # the same on every rank
    m = rng.integers(0, 6, size=(W, W))
    m[0] *= 4  # rank 0 sends four times as much
    m[rng.random((W, W)) < 0.25] = 0  # zero blocks

    def t_gather():
        for root in range(W):
            x = _block(np, seed, 100 + rank, 7, np.float32)
            out = np.full(7 * W, -1, np.float32) if rank == root else None
            g.gather(x, out, root=root)
            if rank == root:
                want = np.concatenate([_block(np, seed, 100 + r, 7, np.float32) for r in range(W)])
                assert np.array_equal(out, want), (out, want)

    def t_scatter():
        for root in range(W):
            x = np.concatenate([_block(np, seed, 200 + r, 5, np.int64) for r in range(W)])
            out = np.zeros(5, np.int64)
            g.scatter(x if rank == root else None, out, root=root)
            assert np.array_equal(out, _block(np, seed, 200 + rank, 5, np.int64))

    def t_allgatherv():
        counts = [int(c) for c in m[:, 0]]
        displs = list(np.cumsum([0] + counts[:-1]) + np.arange(W))  # a gap before each block
        out = np.full(displs[-1] + counts[-1] + 1, -7, np.float64)
        x = _block(np, seed, 300 + rank, counts[rank], np.float64)
        w = g.allgatherv(x, out, counts, displs, async_op=True)
        w.wait()
        for r in range(W):
            got = out[displs[r]:displs[r] + counts[r]]
            assert np.array_equal(got, _block(np, seed, 300 + r, counts[r], np.float64)), r
            assert out[displs[r] - 1] == -7 if displs[r] else True

    def t_alltoallv():
        sc, rc = [int(c) for c in m[rank]], [int(c) for c in m[:, rank]]
        x = np.concatenate([_block(np, seed, 1000 + rank * W + j, sc[j], np.float32)
                            for j in range(W)])
        out = np.zeros(sum(rc), np.float32)
        g.alltoallv(x, sc, out, rc)
        want = np.concatenate([_block(np, seed, 1000 + i * W + rank, rc[i], np.float32)
                               for i in range(W)])
        assert np.array_equal(out, want)

    def t_reduce_scatter_v():
        counts = [int(c) for c in m[0]]
        ins = [_block(np, seed, 2000 + r, sum(counts), np.float64) for r in range(W)]
        out = np.zeros(counts[rank], np.float64)
        g.reduce_scatter_v(ins[rank], out, counts, op="max")
        lo = sum(counts[:rank])
        assert np.array_equal(out, np.max(ins, axis=0)[lo:lo + counts[rank]])
        g.reduce_scatter_v(ins[rank], out, counts, op="premul_sum", scalar=0.5)
        assert np.allclose(out, 0.5 * np.sum(ins, axis=0)[lo:lo + counts[rank]])

    def t_bad_counts():
        try:
            g.allgatherv(np.zeros(1, np.float32), np.zeros(W, np.float32), [1] * (W + 1))
        except dlpg.DlpgError as e:
            assert "counts has %d entries but world_size is %d" % (W + 1, W) in str(e), e
        else:
            raise AssertionError("no error")

    for name, fn in [("gather", t_gather), ("scatter", t_scatter), ("allgatherv", t_allgatherv),
                     ("alltoallv", t_alltoallv), ("reduce_scatter_v", t_reduce_scatter_v),
                     ("bad_counts", t_bad_counts)]:
        check(name, fn)
    g.destroy()
    q.put((rank, res))
