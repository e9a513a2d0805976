"""Rank body of test_cuda_graph: CUDA-graph capture of every shim and backend operation
(runs in its own spawned process)."""

import traceback

from dlpg_workers import init_torch, use_backend


def graph_capture(rank, world, init, kind, shared, queue):
    """CUDA-graph capture as torch documents it: warm up on a side stream, then capture in
    `with torch.cuda.graph(g):` (its own capture stream, default "global" error mode), then
    replay on new input values and compare with the reference. kind: "shim" (dlpg.Group on
    torch tensors), "torch" (torch.distributed on the "dlpg" backend), "cupy" (dlpg.Group
    on CuPy arrays, captured with CuPy's stream capture). Each kind runs in a fresh process:
    the reported failure was at a process's first capture. init: the (host, port) of the
    TCPStore the test serves for torch.distributed, or the URL of its dlpg store. shared:
    every rank on GPU 0 (the CUDA IPC path) instead of GPU rank."""
    res = {}
    gpu = 0 if shared else rank
    try:
        import torch
        torch.cuda.set_device(gpu)
        dev = torch.device("cuda", gpu)
        if kind == "torch":
            use_backend()
            init_torch("dlpg", init, rank, world)
        else:
            import dlpg
            g = dlpg.Group(dlpg.Store(init, 60), rank, world, timeout=60)
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
    elif kind == "torch":
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
        capture_torch("all_gather_into_tensor", fill,
                      lambda: dist.all_gather_into_tensor(big, x),
                      lambda s: [(big, torch.cat([val(r, n, s) for r in range(W)]))])
        capture_torch("reduce_scatter_tensor", fill,
                      lambda: dist.reduce_scatter_tensor(small, big),
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
        _cupy_captures(cupy, g, rank, gpu, W, n, res)
    try:
        torch.cuda.synchronize()
        if kind == "torch":
            import torch.distributed as dist
            dist.destroy_process_group()
        else:
            g.destroy()
    except Exception:  # noqa: BLE001
        res["teardown"] = traceback.format_exc()
    queue.put((rank, res))


def _cupy_captures(cupy, g, rank, gpu, W, n, res):
    """Every dlpg.Group operation on CuPy arrays, captured with CuPy's stream capture in the
    global mode (warm-up on the same stream first), then replayed on new values."""
    mode = getattr(cupy.cuda.runtime, "streamCaptureModeGlobal", None)

    def val(r, salt):
        return (cupy.arange(n, dtype=cupy.float32) % 17) * (r + 1) + salt

    with cupy.cuda.Device(gpu):
        x = cupy.empty(n, cupy.float32)
        y = cupy.empty(n, cupy.float32)
        big = cupy.empty(W * n, cupy.float32)
        small = cupy.empty(n, cupy.float32)

        def fill(salt):
            x[...] = val(rank, salt)
            big[...] = cupy.concatenate([val(rank, salt + j) for j in range(W)])

        def total(salt):
            return sum(val(r, salt) for r in range(W))

        cases = [
            ("cupy_allreduce", lambda: g.allreduce(x, output=y), lambda s: [(y, total(s))]),
            ("cupy_broadcast", lambda: g.broadcast(x, root=0, output=y),
             lambda s: [(y, val(0, s))]),
            ("cupy_reduce", lambda: g.reduce(x, root=0, output=y),
             lambda s: [(y, total(s))] if rank == 0 else []),
            ("cupy_allgather", lambda: g.allgather(x, big),
             lambda s: [(big, cupy.concatenate([val(r, s) for r in range(W)]))]),
            ("cupy_reduce_scatter", lambda: g.reduce_scatter(big, small),
             lambda s: [(small, sum(val(r, s + rank) for r in range(W)))]),
        ]
        stream = cupy.cuda.Stream(non_blocking=True)
        for name, body, expect in cases:
            try:
                with stream:
                    fill(0.0)
                    body()  # warm-up
                    stream.synchronize()
                    if mode is None:
                        stream.begin_capture()
                    else:
                        stream.begin_capture(mode)
                    body()
                    graph = stream.end_capture()
                    for salt in (3.0, 5.0):
                        fill(salt)
                        graph.launch(stream)
                        stream.synchronize()
                        for got, ref in expect(salt):
                            if not bool((got == ref).all()):
                                raise AssertionError("%s (salt %s): got %s expected %s"
                                                     % (name, salt, got, ref))
                res[name] = "ok"
            except Exception:  # noqa: BLE001
                res[name] = traceback.format_exc()
