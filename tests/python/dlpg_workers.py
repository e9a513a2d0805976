"""Rank bodies for the Python tests. Each runs in its own process (multiprocessing spawn),
checks every operation against a reference computed locally from every rank's seeded
random data, and reports {check name: "ok" | traceback} through a queue."""

import datetime
import traceback

TIMEOUT = datetime.timedelta(seconds=60)


def _data(torch, seed, r, shape, dtype, device):
    g = torch.Generator().manual_seed(seed * 1000 + r)
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    else:
        x = torch.randint(-50, 50, shape, generator=g, dtype=torch.int64).to(dtype)
    return x.to(device)


def _check_all(rank, world, device, seed):
    import torch
    import torch.distributed as dist

    results = {}
    dev = torch.device(device)
    W = world

    def data(r, shape=(5, 3), dtype=torch.float64):
        return _data(torch, seed, r, shape, dtype, dev)

    def eq(a, b, what):
        if a.dtype.is_floating_point:
            ok = torch.allclose(a.cpu(), b.cpu(), rtol=1e-12, atol=1e-12)
        else:
            ok = torch.equal(a.cpu(), b.cpu())
        if not ok:
            raise AssertionError("%s: got %s expected %s" % (what, a, b))

    def check(name, fn):
        try:
            fn()
            results[name] = "ok"
        except Exception:  # noqa: BLE001 - reported to the test.
            results[name] = traceback.format_exc()

    def t_broadcast():
        root = W - 1
        x = data(rank)
        dist.broadcast(x, src=root)
        eq(x, data(root), "broadcast")

    def t_allreduce(op, fold, dtype):
        def body():
            x = data(rank, dtype=dtype)
            dist.all_reduce(x, op=op)
            ref = data(0, dtype=dtype)
            for r in range(1, W):
                ref = fold(ref, data(r, dtype=dtype))
            eq(x, ref, "all_reduce %s %s" % (op, dtype))
        return body

    def t_allreduce_async():
        x = data(rank)
        w = dist.all_reduce(x, async_op=True)
        fut = w.get_future()
        w.wait()
        v = fut.wait()
        ref = sum(data(r) for r in range(W))
        eq(x, ref, "all_reduce async")
        eq(v[0], ref, "future value")
        assert w.is_completed()

    def t_reduce():
        root = 1 % W
        x = data(rank)
        dist.reduce(x, dst=root)
        if rank == root:
            eq(x, sum(data(r) for r in range(W)), "reduce")

    def t_all_gather():
        outs = [torch.empty(5, 3, dtype=torch.float64, device=dev) for _ in range(W)]
        dist.all_gather(outs, data(rank))
        for r in range(W):
            eq(outs[r], data(r), "all_gather[%d]" % r)

    def t_all_gather_into_tensor():
        out = torch.empty(W * 5, 3, dtype=torch.float64, device=dev)
        fn = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
        fn(out, data(rank))
        eq(out, torch.cat([data(r) for r in range(W)]), "all_gather_into_tensor")

    def t_gather():
        root = W - 1
        outs = [torch.empty(5, 3, dtype=torch.float64, device=dev) for _ in range(W)]
        dist.gather(data(rank), outs if rank == root else None, dst=root)
        if rank == root:
            for r in range(W):
                eq(outs[r], data(r), "gather[%d]" % r)

    def t_scatter():
        root = 0
        out = torch.empty(5, 3, dtype=torch.float64, device=dev)
        ins = [data(100 + r) for r in range(W)] if rank == root else None
        dist.scatter(out, ins, src=root)
        eq(out, data(100 + rank), "scatter")

    def t_reduce_scatter():
        ins = [data(rank * W + j) for j in range(W)]
        out = torch.empty(5, 3, dtype=torch.float64, device=dev)
        dist.reduce_scatter(out, ins)
        eq(out, sum(data(r * W + rank) for r in range(W)), "reduce_scatter")

    def t_reduce_scatter_tensor():
        inp = data(rank, shape=(W * 4, 2))
        out = torch.empty(4, 2, dtype=torch.float64, device=dev)
        fn = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
        fn(out, inp)
        ref = sum(data(r, shape=(W * 4, 2)) for r in range(W))[rank * 4:(rank + 1) * 4]
        eq(out, ref, "reduce_scatter_tensor")

    def t_all_to_all_single():
        inp = data(rank, shape=(W * 3, 2))
        out = torch.empty_like(inp)
        dist.all_to_all_single(out, inp)
        ref = torch.cat([data(r, shape=(W * 3, 2))[rank * 3:(rank + 1) * 3] for r in range(W)])
        eq(out, ref, "all_to_all_single")

    def t_all_to_all_uneven():
        # Rank i sends (i + j) % 3 + ... rows to rank j; one pair is empty.
        def rows(i, j):
            return 0 if (i, j) == (0, W - 1) else (i + 2 * j) % 4 + 1
        inp = data(rank, shape=(sum(rows(rank, j) for j in range(W)), 2))
        osz = [rows(i, rank) for i in range(W)]
        out = torch.empty(sum(osz), 2, dtype=torch.float64, device=dev)
        dist.all_to_all_single(out, inp, output_split_sizes=osz,
                               input_split_sizes=[rows(rank, j) for j in range(W)])
        parts = []
        for i in range(W):
            src = data(i, shape=(sum(rows(i, j) for j in range(W)), 2))
            off = sum(rows(i, j) for j in range(rank))
            parts.append(src[off:off + rows(i, rank)])
        eq(out, torch.cat(parts), "all_to_all_single uneven")

    def t_all_to_all_list():
        ins = [data(rank * W + j, shape=(j + 1, 2)) for j in range(W)]
        outs = [torch.empty(rank + 1, 2, dtype=torch.float64, device=dev) for _ in range(W)]
        dist.all_to_all(outs, ins)
        for i in range(W):
            eq(outs[i], data(i * W + rank, shape=(rank + 1, 2)), "all_to_all[%d]" % i)

    def t_send_recv():
        nxt, prv = (rank + 1) % W, (rank - 1) % W
        if rank % 2 == 0:
            dist.send(data(rank), nxt)
            y = torch.empty(5, 3, dtype=torch.float64, device=dev)
            dist.recv(y, prv)
        else:
            y = torch.empty(5, 3, dtype=torch.float64, device=dev)
            dist.recv(y, prv)
            dist.send(data(rank), nxt)
        eq(y, data(prv), "send/recv")

    def t_isend_irecv():
        nxt, prv = (rank + 1) % W, (rank - 1) % W
        y = torch.empty(5, 3, dtype=torch.float64, device=dev)
        reqs = [dist.isend(data(rank), nxt, tag=7), dist.irecv(y, prv, tag=7)]
        for q in reqs:
            q.wait()
        eq(y, data(prv), "isend/irecv")

    def t_batch_isend_irecv():
        nxt, prv = (rank + 1) % W, (rank - 1) % W
        y = torch.empty(5, 3, dtype=torch.float64, device=dev)
        y2 = torch.empty(4, dtype=torch.int64, device=dev)
        ops = [dist.P2POp(dist.isend, data(rank), nxt),
               dist.P2POp(dist.irecv, y, prv),
               dist.P2POp(dist.isend, data(rank, (4,), torch.int64), prv),
               dist.P2POp(dist.irecv, y2, nxt)]
        for q in dist.batch_isend_irecv(ops):
            q.wait()
        eq(y, data(prv), "batch_isend_irecv")
        eq(y2, data(nxt, (4,), torch.int64), "batch_isend_irecv int")

    def t_barrier():
        dist.barrier()

    def t_allreduce_coalesced():
        xs = [data(rank, shape=(3,)), data(rank + 10, shape=(2, 2))]
        if hasattr(dist, "all_reduce_coalesced"):
            dist.all_reduce_coalesced(xs)
        else:
            for x in xs:
                dist.all_reduce(x)
        eq(xs[0], sum(data(r, shape=(3,)) for r in range(W)), "coalesced[0]")
        eq(xs[1], sum(data(r + 10, shape=(2, 2)) for r in range(W)), "coalesced[1]")

    def t_new_group():
        members = list(range(0, W, 2)) if W > 2 else [0, 1]
        sub = dist.new_group(members)
        if rank in members:
            x = data(rank)
            dist.all_reduce(x, group=sub)
            eq(x, sum(data(r) for r in members), "new_group all_reduce")
            y = data(rank, shape=(3,))
            dist.broadcast(y, src=members[-1], group=sub)
            eq(y, data(members[-1], shape=(3,)), "new_group broadcast")

    def t_zero_elements():
        x = torch.empty(0, dtype=torch.float32, device=dev)
        dist.all_reduce(x)

    # Non-contiguous inputs and outputs (transposed views), as Gloo accepts them.
    def tr(r, rows=3, cols=4):
        return data(r, shape=(cols, rows)).t()  # (rows, cols), not contiguous

    def empty_t(rows=3, cols=4):
        return torch.empty(cols, rows, dtype=torch.float64, device=dev).t()

    def t_nc_inplace():
        x = tr(rank)
        dist.all_reduce(x)
        eq(x, sum(tr(r) for r in range(W)), "all_reduce(x.t())")
        y = tr(rank)
        dist.broadcast(y, src=W - 1)
        eq(y, tr(W - 1), "broadcast(x.t())")
        z = tr(rank)
        dist.reduce(z, dst=0)
        if rank == 0:
            eq(z, sum(tr(r) for r in range(W)), "reduce(x.t())")

    def t_nc_gathers():
        outs = [empty_t() for _ in range(W)]
        dist.all_gather(outs, tr(rank))
        for r in range(W):
            eq(outs[r], tr(r), "all_gather non-contiguous [%d]" % r)
        big = torch.empty(4, W * 3, dtype=torch.float64, device=dev).t()
        fn = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
        fn(big, tr(rank))
        eq(big, torch.cat([tr(r) for r in range(W)]), "all_gather_into_tensor non-contiguous")
        outs = [empty_t() for _ in range(W)]
        dist.gather(tr(rank), outs if rank == 0 else None, dst=0)
        if rank == 0:
            for r in range(W):
                eq(outs[r], tr(r), "gather non-contiguous [%d]" % r)
        out = empty_t()
        dist.scatter(out, [tr(50 + r) for r in range(W)] if rank == 0 else None, src=0)
        eq(out, tr(50 + rank), "scatter non-contiguous")

    def t_nc_scatters():
        out = empty_t()
        dist.reduce_scatter(out, [tr(rank * W + j) for j in range(W)])
        eq(out, sum(tr(r * W + rank) for r in range(W)), "reduce_scatter non-contiguous")
        inp = data(rank, shape=(2, W * 3)).t()
        out = torch.empty(2, 3, dtype=torch.float64, device=dev).t()
        fn = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
        fn(out, inp)
        ref = sum(data(r, shape=(2, W * 3)).t() for r in range(W))[rank * 3:(rank + 1) * 3]
        eq(out, ref, "reduce_scatter_tensor non-contiguous")
        inp = data(rank, shape=(2, W * 3)).t()
        out = torch.empty(2, W * 3, dtype=torch.float64, device=dev).t()
        dist.all_to_all_single(out, inp)
        ref = torch.cat([data(r, shape=(2, W * 3)).t()[rank * 3:(rank + 1) * 3] for r in range(W)])
        eq(out, ref, "all_to_all_single non-contiguous")
        outs = [empty_t() for _ in range(W)]
        dist.all_to_all(outs, [tr(rank * W + j) for j in range(W)])
        for i in range(W):
            eq(outs[i], tr(i * W + rank), "all_to_all non-contiguous [%d]" % i)

    def t_nc_p2p():
        nxt, prv = (rank + 1) % W, (rank - 1) % W
        y = empty_t()
        reqs = [dist.isend(tr(rank), nxt), dist.irecv(y, prv)]
        for q in reqs:
            q.wait()
        eq(y, tr(prv), "isend/irecv non-contiguous")

    def t_all_gather_uneven():
        # Rank r contributes r + 1 rows, as torch's NCCL backend allows.
        outs = [torch.empty(r + 1, 3, dtype=torch.float64, device=dev) for r in range(W)]
        dist.all_gather(outs, data(rank, shape=(rank + 1, 3)))
        for r in range(W):
            eq(outs[r], data(r, shape=(r + 1, 3)), "all_gather uneven [%d]" % r)

    check("broadcast", t_broadcast)
    check("all_reduce_sum_f64", t_allreduce(dist.ReduceOp.SUM, lambda a, b: a + b, torch.float64))
    check("all_reduce_max_i64", t_allreduce(dist.ReduceOp.MAX, torch.maximum, torch.int64))
    check("all_reduce_min_f32", t_allreduce(dist.ReduceOp.MIN, torch.minimum, torch.float32))
    check("all_reduce_prod_i32", t_allreduce(dist.ReduceOp.PRODUCT, lambda a, b: a * b, torch.int32))
    check("all_reduce_async_future", t_allreduce_async)
    check("reduce", t_reduce)
    check("all_gather", t_all_gather)
    check("all_gather_into_tensor", t_all_gather_into_tensor)
    check("gather", t_gather)
    check("scatter", t_scatter)
    check("reduce_scatter", t_reduce_scatter)
    check("reduce_scatter_tensor", t_reduce_scatter_tensor)
    check("all_to_all_single", t_all_to_all_single)
    check("all_to_all_single_uneven", t_all_to_all_uneven)
    check("all_to_all_list", t_all_to_all_list)
    check("send_recv", t_send_recv)
    check("isend_irecv", t_isend_irecv)
    check("batch_isend_irecv", t_batch_isend_irecv)
    check("barrier", t_barrier)
    check("all_reduce_coalesced", t_allreduce_coalesced)
    check("new_group", t_new_group)
    check("zero_elements", t_zero_elements)
    check("noncontiguous_inplace", t_nc_inplace)
    check("noncontiguous_gathers", t_nc_gathers)
    check("noncontiguous_scatters", t_nc_scatters)
    check("noncontiguous_p2p", t_nc_p2p)
    check("all_gather_uneven", t_all_gather_uneven)
    if device == "cuda":
        torch.cuda.synchronize()
    return results


