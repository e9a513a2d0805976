#!/usr/bin/env python3
"""FSDP2 training steps on CPU: the "dlpg" backend vs torch's gloo, side by side.

N processes on this host (--ranks, default 4), torch's TCPStore on loopback (served here,
port 0 read back); one job with a "dlpg" default group, then one with a "gloo" one, the same
steps in each. The model: --layers Linear(--width, --width) layers with ReLU between them
(float32; 10 x 1024 x 1024 + biases = 10.5 M parameters by default), each layer and the root
wrapped by FSDP2's fully_shard (torch.distributed.fsdp.fully_shard): every step all-gathers
each layer's parameters for the forward and again for the backward (reshard after forward)
and reduce-scatters its gradients (all_gather_into_tensor and reduce_scatter_tensor), then an
AdamW step on the local shards. A step's time is its slowest rank's (from a barrier); the
table has the median over --rounds jobs per backend (alternating) of --steps steps each
after --warmup, and the ratio dlpg / gloo (target:
dlpg <= 0.7x gloo). Each rank uses --threads compute threads (default 1). Writes
bench/results/torch-fsdp2-<cores>core.md (or --out).

    PYTHONPATH=python_shim DLPG_LIBRARY=build/libdlpg.so python3 bench/torch_fsdp2.py [--ranks 4]

On a 16-core machine (4 ranks x 4 compute threads):

    PYTHONPATH=python_shim DLPG_LIBRARY=build/libdlpg.so python3 bench/torch_fsdp2.py \
        --ranks 4 --threads 4 --steps 20
"""

import argparse
import datetime
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time

from bench_util import cpu_model

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "python_shim"))


def _worker(rank, world, port, backend, a, q):
    import torch
    import torch.distributed as dist
    import dlpg.torch  # noqa: F401 - registers "dlpg"
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    torch.set_num_threads(a.threads)
    timeout = datetime.timedelta(seconds=300)
    store = dist.TCPStore("127.0.0.1", port, world, False, timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    torch.manual_seed(0)
    layers = []
    for i in range(a.layers):
        layers.append(torch.nn.Linear(a.width, a.width))
        if i + 1 < a.layers:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    nparams = sum(p.numel() for p in model.parameters())
    # A CPU mesh, named: without one fully_shard takes the machine's accelerator, so on a GPU
    # host a backend that serves CUDA tensors (dlpg) would train on the GPU instead.
    mesh = init_device_mesh("cpu", (world,))
    for m in model:
        if isinstance(m, torch.nn.Linear):
            fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(rank)
    times = []
    for step in range(a.warmup + a.steps):
        x = torch.randn(a.batch, a.width, generator=g)
        dist.barrier()
        t0 = time.perf_counter()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        t1 = time.perf_counter()
        if step >= a.warmup:
            times.append(t1 - t0)
    dist.barrier()
    q.put((rank, {"times": times, "nparams": nparams}))
    dist.destroy_process_group()


def run_job(backend, a):
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=300),
                          wait_for_workers=False)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, a.ranks, store.port, backend, a, q))
             for r in range(a.ranks)]
    for p in procs:
        p.start()
    got = dict(q.get(timeout=1200) for _ in range(a.ranks))
    for p in procs:
        p.join(60)
    return [max(got[r]["times"][s] for r in got) for s in range(a.steps)], got[0]["nparams"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1, help="torch compute threads per rank")
    ap.add_argument("--rounds", type=int, default=2, help="jobs per backend, alternating")
    ap.add_argument("--backends", default="dlpg,gloo")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    import torch
    # Jobs alternate (dlpg, gloo, dlpg, ...) so that a change of the machine's load during the
    # run falls on both backends; each backend's steps of all its jobs make its median.
    steps, nparams = {}, 0
    backends = a.backends.split(",")
    for k in range(a.rounds):
        for b in (backends if k % 2 == 0 else backends[::-1]):
            per_step, nparams = run_job(b, a)
            steps.setdefault(b, []).extend(per_step)
    res = {b: (statistics.median(v), min(v), max(v)) for b, v in steps.items()}
    cores = os.cpu_count()
    cmd = ("python3 bench/torch_fsdp2.py --ranks %d --layers %d --width %d --batch %d "
           "--warmup %d --steps %d --threads %d --rounds %d"
           % (a.ranks, a.layers, a.width, a.batch, a.warmup, a.steps, a.threads, a.rounds))
    lines = [
        "# FSDP2 (fully_shard) training step on CPU, %d ranks: dlpg vs gloo" % a.ranks, "",
        "16-core machine: `python3 bench/torch_fsdp2.py --ranks 4 --threads 4 --steps 20` "
        "(PYTHONPATH=python_shim, DLPG_LIBRARY=build/libdlpg.so)", "",
        "- command: `%s` (PYTHONPATH=python_shim, DLPG_LIBRARY=build/libdlpg.so)" % cmd,
        "- machine: %s, %s, %d cores" % (platform.node(),
                                         cpu_model(platform.processor() or "unknown CPU"), cores),
        "- date: %s UTC" % datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"),
        "- torch %s, Python %s; model: %d x Linear(%d, %d), %.1f M float32 parameters, each "
        "layer and the root fully_shard'ed; batch %d; AdamW; %d compute thread(s) per rank; "
        "slowest rank's step time, median (min-max) over %d jobs x %d steps (each after %d "
        "warm-up; jobs alternate between the backends); "
        "target: dlpg <= 0.7x gloo"
        % (torch.__version__, platform.python_version(), a.layers, a.width, a.width,
           nparams / 1e6, a.batch, a.threads, a.rounds, a.steps, a.warmup),
        "",
        "| backend | step (ms), median | min-max (ms) |",
        "|---|---|---|",
    ]
    for b, (med, lo, hi) in res.items():
        lines.append("| %s | %.1f | %.1f-%.1f |" % (b, med * 1e3, lo * 1e3, hi * 1e3))
    if "dlpg" in res and "gloo" in res:
        lines += ["", "dlpg / gloo (medians): %.2fx" % (res["dlpg"][0] / res["gloo"][0])]
    text = "\n".join(lines) + "\n"
    print(text)
    out = a.out or os.path.join(HERE, "results", "torch-fsdp2-%dcore.md" % cores)
    with open(out, "w") as f:
        f.write(text)
    print("written to", out)


if __name__ == "__main__":
    main()
