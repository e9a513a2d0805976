"""Rank bodies of test_shared_gpu: every rank on cuda:0, which NCCL refuses and dlpg serves
on its CUDA IPC path. torch: collectives against host-computed references, and DDP and FSDP2
training compared with one CPU process training on the whole batch; dlpg.Group on CuPy
arrays."""

import traceback

import numpy as np

from dlpg_workers import init_torch, run_check


def _data(rank, key, n):
    return np.random.default_rng(1000 * key + rank).standard_normal(n).astype(np.float32)


def torch_shared(rank, world, init, steps, queue):
    res = {}
    try:
        import torch
        import torch.distributed as dist
        import dlpg.torch  # noqa: F401 - registers "dlpg"
        dev = torch.device("cuda", 0)
        torch.cuda.set_device(dev)
        init_torch("dlpg", init, rank, world)
    except Exception:  # noqa: BLE001
        queue.put((rank, {"setup": traceback.format_exc()}))
        return

    def collectives():
        n = 100003
        x = torch.from_numpy(_data(rank, 1, n)).to(dev)
        dist.all_reduce(x)
        want = sum(_data(r, 1, n).astype(np.float64) for r in range(world))
        np.testing.assert_allclose(x.cpu().numpy(), want, rtol=1e-5, atol=1e-5)
        y = torch.from_numpy(_data(rank, 2, 4099)).to(dev)
        dist.broadcast(y, src=world - 1)
        np.testing.assert_array_equal(y.cpu().numpy(), _data(world - 1, 2, 4099))
        outs = [torch.empty(777, device=dev) for _ in range(world)]
        dist.all_gather(outs, torch.from_numpy(_data(rank, 3, 777)).to(dev))
        for r in range(world):
            np.testing.assert_array_equal(outs[r].cpu().numpy(), _data(r, 3, 777))
        z = torch.from_numpy(_data(rank, 4, 64)).to(dev)
        if rank == 0:
            dist.send(z, dst=1)
        elif rank == 1:
            dist.recv(z, src=0)
            np.testing.assert_array_equal(z.cpu().numpy(), _data(0, 4, 64))
        torch.cuda.synchronize()

    def mlp():
        return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4))

    def train(model, ref, params):
        """steps of SGD on this rank's batch of 8 (model, on cuda:0) and on the whole batch
        (ref, one CPU process): the ranks' averaged mean-loss gradients are the whole
        batch's, so the parameters must agree."""
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
        for step in range(steps):
            g = torch.Generator().manual_seed(step)
            xs = torch.randn(world, 8, 32, generator=g)
            ys = torch.randn(world, 8, 4, generator=g)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(xs[rank].to(dev)), ys[rank].to(dev)).backward()
            opt.step()
            ropt.zero_grad()
            torch.nn.functional.mse_loss(ref(xs.reshape(-1, 32)), ys.reshape(-1, 4)).backward()
            ropt.step()
        for a, b in zip(params(), ref.parameters()):
            torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-4, atol=1e-5)

    def ddp():
        from torch.nn.parallel import DistributedDataParallel as DDP
        torch.manual_seed(0)
        ref = mlp()
        model = DDP(mlp().to(dev), device_ids=[0])
        model.module.load_state_dict(ref.state_dict())
        train(model, ref, model.module.parameters)

    def fsdp2():
        from torch.distributed.device_mesh import init_device_mesh
        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:  # torch before 2.6
            from torch.distributed._composable.fsdp import fully_shard
        torch.manual_seed(0)
        ref = mlp()
        model = mlp().to(dev)
        model.load_state_dict(ref.state_dict())
        mesh = init_device_mesh("cuda", (world,))
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        train(model, ref, lambda: (p.full_tensor() for p in model.parameters()))

    run_check(res, "collectives", collectives)
    run_check(res, "ddp", ddp)
    run_check(res, "fsdp2", fsdp2)
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        res["teardown"] = traceback.format_exc()
    queue.put((rank, res))


def cupy_shared(rank, world, url, queue):
    res = {}
    try:
        import cupy as cp
        import dlpg
        cp.cuda.Device(0).use()
        store = dlpg.Store(url)
        g = dlpg.Group(store, rank, world, name="shared-gpu-cupy")
        n = 65537
        x = cp.asarray(_data(rank, 5, n))
        g.allreduce(x, op="max")
        want = np.max([_data(r, 5, n) for r in range(world)], axis=0)
        np.testing.assert_array_equal(cp.asnumpy(x), want)
        out = cp.empty(world * 1000, dtype=cp.float32)
        g.allgather(cp.asarray(_data(rank, 6, 1000)), out)
        np.testing.assert_array_equal(cp.asnumpy(out),
                                      np.concatenate([_data(r, 6, 1000) for r in range(world)]))
        cp.cuda.Device(0).synchronize()
        res["cupy"] = "ok"
    except Exception:  # noqa: BLE001
        res["cupy"] = traceback.format_exc()
    queue.put((rank, res))