def use_backend(impl):
    """Pick the "dlpg" backend implementation ("cpp" or "python") before dlpg.torch loads."""
    import os
    os.environ["DLPG_TORCH_BACKEND"] = impl
    import dlpg.torch
    assert dlpg.torch.IMPLEMENTATION == impl, dlpg.torch.IMPLEMENTATION


def torch_collectives(rank, world, init_method, device, seed, impl, queue):
    try:
        import torch
        import torch.distributed as dist
        use_backend(impl)
        if device == "cuda":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        dist.init_process_group("dlpg", init_method=init_method, rank=rank, world_size=world,
                                timeout=TIMEOUT)
    except Exception:  # noqa: BLE001
        queue.put((rank, {"setup": traceback.format_exc()}))
        return
    results = _check_all(rank, world, device, seed)
    try:
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        results["teardown"] = traceback.format_exc()
    queue.put((rank, results))


def ddp_train(rank, world, init_method, backend, device, out_path, queue):
    try:
        import torch
        import torch.distributed as dist
        import dlpg.torch  # noqa: F401
        if device == "cuda":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world,
                                timeout=TIMEOUT)
        torch.manual_seed(1234)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                                    torch.nn.Linear(32, 4)).double().to(device)
        # Parameters differ by rank before DDP: its initial broadcast must fix that.
        with torch.no_grad():
            for p in model.parameters():
                p.add_(rank * 0.01)
        ddp = torch.nn.parallel.DistributedDataParallel(
            model, bucket_cap_mb=0.001, device_ids=[torch.cuda.current_device()] if device == "cuda" else None)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
        g = torch.Generator().manual_seed(99 + rank)
        for _ in range(8):
            x = torch.randn(8, 16, generator=g, dtype=torch.float64).to(device)
            y = torch.randn(8, 4, generator=g, dtype=torch.float64).to(device)
            opt.zero_grad()
            loss = ((ddp(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
        params = [p.detach().cpu().clone() for p in model.parameters()]
        if rank == 0:
            torch.save(params, out_path)
        dist.barrier()
        dist.destroy_process_group()
        queue.put((rank, {"ddp": "ok"}))
    except Exception:  # noqa: BLE001
        queue.put((rank, {"ddp": traceback.format_exc()}))


def mixed_frameworks(rank, port, queue):
    """Rank 0 uses torch tensors, rank 1 NumPy arrays, through dlpg.Group directly."""
    try:
        import numpy as np
        import dlpg
        url = "tcp://127.0.0.1:%d%s" % (port, "?serve=1" if rank == 0 else "")
        store = dlpg.Store(url, 30)
        g = dlpg.Group(store, rank, 2, timeout=30)
        rng = np.random.default_rng(7)
        a = rng.standard_normal((6, 3))  # both ranks know a and b
        b = rng.integers(-9, 9, (5,)).astype(np.int32)
        if rank == 0:
            import torch
            g.send(torch.from_numpy(a.copy()), peer=1, tag=3)
            got = torch.empty(5, dtype=torch.int32)
            g.recv(got, peer=1, tag=4)
            assert np.array_equal(got.numpy(), b), (got, b)
            t = torch.from_numpy(a * 2)
            g.broadcast(t, root=0)
            s = torch.from_numpy(a.copy())
            w = g.allreduce(s, async_op=True)
            w.wait()
            assert np.allclose(s.numpy(), a + a * 3)
        else:
            got = np.empty((6, 3))
            g.recv(got, peer=0, tag=3)
            assert np.array_equal(got, a)
            g.send(b, peer=0, tag=4)
            t = np.zeros((6, 3))
            g.broadcast(t, root=0)
            assert np.array_equal(t, a * 2)
            s = a * 3
            g.allreduce(s)
            assert np.allclose(s, a + a * 3)
        g.barrier()
        g.destroy()
        store.close()
        queue.put((rank, {"mixed": "ok"}))
    except Exception:  # noqa: BLE001
        queue.put((rank, {"mixed": traceback.format_exc()}))


def bad_input(rank, port, queue):
    """DlpgError on bad input: status and message."""
    try:
        import numpy as np
        import dlpg
        res = {}
        url = "tcp://127.0.0.1:%d%s" % (port, "?serve=1" if rank == 0 else "")
        store = dlpg.Store(url, 30)
        g = dlpg.Group(store, rank, 2, timeout=30)
        try:
            g.send(np.ones(3), peer=rank)
            res["self_send"] = "no error"
        except dlpg.DlpgError as e:
            res["self_send"] = (e.status, e.status_name, e.message)
        try:
            g.broadcast(np.ones(3), root=5)
            res["bad_root"] = "no error"
        except dlpg.DlpgError as e:
            res["bad_root"] = (e.status, e.status_name, e.message)
        try:
            g.allgather(np.ones(3), np.ones(5))
            res["bad_shape"] = "no error"
        except dlpg.DlpgError as e:
            res["bad_shape"] = (e.status, e.status_name, e.message)
        try:
            g.allreduce(np.ones((4, 4))[:, 1])
            res["strided"] = "no error"
        except dlpg.DlpgError as e:
            res["strided"] = (e.status, e.status_name, e.message)
        try:
            g.allreduce(np.ones(3), op="median")
            res["bad_op"] = "no error"
        except dlpg.DlpgError as e:
            res["bad_op"] = (e.status, e.status_name, e.message)
        g.barrier()
        g.destroy()
        queue.put((rank, res))
    except Exception:  # noqa: BLE001
        queue.put((rank, {"setup": traceback.format_exc()}))


def dropped_works(rank, port, queue):
    """A dlpg.Work dropped while its recv is still pending is parked with its buffer
    (dlpg._work), and freed by a later operation once complete."""
    res = {}
    try:
        import numpy as np

        import dlpg
        from dlpg import _work
        store = dlpg.Store("tcp://127.0.0.1:%d%s" % (port, "?serve=1" if rank == 0 else ""), 60)
        g = dlpg.Group(store, rank, 2, timeout=60)
        if rank == 0:
            buf = np.zeros(1000, dtype=np.float64)
            w = g.recv(buf, 1, tag=3, async_op=True)
            del w
            parked_after_drop = _work.parked()
            store.set("go", b"1")
            g.barrier()
            g.barrier()  # The recv has completed before this; the next call reaps it.
            g.allreduce(np.zeros(1))
            ok = np.array_equal(buf, np.arange(1000, dtype=np.float64))
            res["dlpg_work"] = "ok" if (parked_after_drop == 1 and _work.parked() == 0 and ok) \
                else "parked %d then %d, data %s" % (parked_after_drop, _work.parked(), ok)
        else:
            store.wait(["go"], 30)
            g.send(np.arange(1000, dtype=np.float64), 0, tag=3)
            g.barrier()
            g.barrier()
            g.allreduce(np.zeros(1))
            res["dlpg_work"] = "ok"
        g.destroy()
    except Exception:  # noqa: BLE001 - reported to the test.
        res["setup"] = traceback.format_exc()
    queue.put((rank, res))


def apis_vs_gloo(rank, world, init_method, seed, queue):
    """Every torch.distributed collective API on a "dlpg" group and on a "gloo" group over the
    same ranks, with the same seeded per-rank inputs; the outputs must be equal. Where this
    torch's Gloo lacks an API (reduce_scatter, all_to_all, all_gather_into_tensor on 1.13),
    the reference is built from Gloo's all_gather instead. (monitored_barrier is refused by
    torch itself for every backend but Gloo.)"""
    import torch
    import torch.distributed as dist
    res = {}
    try:
        use_backend("cpp")
        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world,
                                timeout=TIMEOUT)
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
        fn = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
        fn(out, floats(rank), group=g)
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

    def reduce_scatter_ref(g):
        # Block j of rank r is ints(r * W + j); gathering every block j on every rank gives
        # rank r's contributions to each destination.
        return sum([gathered(g, ints(rank * W + j)) for j in range(W)][rank])

    def reduce_scatter_tensor(g):
        out = torch.empty(4, 3, dtype=torch.int64)
        fn = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
        fn(out, ints(rank, (W * 4, 3)), group=g)
        return out

    def reduce_scatter_tensor_ref(g):
        return sum(gathered(g, ints(rank, (W * 4, 3))))[rank * 4:(rank + 1) * 4]

    def all_to_all_single(g):
        out = torch.empty(W * 2, 3, dtype=torch.float64)
        dist.all_to_all_single(out, floats(rank, (W * 2, 3)), group=g)
        return out

    def all_to_all_single_ref(g):
        return torch.cat([x[rank * 2:(rank + 1) * 2] for x in gathered(g, floats(rank, (W * 2, 3)))])

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
    api("all_gather_into_tensor", all_gather_into_tensor,
        lambda g: torch.cat(gathered(g, floats(rank))))
    api("all_gather_object", all_gather_object)
    api("gather", gather)
    api("gather_object", gather_object)
    api("scatter", scatter)
    api("scatter_object_list", scatter_object_list)
    api("broadcast_object_list", broadcast_object_list)
    api("reduce_scatter", reduce_scatter, reduce_scatter_ref)
    api("reduce_scatter_tensor", reduce_scatter_tensor, reduce_scatter_tensor_ref)
    api("all_to_all_single", all_to_all_single, all_to_all_single_ref)
    api("all_to_all", all_to_all, all_to_all_ref)
    api("send_recv", send_recv)
    api("isend_irecv", isend_irecv)
    api("batch_isend_irecv", batch_isend_irecv)
    api("barrier", barrier)
    if hasattr(dist, "all_reduce_coalesced"):
        api("all_reduce_coalesced", all_reduce_coalesced)
        api("all_gather_coalesced", all_gather_coalesced)

    # Drop-in errors: recv without a source says it is unsupported at once; unknown
    # pg_options are an error naming the known ones.
    try:
        if rank == 0:
            try:
                dist.recv(torch.empty(3), group=dg)
                res["recv_anysource"] = "no error"
            except RuntimeError as e:
                res["recv_anysource"] = "ok" if "not supported" in str(e) and "src" in str(e) \
                    else str(e)
        else:
            res["recv_anysource"] = "ok"
    except Exception:  # noqa: BLE001
        res["recv_anysource"] = traceback.format_exc()
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


def graph_capture(rank, world, port, kind, queue):
    """CUDA-graph capture as torch documents it: warm up on a side stream, then capture in
    `with torch.cuda.graph(g):` (its own capture stream, default "global" error mode), then
    replay on new input values and compare with the reference. kind: "shim" (dlpg.Group on
    torch tensors), "cpp" / "python" (torch.distributed on either backend), "cupy" (dlpg.Group
    on CuPy arrays, captured with CuPy's stream capture). Each kind runs in a fresh process:
    the reported failure was at a process's first capture."""
    res = {}
    try:
        import torch
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
        if kind in ("cpp", "python"):
            import torch.distributed as dist
            use_backend(kind)
            dist.init_process_group("dlpg", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                                    world_size=world, timeout=TIMEOUT)
        else:
            import dlpg
            url = "tcp://127.0.0.1:%d%s" % (port, "?serve=1" if rank == 0 else "")
            g = dlpg.Group(dlpg.Store(url, 60), rank, world, timeout=60)
    except Exception:  # noqa: BLE001
        queue.put((rank, {"setup": traceback.format_exc()}))
        return
    W = world

    def val(r, n, salt):
        # Values that differ by rank and replay and are exact in float32 sums.
        return (torch.arange(n, device=dev, dtype=torch.float32) % 17) * (r + 1) + salt

    def capture_torch(name, make, body, expect):
        """make(salt) fills the inputs in place; body() is the captured operation;
        expect(salt) -> list of (tensor, reference)."""
        try:
            make(0.0)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    body()
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                body()
            for salt in (3.0, 5.0):
                make(salt)
                graph.replay()
                torch.cuda.synchronize()
                for got, ref in expect(salt):
                    if not torch.equal(got, ref):
                        raise AssertionError("%s after replay (salt %s): got %s expected %s"
                                             % (name, salt, got, ref))
            res[name] = "ok"
        except Exception:  # noqa: BLE001
            res[name] = traceback.format_exc()

    n = 64
    x = torch.empty(n, device=dev)
    y = torch.empty(n, device=dev)
    big = torch.empty(W * n, device=dev)
    small = torch.empty(n, device=dev)

    def fill(salt):
        x.copy_(val(rank, n, salt))
        big.copy_(torch.cat([val(rank, n, salt + j) for j in range(W)]))

    total = lambda salt: sum(val(r, n, salt) for r in range(W))  # noqa: E731
    if kind == "shim":
        capture_torch("allreduce_out_of_place", fill, lambda: g.allreduce(x, output=y),
                      lambda s: [(y, total(s))])
        capture_torch("allreduce_in_place", fill, lambda: g.allreduce(x),
                      lambda s: [(x, total(s))] if W == 1 else [])
        capture_torch("broadcast", fill, lambda: g.broadcast(x, root=0, output=y),
                      lambda s: [(y, val(0, n, s))])
        capture_torch("reduce", fill, lambda: g.reduce(x, root=0, output=y),
                      lambda s: [(y, total(s))] if rank == 0 else [])
        capture_torch("allgather", fill, lambda: g.allgather(x, big),
                      lambda s: [(big, torch.cat([val(r, n, s) for r in range(W)]))])
        capture_torch("reduce_scatter", fill, lambda: g.reduce_scatter(big, small),
                      lambda s: [(small, sum(val(r, n, s + rank) for r in range(W)))])
        capture_torch("alltoall", fill, lambda: g.alltoall(big, y if W == 1 else big.clone()),
                      lambda s: [(y, val(0, n, s))] if W == 1 else [])
        if W > 1:
            peer = 1 - rank if W == 2 else (rank + 1) % W

            def sendrecv():
                with g.batch():
                    g.send(x, peer, async_op=True)
                    g.recv(y, peer, async_op=True)
            capture_torch("send_recv", fill, sendrecv, lambda s: [(y, val(peer, n, s))])
    elif kind in ("cpp", "python"):
        import torch.distributed as dist

        def all_reduce():
            y.copy_(x)
            dist.all_reduce(y)
        capture_torch("all_reduce", fill, all_reduce, lambda s: [(y, total(s))])

        def broadcast():
            y.copy_(x)
            dist.broadcast(y, src=W - 1)
        capture_torch("broadcast", fill, broadcast, lambda s: [(y, val(W - 1, n, s))])

        def reduce():
            y.copy_(x)
            dist.reduce(y, dst=0)
        capture_torch("reduce", fill, reduce, lambda s: [(y, total(s))] if rank == 0 else [])
        outs = [torch.empty(n, device=dev) for _ in range(W)]
        capture_torch("all_gather", fill, lambda: dist.all_gather(outs, x),
                      lambda s: [(outs[r], val(r, n, s)) for r in range(W)])
        fn = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
        capture_torch("all_gather_into_tensor", fill, lambda: fn(big, x),
                      lambda s: [(big, torch.cat([val(r, n, s) for r in range(W)]))])
        fn2 = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
        capture_torch("reduce_scatter_tensor", fill, lambda: fn2(small, big),
                      lambda s: [(small, sum(val(r, n, s + rank) for r in range(W)))])
        ins = [torch.empty(n, device=dev) for _ in range(W)]

        def rs_fill(salt):
            fill(salt)
            for j in range(W):
                ins[j].copy_(val(rank, n, salt + j))
        capture_torch("reduce_scatter", rs_fill, lambda: dist.reduce_scatter(small, ins),
                      lambda s: [(small, sum(val(r, n, s + rank) for r in range(W)))])
        out_a2a = torch.empty(W * n, device=dev)
        capture_torch("all_to_all_single", fill, lambda: dist.all_to_all_single(out_a2a, big),
                      lambda s: [(out_a2a, torch.cat([val(r, n, s + rank) for r in range(W)]))])
        if W > 1:
            peer = (rank + 1) % W, (rank - 1) % W

            def p2p():
                reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, peer[0]),
                                               dist.P2POp(dist.irecv, y, peer[1])])
                for q in reqs:
                    q.wait()
            capture_torch("batch_isend_irecv", fill, p2p, lambda s: [(y, val(peer[1], n, s))])
    elif kind == "cupy":
        try:
            import cupy
        except ImportError:
            queue.put((rank, {"setup": "skip: CuPy is not installed"}))
            return
        try:
            with cupy.cuda.Device(rank):
                cx = cupy.arange(n, dtype=cupy.float32) * (rank + 1)
                cy = cupy.zeros(n, dtype=cupy.float32)
                s = cupy.cuda.Stream(non_blocking=True)
                with s:
                    g.allreduce(cx, output=cy)  # warm-up
                    s.synchronize()
                    s.begin_capture()
                    g.allreduce(cx, output=cy)
                    graph = s.end_capture()
                    cx *= 2
                    cy[:] = 0
                    graph.launch(s)
                    s.synchronize()
                ref = sum(cupy.arange(n, dtype=cupy.float32) * (r + 1) * 2 for r in range(W))
                res["cupy_allreduce"] = "ok" if bool((cy == ref).all()) else "got %s" % cy
        except Exception:  # noqa: BLE001
            res["cupy_allreduce"] = traceback.format_exc()
    try:
        torch.cuda.synchronize()
        if kind in ("cpp", "python"):
            import torch.distributed as dist
            dist.destroy_process_group()
        else:
            g.destroy()
    except Exception:  # noqa: BLE001
        res["teardown"] = traceback.format_exc()
    queue.put((rank, res))
