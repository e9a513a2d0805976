#!/usr/bin/env python3
"""Ranks sharing ONE GPU (which NCCL refuses): torch's gloo on CUDA tensors against "dlpg"
(its CUDA IPC path), side by side, with a single-process device copy of each size as the
memory reference, and a DDP training step of a small model.

N processes (default 2) all on cuda:0. The default group is gloo; a second group over the
same ranks is "dlpg". Rounds alternate between the two. all_reduce, all_gather_into_tensor
and broadcast, float32: `calls` back-to-back calls between two synchronisations, time per
call, median over rounds, the slowest rank's. The copy reference: `dst.copy_(src)` of the
same size in rank 0 alone (before the collectives), CUDA events, median. DDP: a 4-layer MLP
(1024 wide) trained for 20 steps per round on each backend, time per step, and the same
step without DDP and DDP with torch's noop_hook (no collective: the floors under both).

    PYTHONPATH=python_shim DLPG_LIBRARY=.gpu/lib/libdlpg.so python3 bench/torch_shared_gpu.py \
        [--ranks 2] [--out FILE]

Run it once without and once with MPS (nvidia-cuda-mps-control -d): without MPS the
processes take turns on the GPU.
"""

import argparse
import datetime
import os
import statistics
import sys
import time

from bench_util import spawn_ranks, write_text

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python_shim"))

SIZES = [8, 64 << 10, 1 << 20, 16 << 20, 64 << 20]
OPS = ["all_reduce", "all_gather", "broadcast"]
DDP_WARMUP, DDP_STEPS = 5, 20


def _calls(nbytes):
    return 20 if nbytes <= (1 << 20) else 5


def _worker(rank, world, port, rounds, q):
    import torch
    import torch.distributed as dist
    import dlpg.torch  # noqa: F401  registers "dlpg"

    torch.cuda.set_device(0)
    timeout = datetime.timedelta(seconds=120)
    store = dist.TCPStore("127.0.0.1", port, world, False, timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
    groups = {"gloo": dist.group.WORLD, "dlpg": dist.new_group(list(range(world)), backend="dlpg")}
    out = {}
    if rank == 0:  # the memory reference, alone on the GPU
        for n in SIZES:
            src = torch.ones(n // 4, device="cuda")
            dst = torch.empty_like(src)
            ts = []
            for _ in range(7):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(_calls(n)):
                    dst.copy_(src)
                b.record()
                b.synchronize()
                ts.append(a.elapsed_time(b) / 1e3 / _calls(n))
            out[("copy", "copy", n)] = statistics.median(ts[1:])
    dist.barrier(group=groups["gloo"])

    def run(op, g, n):
        t = torch.full((n // 4,), float(rank + 1), device="cuda")
        if op == "all_gather":
            o = torch.empty(world * (n // 4), device="cuda")
            f = lambda: dist.all_gather_into_tensor(o, t, group=g)  # noqa: E731
        elif op == "broadcast":
            f = lambda: dist.broadcast(t, 0, group=g)  # noqa: E731
        else:
            f = lambda: dist.all_reduce(t, group=g)  # noqa: E731
        f()
        torch.cuda.synchronize()
        dist.barrier(group=groups["gloo"])
        t0 = time.perf_counter()
        for _ in range(_calls(n)):
            f()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / _calls(n)

    # Correctness first, on both: every rank's all_reduce sum must be world*(world+1)/2.
    for name, g in groups.items():
        t = torch.full((1 << 18,), float(rank + 1), device="cuda")
        dist.all_reduce(t, group=g)
        want = world * (world + 1) / 2
        if not torch.all(t == want):
            raise SystemExit("rank %d: %s all_reduce gave %s, want %s" % (rank, name, t[0].item(), want))
    order = list(groups)
    for i in range(rounds):
        for name in order if i % 2 == 0 else order[::-1]:
            for op in OPS:
                for n in SIZES:
                    out.setdefault((name, op, n), []).append(run(op, groups[name], n))
    # DDP: same model, same data on both backends; time per step.
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.distributed.algorithms.ddp_comm_hooks.debugging_hooks import noop_hook
    # "local": the same step without DDP, no communication at all; "noop": DDP whose
    # communication hook hands each bucket back untouched (torch's noop_hook), so DDP's own
    # bookkeeping (hooks, bucket copies) without any collective: the floors under both.
    for i in range(rounds):
        for name in (order if i % 2 == 0 else order[::-1]) + ["local", "noop"]:
            torch.manual_seed(0)
            model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(4)]).cuda()
            if name == "local":
                ddp = model
            else:  # noop runs DDP on the dlpg group, its hook bypassing the group
                group = groups["dlpg" if name == "noop" else name]
                ddp = DDP(model, process_group=group, device_ids=[0])
            if name == "noop":
                ddp.register_comm_hook(None, noop_hook)
            opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
            x = torch.randn(32, 1024, device="cuda")
            for step in range(DDP_WARMUP + DDP_STEPS):
                if step == DDP_WARMUP:
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                opt.zero_grad()
                ddp(x).sum().backward()
                opt.step()
            torch.cuda.synchronize()
            out.setdefault((name, "ddp", 0), []).append((time.perf_counter() - t0) / DDP_STEPS)
            del ddp, model, opt
    res = {k: (statistics.median(v) if isinstance(v, list) else v) for k, v in out.items()}
    dist.barrier(group=groups["gloo"])
    q.put((rank, res))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import torch
    res = spawn_ranks(_worker, args.ranks, (args.rounds,), timeout=500)
    slow = {k: max(res[r][k] for r in res if k in res[r]) for k in res[0]}
    lines = ["# %d ranks sharing one GPU: torch gloo (CUDA tensors) vs dlpg (CUDA IPC)" % args.ranks, "",
             "- command: `python3 bench/torch_shared_gpu.py --ranks %d --rounds %d`" % (args.ranks, args.rounds),
             "- machine: %s; torch %s; CUDA_MPS_PIPE_DIRECTORY %s; %s UTC" % (
                 torch.cuda.get_device_name(0), torch.__version__,
                 "set" if os.environ.get("CUDA_MPS_PIPE_DIRECTORY") else "unset",
                 datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M")),
             "- time per call (us), slowest rank's median over rounds; copy: `dst.copy_(src)` in one process; "
             "busbw for all_reduce = 2(n-1)/n x size / time", "",
             "| op | size | gloo (us) | dlpg (us) | dlpg / gloo | copy (us) | dlpg algbw (GB/s) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for op in OPS:
        for n in SIZES:
            g, d, c = slow[("gloo", op, n)], slow[("dlpg", op, n)], slow[("copy", "copy", n)]
            lines.append("| %s | %d | %.1f | %.1f | %.3fx | %.1f | %.1f |" % (
                op, n, g * 1e6, d * 1e6, d / g, c * 1e6, n / d / 1e9))
    g, d, c, z = (slow[(k, "ddp", 0)] for k in ("gloo", "dlpg", "local", "noop"))
    lines += ["", "DDP step (4 x Linear(1024, 1024), batch 32, SGD; %d steps after %d): gloo %.2f ms, "
              "dlpg %.2f ms: %.3fx; the same step without DDP: %.2f ms (%.3fx gloo's); DDP with "
              "torch's noop_hook (no collective): %.2f ms (%.3fx gloo's)" % (
                  DDP_STEPS, DDP_WARMUP, g * 1e3, d * 1e3, d / g, c * 1e3, c / g, z * 1e3, z / g)]
    write_text("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
