"""Rank body of test_torch_training: a small model trained for a few steps with DDP,
ZeroRedundancyOptimizer and FSDP2 (fully_shard, with a gradient divide factor) on a "dlpg"
group and on a "gloo" group over the same ranks, from the same seeded weights and per-rank
data; the final parameters of each come back to the test, which compares them."""

import traceback

from dlpg_workers import init_torch, use_backend

STEPS = 4


def _model(torch):
    torch.manual_seed(1234)  # the same initial weights on every rank and for every backend
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 8)).double()


def _batches(torch, seed, rank):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return [(torch.randn(6, 16, generator=g, dtype=torch.float64),
             torch.randn(6, 8, generator=g, dtype=torch.float64)) for _ in range(STEPS)]


def _train(torch, model, opt, batches):
    for x, y in batches:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def _ddp(torch, group, seed, rank):
    from torch.nn.parallel import DistributedDataParallel as DDP
    m = DDP(_model(torch), process_group=group)
    _train(torch, m, torch.optim.SGD(m.parameters(), lr=0.1), _batches(torch, seed, rank))
    return [p.detach().clone() for p in m.module.parameters()]


def _zero(torch, group, seed, rank):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP
    m = DDP(_model(torch), process_group=group)
    opt = ZeroRedundancyOptimizer(m.parameters(), optimizer_class=torch.optim.Adam, lr=0.01,
                                  process_group=group)
    _train(torch, m, opt, _batches(torch, seed, rank))
    return [p.detach().clone() for p in m.module.parameters()]


def _fsdp2(torch, group, seed, rank):
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard
    mesh = DeviceMesh.from_group(group, "cpu")
    m = _model(torch)
    for layer in (m[0], m[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    # A divide factor other than the world size: the sum of the gradients divided by 3 (set on
    # every sharded module: each holds its own parameter group).
    for mod in (m[0], m[2], m):
        mod.set_gradient_divide_factor(3.0)
    _train(torch, m, torch.optim.SGD(m.parameters(), lr=0.1), _batches(torch, seed, rank))
    return [p.full_tensor().detach().clone() for p in m.parameters()]


def training_vs_gloo(rank, world, init, seed, queue):
    import torch
    import torch.distributed as dist
    res = {}
    try:
        use_backend()
        init_torch("gloo", init, rank, world)
        res["init"] = [p.detach().tolist() for p in _model(torch).parameters()]
        groups = {"dlpg": dist.new_group(backend="dlpg"), "gloo": dist.new_group(backend="gloo")}
        for kind, body in (("ddp", _ddp), ("zero", _zero), ("fsdp2", _fsdp2)):
            res[kind] = {b: [t.tolist() for t in body(torch, g, seed, rank)]
                         for b, g in groups.items()}
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the test reports it with the rank
        res["error"] = traceback.format_exc()
    queue.put((rank, res))
