"""Rank bodies for the Python tests. Each runs in its own process (multiprocessing spawn),
checks every operation against a reference computed locally from every rank's seeded
random data, and reports {check name: "ok" | traceback} through a queue."""

import datetime
import traceback

TIMEOUT = datetime.timedelta(seconds=60)


def run_check(res, name, fn):
    """res[name] = "ok" when fn() returns, else its traceback (reported to the test)."""
    try:
        fn()
        res[name] = "ok"
    except Exception:  # noqa: BLE001 - reported to the test.
        res[name] = traceback.format_exc()


def init_torch(backend, init, rank, world, timeout=TIMEOUT):
    """dist.init_process_group on init: a "file://" URL, or the (host, port) of the TCPStore
    the test serves (conftest.torch_store), which every rank joins as a client."""
    import torch.distributed as dist
    if isinstance(init, str):
        dist.init_process_group(backend, init_method=init, rank=rank, world_size=world,
                                timeout=timeout)
        return
    host, port = init
    store = dist.TCPStore(host, port, world, False, timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)


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
        dist.all_gather_into_tensor(out, data(rank))
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
        dist.reduce_scatter_tensor(out, inp)
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
        dist.all_reduce_coalesced(xs)
        eq(xs[0], sum(data(r, shape=(3,)) for r in range(W)), "coalesced[0]")
        eq(xs[1], sum(data(r + 10, shape=(2, 2)) for r in range(W)), "coalesced[1]")

    def t_coalescing_manager():
        # What FSDP issues: all_gather_into_tensor, reduce_scatter_tensor and all_reduce
        # inside torch's coalescing manager, which reach the backend as one
        # allgather_into_tensor_coalesced, reduce_scatter_tensor_coalesced and
        # allreduce_coalesced call each.
        from torch.distributed.distributed_c10d import _coalescing_manager

        def coalesced(call, seed, in_shapes, out_shape):
            """call(out, in) for each input shape inside one coalescing manager, waited on;
            returns the outputs (out_shape(in_shape) each)."""
            ins = [data(rank + seed * i, shape=sh) for i, sh in enumerate(in_shapes)]
            outs = [torch.empty(out_shape(sh), dtype=torch.float64, device=dev)
                    for sh in in_shapes]
            with _coalescing_manager(async_ops=True) as cm:
                for o, x in zip(outs, ins):
                    call(o, x)
            cm.wait()
            return outs

        shapes = [(2, 3), (4,)]
        outs = coalesced(dist.all_gather_into_tensor, 20, shapes,
                         lambda sh: (W * sh[0],) + sh[1:])
        for i, sh in enumerate(shapes):
            eq(outs[i], torch.cat([data(r + 20 * i, shape=sh) for r in range(W)]),
               "coalesced all_gather_into_tensor[%d]" % i)
        rs_shapes = [(W * 3,), (W * 2, 2)]
        rs_outs = coalesced(dist.reduce_scatter_tensor, 40, rs_shapes,
                            lambda sh: (sh[0] // W,) + sh[1:])
        for i, sh in enumerate(rs_shapes):
            n = sh[0] // W
            ref = sum(data(r + 40 * i, shape=sh) for r in range(W))[rank * n:(rank + 1) * n]
            eq(rs_outs[i], ref, "coalesced reduce_scatter_tensor[%d]" % i)
        xs = [data(rank + 60 * i, shape=sh) for i, sh in enumerate(shapes)]
        with _coalescing_manager():
            for x in xs:
                dist.all_reduce(x)
        for i, sh in enumerate(shapes):
            eq(xs[i], sum(data(r + 60 * i, shape=sh) for r in range(W)),
               "coalesced all_reduce[%d]" % i)

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
        dist.all_gather_into_tensor(big, tr(rank))
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
        dist.reduce_scatter_tensor(out, inp)
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
    check("coalescing_manager", t_coalescing_manager)
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


def use_backend():
    """Register the "dlpg" backend (the C++ one, the only one)."""
    import dlpg.torch
    assert dlpg.torch.IMPLEMENTATION == "cpp", dlpg.torch.IMPLEMENTATION


def torch_collectives(rank, world, init, device, seed, queue):
    try:
        import torch
        import torch.distributed as dist
        use_backend()
        if device == "cuda":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        init_torch("dlpg", init, rank, world)
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


def ddp_train(rank, world, init, backend, device, out_path, queue):
    try:
        import torch
        import torch.distributed as dist
        import dlpg.torch  # noqa: F401
        if device == "cuda":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        init_torch(backend, init, rank, world)
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


def mixed_frameworks(rank, url, queue):
    """Rank 0 uses torch tensors, rank 1 NumPy arrays, through dlpg.Group directly."""
    try:
        import numpy as np
        import dlpg
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


def bad_input(rank, url, queue):
    """DlpgError on bad input: status and message."""
    try:
        import numpy as np
        import dlpg
        res = {}
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


def dropped_works(rank, url, queue):
    """A dlpg.Work dropped while its recv is still pending is parked with its buffer
    (dlpg._work), and freed by a later operation once complete."""
    res = {}
    try:
        import numpy as np

        import dlpg
        from dlpg import _work
        store = dlpg.Store(url, 60)
        g = dlpg.Group(store, rank, 2, timeout=60)
        if rank == 0:
            buf = np.zeros(1000, dtype=np.float64)
            w = g.recv(buf, 1, tag=3, async_op=True)
            del w
            parked_after_drop = _work.parked()
            store.set("go", b"1")
            g.barrier()
            g.barrier()
            # The recv completes on its own transport (sends and receives stay on Gloo while
            # the collectives of ranks on one host run on shared memory), so the barriers do
            # not order it: a later operation reaps it once it has completed.
            # Each allreduce reaps first; its sum tells both ranks whether to go on.
            import time
            for _ in range(500):
                flag = np.array([1.0 if _work.parked() else 0.0])
                g.allreduce(flag)
                if flag[0] == 0:
                    break
                time.sleep(0.01)
            ok = np.array_equal(buf, np.arange(1000, dtype=np.float64))
            res["dlpg_work"] = "ok" if (parked_after_drop == 1 and _work.parked() == 0 and ok) \
                else "parked %d then %d, data %s" % (parked_after_drop, _work.parked(), ok)
        else:
            store.wait(["go"], 30)
            g.send(np.arange(1000, dtype=np.float64), 0, tag=3)
            g.barrier()
            g.barrier()
            for _ in range(500):  # as many allreduces as rank 0 needs to see the reap
                flag = np.zeros(1)  # rank 0's part says whether its recv is still parked
                g.allreduce(flag)
                if flag[0] == 0:
                    break
            res["dlpg_work"] = "ok"
        g.destroy()
    except Exception:  # noqa: BLE001 - reported to the test.
        res["setup"] = traceback.format_exc()
    queue.put((rank, res))

def p2p_self_batch(rank, world, init, queue):
    """batch_isend_irecv that includes a send to self (torch does that at world size 1):
    dlpg matches it with the receive from self of the same batch."""
    try:
        import torch
        import torch.distributed as dist
        import dlpg.torch  # noqa: F401 - registers "dlpg"
        init_torch("dlpg", init, rank, world)
        g = torch.Generator().manual_seed(1234 + rank)
        x = torch.randn(1000, generator=g, dtype=torch.float64)
        y = torch.zeros(1000, dtype=torch.float64)
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        xr = torch.full((7,), float(rank), dtype=torch.float32)
        yr = torch.zeros(7, dtype=torch.float32)
        ops = [dist.P2POp(dist.irecv, y, rank), dist.P2POp(dist.isend, x, rank),
               dist.P2POp(dist.isend, xr, nxt), dist.P2POp(dist.irecv, yr, prv)]
        for q in dist.batch_isend_irecv(ops):
            q.wait()
        res = {"self": bool(torch.equal(x, y)),
               "ring": bool(torch.equal(yr, torch.full((7,), float(prv))))}
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        res = {"error": traceback.format_exc()}
    queue.put((rank, res))
