"""Rank body of test_torch_backend's comparison of every torch.distributed API on "dlpg"
against "gloo" (runs in its own spawned process)."""

import traceback

from dlpg_workers import _data, init_torch, use_backend


def apis_vs_gloo(rank, world, init, seed, queue):
    """Every torch.distributed collective API on a "dlpg" group and on a "gloo" group over the
    same ranks, with the same seeded per-rank inputs; the outputs must be equal. all_to_all
    of tensor lists is the one API Gloo gained late (2026): where this torch's Gloo refuses
    it, the reference is built from Gloo's all_gather instead. (monitored_barrier is refused
    by torch itself for every backend but Gloo.)"""
    import torch
    import torch.distributed as dist
    res = {}
    try:
        use_backend()
        init_torch("gloo", init, rank, world)
        dg = dist.new_group(backend="dlpg")
        gg = dist.new_group(backend="gloo")
    except Exception:  # noqa: BLE001
        queue.put((rank, {"setup": traceback.format_exc()}))
        return
    W = world

    def ints(r, shape=(4, 3)):
        return _data(torch, seed, r, shape, torch.int64, "cpu")

    def floats(r, shape=(4, 3)):
        return _data(torch, seed, r, shape, torch.float64, "cpu")

    def gathered(g, t):
        outs = [torch.empty_like(t) for _ in range(W)]
        dist.all_gather(outs, t, group=g)
        return outs

    def same(a, b, what):
        if isinstance(a, torch.Tensor):
            if not torch.equal(a, b):
                raise AssertionError("%s: dlpg %s, gloo %s" % (what, a, b))
        elif isinstance(a, (list, tuple)):
            assert len(a) == len(b), (what, len(a), len(b))
            for i, (x, y) in enumerate(zip(a, b)):
                same(x, y, "%s[%d]" % (what, i))
        else:
            assert a == b, (what, a, b)

    def api(name, body, fallback=None):
        try:
            got = body(dg)
            try:
                ref = body(gg)
            except RuntimeError as e:
                if fallback is None or "support" not in str(e):
                    raise
                ref = fallback(gg)
            same(got, ref, name)
            res[name] = "ok"
        except Exception:  # noqa: BLE001 - reported to the test.
            res[name] = traceback.format_exc()

    def broadcast(g):
        x = floats(rank)
        dist.broadcast(x, src=W - 1, group=g)
        return x

    def all_reduce(op):
        def body(g):
            x = ints(rank) % 7 + 1
            dist.all_reduce(x, op=op, group=g)
            return x
        return body

    def reduce(g):
        x = ints(rank)
        dist.reduce(x, dst=1, group=g)
        return x if rank == 1 else None

    def all_gather(g):
        return gathered(g, floats(rank))

    def all_gather_into_tensor(g):
        out = torch.empty(W * 4, 3, dtype=torch.float64)
        dist.all_gather_into_tensor(out, floats(rank), group=g)
        return out

    def all_gather_object(g):
        outs = [None] * W
        dist.all_gather_object(outs, {"rank": rank, "v": [rank] * (rank + 1)}, group=g)
        return outs

    def gather(g):
        outs = [torch.empty(4, 3, dtype=torch.float64) for _ in range(W)] if rank == 0 else None
        dist.gather(floats(rank), outs, dst=0, group=g)
        return outs

    def gather_object(g):
        outs = [None] * W if rank == 0 else None
        dist.gather_object(("r", rank), outs, dst=0, group=g)
        return outs

    def scatter(g):
        out = torch.empty(4, 3, dtype=torch.float64)
        dist.scatter(out, [floats(10 + r) for r in range(W)] if rank == 0 else None, src=0, group=g)
        return out

    def scatter_object_list(g):
        out = [None]
        dist.scatter_object_list(out, [{"to": r} for r in range(W)] if rank == 0 else None,
                                 src=0, group=g)
        return out

    def broadcast_object_list(g):
        objs = [rank, "x" * rank, None]
        dist.broadcast_object_list(objs, src=W - 1, group=g)
        return objs

    def reduce_scatter(g):
        out = torch.empty(4, 3, dtype=torch.int64)
        dist.reduce_scatter(out, [ints(rank * W + j) for j in range(W)], group=g)
        return out

    def reduce_scatter_tensor(g):
        out = torch.empty(4, 3, dtype=torch.int64)
        dist.reduce_scatter_tensor(out, ints(rank, (W * 4, 3)), group=g)
        return out

    def all_to_all_single(g):
        out = torch.empty(W * 2, 3, dtype=torch.float64)
        dist.all_to_all_single(out, floats(rank, (W * 2, 3)), group=g)
        return out

    def all_to_all(g):
        outs = [torch.empty(2, 3, dtype=torch.float64) for _ in range(W)]
        dist.all_to_all(outs, [floats(rank * W + j, (2, 3)) for j in range(W)], group=g)
        return outs

    def all_to_all_ref(g):
        return [gathered(g, floats(rank * W + j, (2, 3))) for j in range(W)][rank]

    def send_recv(g):
        y = torch.empty(4, 3, dtype=torch.float64)
        if rank == 0:
            dist.send(floats(0), 1, group=g)
        elif rank == 1:
            dist.recv(y, 0, group=g)
        return y if rank == 1 else None

    def isend_irecv(g):
        nxt, prv = (rank + 1) % W, (rank - 1) % W
        y = torch.empty(4, 3, dtype=torch.float64)
        for q in [dist.isend(floats(rank), nxt, group=g), dist.irecv(y, prv, group=g)]:
            q.wait()
        return y

    def batch_isend_irecv(g):
        nxt, prv = (rank + 1) % W, (rank - 1) % W
        y = torch.empty(4, 3, dtype=torch.float64)
        ops = [dist.P2POp(dist.isend, floats(rank), nxt, g), dist.P2POp(dist.irecv, y, prv, g)]
        for q in dist.batch_isend_irecv(ops):
            q.wait()
        return y

    def barrier(g):
        dist.barrier(group=g)
        return True

    def all_reduce_coalesced(g):
        xs = [ints(rank, (3,)), ints(rank + 5, (2, 2))]
        dist.all_reduce_coalesced(xs, group=g)
        return xs

    def all_gather_coalesced(g):
        # outs[r][i]: input i of rank r.
        outs = [[torch.empty(3, dtype=torch.int64), torch.empty(2, 2, dtype=torch.int64)]
                for _ in range(W)]
        dist.all_gather_coalesced(outs, [ints(rank, (3,)), ints(rank + 5, (2, 2))], group=g)
        return outs

    api("broadcast", broadcast)
    for op in ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"):
        api("all_reduce_" + op, all_reduce(getattr(dist.ReduceOp, op)))
    api("reduce", reduce)
    api("all_gather", all_gather)
    api("all_gather_into_tensor", all_gather_into_tensor)
    api("all_gather_object", all_gather_object)
    api("gather", gather)
    api("gather_object", gather_object)
    api("scatter", scatter)
    api("scatter_object_list", scatter_object_list)
    api("broadcast_object_list", broadcast_object_list)
    api("reduce_scatter", reduce_scatter)
    api("reduce_scatter_tensor", reduce_scatter_tensor)
    api("all_to_all_single", all_to_all_single)
    api("all_to_all", all_to_all, all_to_all_ref)
    api("send_recv", send_recv)
    api("isend_irecv", isend_irecv)
    api("batch_isend_irecv", batch_isend_irecv)
    api("barrier", barrier)
    api("all_reduce_coalesced", all_reduce_coalesced)
    api("all_gather_coalesced", all_gather_coalesced)

    # recv without a source, on both backends: every other rank sends its rank to rank 0,
    # which gets each once and is told who sent it (dlpg's sender against gloo's).
    try:
        got = {}
        for name, grp in (("dlpg", dg), ("gloo", gg)):
            if rank == 0:
                senders = []
                for _ in range(world - 1):
                    t = torch.full((3,), -1.0)
                    src = dist.recv(t, group=grp)
                    assert torch.equal(t, torch.full((3,), float(src))), (name, src, t)
                    senders.append(src)
                got[name] = sorted(senders)
            else:
                dist.send(torch.full((3,), float(rank)), 0, group=grp)
        if rank == 0:
            assert got["dlpg"] == got["gloo"] == list(range(1, world)), got
        res["recv_anysource"] = "ok"
    except Exception:  # noqa: BLE001
        res["recv_anysource"] = traceback.format_exc()
    # Drop-in errors: unknown pg_options are an error naming the known ones.
    try:
        try:
            dist.new_group(backend="dlpg", pg_options={"nme": "x"})
            res["unknown_pg_options"] = "no error"
        except ValueError as e:
            res["unknown_pg_options"] = "ok" if "'nme'" in str(e) and "name" in str(e) else str(e)
    except Exception:  # noqa: BLE001
        res["unknown_pg_options"] = traceback.format_exc()
    try:
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        res["teardown"] = traceback.format_exc()
    queue.put((rank, res))
