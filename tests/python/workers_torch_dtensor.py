"""Rank body of test_torch_dtensor: a small MLP trained on a 2-D DeviceMesh (dp x tp, CPU),
tensor parallel (ColwiseParallel, RowwiseParallel) on "tp" and FSDP2's fully_shard on "dp",
once with "dlpg" as the default backend and once with "gloo" (a fresh default group on the
same store, under another prefix); each rank reports every parameter's full tensor after
every step, and its loss, for the test to compare."""

import datetime
import traceback

STEPS = 4
IN, HIDDEN, OUT, BATCH = 16, 32, 8, 6


def _train(torch, dist, backend, store, rank, world, seed):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    dist.init_process_group(backend, store=dist.PrefixStore(backend, store), rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))
    try:
        mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
        torch.manual_seed(seed)  # the same initial model on every rank
        model = torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(),
                                    torch.nn.Linear(HIDDEN, OUT)).double()
        parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
        fully_shard(model, mesh=mesh["dp"])
        opt = torch.optim.AdamW(model.parameters(), lr=0.05)
        dp = mesh["dp"].get_local_rank()
        g = torch.Generator().manual_seed(seed * 100 + dp)  # each dp rank its own batches
        history, losses = [], []
        for _ in range(STEPS):
            x = torch.randn(BATCH, IN, generator=g, dtype=torch.float64)
            y = torch.randn(BATCH, OUT, generator=g, dtype=torch.float64)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(float(loss.detach()))
            history.append({n: p.full_tensor().detach().clone()
                            for n, p in model.named_parameters()})
        return history, losses
    finally:
        dist.destroy_process_group()


def torch_dtensor(rank, world, init, seed, queue):
    res = {}
    try:
        import warnings
        warnings.filterwarnings("ignore")  # FSDP2's and DTensor's advice, not results
        import torch
        import torch.distributed as dist
        from dlpg_workers import use_backend
        use_backend()
        torch.set_num_threads(1)
        host, port = init
        store = dist.TCPStore(host, port, world, False, datetime.timedelta(seconds=60))
        for backend in ("dlpg", "gloo"):
            history, losses = _train(torch, dist, backend, store, rank, world, seed)
            res[backend] = {"history": [{n: t.numpy() for n, t in h.items()} for h in history],
                            "losses": losses}
    except Exception:  # noqa: BLE001 - reported to the test.
        res["error"] = traceback.format_exc()
    queue.put((rank, res))
