"""Rank bodies of test_torch_ex.py: the "dlpg" torch backend's PREMUL_SUM (a float factor
and a one-element tensor factor, torch.distributed._make_nccl_premul_sum), complex tensors,
and receives from any source as torch's test_send_recv_any_source issues them; every result
is checked against a reference computed here from every rank's seeded data."""

import traceback

from dlpg_workers import init_torch


def _data(torch, seed, r, shape, dtype):
    g = torch.Generator().manual_seed(seed * 1000 + r)
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def _close(torch, got, want, what):
    tol = 1e-5 if got.dtype in (torch.float32, torch.complex64) else 1e-12
    assert got.dtype == want.dtype, "%s: dtype %s, want %s" % (what, got.dtype, want.dtype)
    assert torch.allclose(got, want, rtol=tol, atol=tol), "%s: got %s, want %s" % (what, got, want)


def premul_and_complex(rank, world, init, seed, queue):
    res = {}
    try:
        import torch
        import torch.distributed as dist
        import dlpg.torch  # noqa: F401 - registers "dlpg"
        init_torch("dlpg", init, rank, world)
        factor = 0.75  # torch passes the same factor on every rank

        for dt in (torch.float32, torch.float64, torch.complex64, torch.complex128):
            name = str(dt)
            for kind, op in (("float factor", dist._make_nccl_premul_sum(factor)),
                             ("tensor factor",
                              dist._make_nccl_premul_sum(torch.tensor([factor], dtype=torch.float64)))):
                x = _data(torch, seed, rank, (13,), dt)
                dist.all_reduce(x, op=op)
                want = sum(_data(torch, seed, r, (13,), dt) for r in range(world)) * factor
                _close(torch, x, want, "all_reduce premul_sum %s %s" % (kind, name))

            op = dist._make_nccl_premul_sum(factor)
            x = _data(torch, seed + 1, rank, (6,), dt)
            dist.reduce(x, dst=1, op=op)
            if rank == 1:
                want = sum(_data(torch, seed + 1, r, (6,), dt) for r in range(world)) * factor
                _close(torch, x, want, "reduce premul_sum " + name)

            out = torch.empty((4,), dtype=dt)
            dist.reduce_scatter_tensor(out, _data(torch, seed + 2, rank, (4 * world,), dt), op=op)
            full = sum(_data(torch, seed + 2, r, (4 * world,), dt) for r in range(world)) * factor
            _close(torch, out, full[4 * rank:4 * rank + 4], "reduce_scatter_tensor premul_sum " + name)

            out = torch.empty((3,), dtype=dt)
            ins = list(_data(torch, seed + 3, rank, (3 * world,), dt).chunk(world))
            dist.reduce_scatter(out, ins, op=op)
            full = sum(_data(torch, seed + 3, r, (3 * world,), dt) for r in range(world)) * factor
            _close(torch, out, full[3 * rank:3 * rank + 3], "reduce_scatter premul_sum " + name)

        for dt in (torch.complex64, torch.complex128):
            name = str(dt)
            x = _data(torch, seed + 4, rank, (9,), dt)
            dist.all_reduce(x, op=dist.ReduceOp.AVG)
            want = sum(_data(torch, seed + 4, r, (9,), dt) for r in range(world)) / world
            _close(torch, x, want, "all_reduce avg " + name)
            out = torch.empty((world * 5,), dtype=dt)
            dist.all_gather_into_tensor(out, _data(torch, seed + 5, rank, (5,), dt))
            _close(torch, out, torch.cat([_data(torch, seed + 5, r, (5,), dt) for r in range(world)]),
                   "all_gather_into_tensor " + name)
            b = _data(torch, seed + 6, rank, (4,), dt)
            dist.broadcast(b, src=0)
            _close(torch, b, _data(torch, seed + 6, 0, (4,), dt), "broadcast " + name)
            # Point to point moves complex tensors as they are (torch passes them through).
            nxt, prv = (rank + 1) % world, (rank - 1) % world
            y = torch.zeros((8,), dtype=dt)
            reqs = dist.batch_isend_irecv([
                dist.P2POp(dist.isend, _data(torch, seed + 7, rank, (8,), dt), nxt),
                dist.P2POp(dist.irecv, y, prv)])
            for q in reqs:
                q.wait()
            _close(torch, y, _data(torch, seed + 7, prv, (8,), dt), "send/recv " + name)

        # A complex reduction with an op complex numbers lack is torch's own ValueError.
        try:
            dist.all_reduce(torch.ones(2, dtype=torch.complex64), op=dist.ReduceOp.MAX)
            res["complex max"] = "no error"
        except ValueError as e:
            res["complex max"] = str(e)
        dist.barrier()
        dist.destroy_process_group()
        res["results"] = "ok"
    except Exception:  # noqa: BLE001 - reported to the test.
        res["error"] = traceback.format_exc()
    queue.put((rank, res))


def any_source(rank, world, init, seed, queue):
    """torch's test_send_recv_any_source: each rank in turn receives, with recv(src=None)
    and irecv() + work._source_rank(), one message of each kind from every other rank, each
    the sender's own seeded data; the receiver checks the data against the sender it got."""
    res = {}
    try:
        import torch
        import torch.distributed as dist
        import dlpg.torch  # noqa: F401 - registers "dlpg"
        init_torch("dlpg", init, rank, world)
        recv_ranks, irecv_ranks = [], []
        for dst in range(world):
            if dst == rank:
                for _ in range(world - 1):
                    for kind in ("recv", "irecv"):
                        t = torch.full((300,), -1.0, dtype=torch.float32)
                        if kind == "recv":
                            sender = dist.recv(t)
                            recv_ranks.append(sender)
                        else:
                            work = dist.irecv(t)
                            work.wait()
                            sender = work._source_rank()
                            irecv_ranks.append(sender)
                        _close(torch, t, _data(torch, seed + dst, sender, (300,), torch.float32),
                               "%s from rank %d" % (kind, sender))
            else:
                x = _data(torch, seed + dst, rank, (300,), torch.float32)
                dist.send(x, dst)  # recv
                dist.send(x, dst)  # irecv
        res["recv_ranks"] = sorted(recv_ranks)
        res["irecv_ranks"] = sorted(irecv_ranks)
        dist.barrier()
        dist.destroy_process_group()
        res["results"] = "ok"
    except Exception:  # noqa: BLE001 - reported to the test.
        res["error"] = traceback.format_exc()
    queue.put((rank, res))
