"""Rank body of test_torch_vcoll: the rooted and uneven collectives of torch.distributed on a
"dlpg" group (each one native dlpg call), on random per-rank data with uneven splits, zero
blocks included, against a "gloo" group over the same ranks where Gloo accepts the form, and
against references computed here from every rank's seeded data everywhere; then split sizes
that disagree across ranks, which must fail on every rank naming both ranks."""

import os
import traceback

from dlpg_workers import _data, init_torch, use_backend


def torch_vcoll(rank, world, init, cpu_backend, seed, queue):
    res = {}
    try:
        # Read once, when the first group is made: the same on every rank.
        os.environ["DLPG_CPU_BACKEND"] = cpu_backend
        import numpy as np
        import torch
        import torch.distributed as dist
        use_backend()
        init_torch("gloo", init, rank, world)
        dg = dist.new_group(backend="dlpg")
        gg = dist.new_group(backend="gloo")
    except Exception:  # noqa: BLE001
        queue.put((rank, {"setup": traceback.format_exc()}))
        return
    W = world
    rng = np.random.default_rng(seed)  # the same on every rank
    m = rng.integers(0, 6, size=(W, W))  # m[i, j]: rows rank i sends rank j
    m[0] *= 4  # rank 0 sends four times as much
    m[rng.random((W, W)) < 0.25] = 0
    m[0, W - 1] = 0  # at least one empty block
    m = [[int(x) for x in row] for row in m]

    def data(key, shape, dtype=torch.float64):
        return _data(torch, seed, key, shape, dtype, "cpu")

    def same(a, b, what, exact=True):
        if isinstance(a, (list, tuple)):
            assert len(a) == len(b), (what, len(a), len(b))
            for i, (x, y) in enumerate(zip(a, b)):
                same(x, y, "%s[%d]" % (what, i), exact)
            return
        assert a.shape == b.shape and a.dtype == b.dtype, (what, a.shape, b.shape, a.dtype, b.dtype)
        ok = torch.equal(a, b) if exact else torch.allclose(a, b, rtol=1e-12, atol=1e-12)
        if not ok:
            raise AssertionError("%s: got %s, want %s" % (what, a, b))

    def check(name, fn):
        try:
            fn()
            res[name] = "ok"
        except Exception:  # noqa: BLE001 - reported to the test.
            res[name] = traceback.format_exc()

    def send_of(i):  # rank i's all_to_all_single input: its blocks to ranks 0..W-1
        return data(1000 + i, (sum(m[i]), 3))

    def block(i, j):  # rows of rank i's input for rank j
        lo = sum(m[i][:j])
        return send_of(i)[lo:lo + m[i][j]]

    def t_a2a_single():
        ins, outs = [m[rank][j] for j in range(W)], [m[i][rank] for i in range(W)]
        want = torch.cat([block(i, rank) for i in range(W)])
        got = {}
        for name, g in (("dlpg", dg), ("gloo", gg)):
            out = torch.full((sum(outs), 3), -1.0, dtype=torch.float64)
            w = dist.all_to_all_single(out, send_of(rank), outs, ins, group=g, async_op=True)
            w.wait()
            got[name] = out
        same(got["dlpg"], want, "dlpg vs reference")
        same(got["dlpg"], got["gloo"], "dlpg vs gloo")
        # The future form, with int32 and explicit even splits (through dlpg_alltoallv).
        x = data(2000 + rank, (2 * W, 2), torch.int32)
        out = torch.empty_like(x)
        fut = dist.all_to_all_single(out, x, [2] * W, [2] * W, group=dg,
                                     async_op=True).get_future()
        got = fut.wait()[0]
        same(got, torch.cat([data(2000 + i, (2 * W, 2), torch.int32)[2 * rank:2 * rank + 2]
                             for i in range(W)]), "even splits")

    def t_a2a_list():
        # Gloo refuses lists of different sizes (torch's NCCL backend takes them).
        want = [block(i, rank) for i in range(W)]
        ins = [block(rank, j).clone() for j in range(W)]
        outs = [torch.full((m[i][rank], 3), -1.0, dtype=torch.float64) for i in range(W)]
        dist.all_to_all(outs, ins, group=dg)
        same(outs, want, "separate tensors")
        # Pieces of one tensor each side: read and written in place.
        big = torch.full((sum(m[i][rank] for i in range(W)), 3), -1.0, dtype=torch.float64)
        outs = list(big.split([m[i][rank] for i in range(W)]))
        dist.all_to_all(outs, list(send_of(rank).split(m[rank])), group=dg)
        same(big, torch.cat(want), "adjacent pieces")

    def t_all_gather_uneven():
        rows = [m[r][0] for r in range(W)]  # zero for some ranks
        x = data(3000 + rank, (rows[rank], 2))
        want = [data(3000 + r, (rows[r], 2)) for r in range(W)]
        outs = [torch.full((rows[r], 2), -1.0, dtype=torch.float64) for r in range(W)]
        dist.all_gather(outs, x, group=dg)
        same(outs, want, "separate tensors")
        big = torch.full((sum(rows), 2), -1.0, dtype=torch.float64)
        w = dist.all_gather(list(big.split(rows)), x, group=dg, async_op=True)
        w.get_future().wait()
        same(big, torch.cat(want), "adjacent pieces")

    def t_gather():
        for root in range(W):
            x = data(4000 + rank, (3, 2), torch.int64)
            got = {}
            for name, g in (("dlpg", dg), ("gloo", gg)):
                outs = ([torch.full((3, 2), -1, dtype=torch.int64) for _ in range(W)]
                        if rank == root else None)
                dist.gather(x, outs, dst=root, group=g)
                got[name] = outs
            if rank == root:
                same(got["dlpg"], [data(4000 + r, (3, 2), torch.int64) for r in range(W)],
                     "root %d vs reference" % root)
                same(got["dlpg"], got["gloo"], "root %d vs gloo" % root)
        big = torch.zeros(W * 5) if rank == 0 else None
        dist.gather(data(4100 + rank, (5,), torch.float32), list(big.split(5)) if big is not None
                    else None, dst=0, group=dg)
        if rank == 0:
            same(big, torch.cat([data(4100 + r, (5,), torch.float32) for r in range(W)]),
                 "adjacent outputs")

    def t_scatter():
        for root in range(W):
            ins = [data(5000 + 10 * root + r, (2, 3)) for r in range(W)]
            got = {}
            for name, g in (("dlpg", dg), ("gloo", gg)):
                out = torch.full((2, 3), -1.0, dtype=torch.float64)
                dist.scatter(out, ins if rank == root else None, src=root, group=g)
                got[name] = out
            same(got["dlpg"], ins[rank], "root %d vs reference" % root)
            same(got["dlpg"], got["gloo"], "root %d vs gloo" % root)
        src = data(5100, (W * 4,), torch.int16)
        out = torch.empty(4, dtype=torch.int16)
        dist.scatter(out, list(src.split(4)) if rank == W - 1 else None, src=W - 1, group=dg)
        same(out, src[4 * rank:4 * rank + 4], "adjacent inputs")

    def t_reduce_scatter_uneven():
        rows = [m[0][j] for j in range(W)]  # rank j's output rows, the same on every rank
        ins_of = [[data(6000 + W * r + j, (rows[j], 2)) for j in range(W)] for r in range(W)]
        total = sum(ins_of[r][rank] for r in range(W))
        for op, want in ((dist.ReduceOp.SUM, total),
                         (dist.ReduceOp.MAX,
                          torch.stack([ins_of[r][rank] for r in range(W)]).amax(0))):
            got = {}
            for name, g in (("dlpg", dg), ("gloo", gg)):
                out = torch.full((rows[rank], 2), -1.0, dtype=torch.float64)
                dist.reduce_scatter(out, [t.clone() for t in ins_of[rank]], op=op, group=g)
                got[name] = out
            same(got["dlpg"], want, "%s vs reference" % op, exact=False)
            same(got["dlpg"], got["gloo"], "%s vs gloo" % op, exact=False)
        # PREMUL_SUM (Gloo has none) through dlpg_reduce_scatter_v's descriptor, from pieces
        # of one tensor.
        out = torch.empty(rows[rank], 2, dtype=torch.float64)
        flat = torch.cat(ins_of[rank])
        dist.reduce_scatter(out, list(flat.split(rows)),
                            op=dist._make_nccl_premul_sum(0.5), group=dg)
        same(out, 0.5 * total, "premul_sum", exact=False)

    def t_bad_splits():
        # Split sizes that do not sum to the tensor's rows: refused on this rank, naming them.
        x = torch.zeros(W + 1, 2)
        try:
            dist.all_to_all_single(torch.zeros(W + 1, 2), x, [1] * W, [1] * W, group=dg)
        except RuntimeError as e:
            assert "input_split_sizes sum to %d rows but the input has %d" % (W, W + 1) in str(e), e
        else:
            raise AssertionError("no error")

    def t_mismatch():
        # Rank 0 sends rank 1 one row more than rank 1 expects: every rank's work fails,
        # naming both ranks (in elements: 2 per row), and the group goes on working.
        sends = [1] * W
        recvs = [1] * W
        if rank == 0:
            sends[1] = 2
        x, out = torch.zeros(sum(sends), 2), torch.zeros(sum(recvs), 2)
        try:
            dist.all_to_all_single(out, x, recvs, sends, group=dg, async_op=True).wait()
        except RuntimeError as e:
            msg = str(e)
            assert "rank 0 sends 4 elements to rank 1 but rank 1 expects 2 from rank 0" in msg, msg
        else:
            raise AssertionError("no error")
        # all_gather of r + 1 elements from rank r, but rank 1 expects 3 from rank 0.
        outs = [torch.zeros(3 if (rank, r) == (1, 0) else r + 1) for r in range(W)]
        try:
            dist.all_gather(outs, torch.zeros(rank + 1), group=dg)
        except RuntimeError as e:
            msg = str(e)
            assert "rank 0 has counts[0] = 1 but rank 1 has counts[0] = 3" in msg, msg
        else:
            raise AssertionError("no error")
        y = torch.ones(3)
        dist.all_reduce(y, group=dg)
        same(y, torch.full((3,), float(W)), "all_reduce after the failures")

    for name, fn in (("all_to_all_single", t_a2a_single), ("all_to_all", t_a2a_list),
                     ("all_gather_uneven", t_all_gather_uneven), ("gather", t_gather),
                     ("scatter", t_scatter), ("reduce_scatter_uneven", t_reduce_scatter_uneven),
                     ("bad_splits", t_bad_splits), ("mismatch", t_mismatch)):
        check(name, fn)
    try:
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        res["teardown"] = traceback.format_exc()
    queue.put((rank, res))
