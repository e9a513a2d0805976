#!/usr/bin/env python3
"""torch.distributed.all_reduce on "dlpg" against torch's own backend, side by side.

For each world size (default 1 and 2; on CUDA only as many as there are GPUs), that many
processes; the default group uses torch's backend ("gloo" on CPU, "nccl" on CUDA) and a
second group over the same ranks uses "dlpg" (the implementation dlpg.torch picked: the C++
extension when built). Rounds alternate between the two, so both see the same machine
state. 8 B: 20 calls between synchronisations, per-call time; 64 MiB: bandwidth. Medians over
rounds. Prints one markdown table and writes it to bench/results/torch-overhead-<cpu|cuda>.md.

    PYTHONPATH=python_shim DLPG_LIBRARY=build/libdlpg.so python3 bench/torch_overhead.py [--device cpu|cuda] [--worlds 1,2]
"""

import argparse
import datetime
import os
import platform
import statistics
import sys
import time

from bench_util import cpu_model, spawn_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "python_shim"))

SMALL_BYTES = 8
LARGE_BYTES = 64 << 20
SMALL_CALLS = 20


def _sync(torch, device):
    if device == "cuda":
        torch.cuda.synchronize()


def _worker(rank, world, port, device, rounds_small, rounds_large, q):
    import torch
    import torch.distributed as dist
    import dlpg.torch  # registers "dlpg"

    if device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    native = "nccl" if device == "cuda" else "gloo"
    # The driver serves the TCPStore (port 0, read back: no port picked by bind-and-release).
    timeout = datetime.timedelta(seconds=120)
    store = dist.TCPStore("127.0.0.1", port, world, False, timeout)
    dist.init_process_group(native, store=store, rank=rank, world_size=world, timeout=timeout)
    groups = {native: dist.group.WORLD, "dlpg": dist.new_group(list(range(world)), backend="dlpg")}
    small = torch.ones(SMALL_BYTES // 4, dtype=torch.float32, device=device)
    large = torch.ones(LARGE_BYTES // 4, dtype=torch.float32, device=device)
    large_calls = 5 if device == "cuda" else 1
    times = {(b, s): [] for b in groups for s in ("small", "large")}

    def timed(group, t, calls):
        dist.all_reduce(t, group=group)  # Aligns the ranks and warms the path.
        _sync(torch, device)
        t0 = time.perf_counter()
        for _ in range(calls):
            dist.all_reduce(t, group=group)
        _sync(torch, device)
        return (time.perf_counter() - t0) / calls

    for name, g in groups.items():  # Warm-up: connections, communicators, allocations.
        for _ in range(3):
            timed(g, small, SMALL_CALLS)
        if rounds_large:
            timed(g, large, 1)
    order = list(groups)
    for i in range(max(rounds_small, rounds_large)):
        for name in (order if i % 2 == 0 else order[::-1]):
            if i < rounds_small:
                times[(name, "small")].append(timed(groups[name], small, SMALL_CALLS))
            if i < rounds_large:
                times[(name, "large")].append(timed(groups[name], large, large_calls))
    dist.barrier()
    out = {k: statistics.median(v) for k, v in times.items() if v}
    out["impl"] = dlpg.torch.IMPLEMENTATION
    q.put((rank, out))
    dist.destroy_process_group()


def _machine(device):
    cpu = cpu_model(platform.processor() or "")
    desc = "%s, %s, %d cores" % (platform.node(), cpu, os.cpu_count() or 0)
    if device == "cuda":
        import torch
        desc += ", %d x %s" % (torch.cuda.device_count(), torch.cuda.get_device_name(0))
    return desc


def _measure(world, device, args):
    """{(backend, "small"|"large"): slowest rank's median seconds per call}, implementation."""
    res = spawn_ranks(_worker, world, (device, args.rounds, args.rounds_large))
    impl = res[0].pop("impl")
    for r in res.values():
        r.pop("impl", None)
    # The slower rank's medians (a collective ends when its last rank does).
    return {k: max(res[r][k] for r in res) for k in res[0]}, impl


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default=None)
    ap.add_argument("--worlds", default="1,2", help="world sizes, comma-separated")
    ap.add_argument("--rounds", type=int, default=30, help="rounds at 8 B")
    ap.add_argument("--rounds-large", type=int, default=10, help="rounds at 64 MiB")
    ap.add_argument("--out", default=None, help="markdown file (default bench/results/...)")
    args = ap.parse_args()
    import torch
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    native = "nccl" if device == "cuda" else "gloo"
    worlds = [int(w) for w in args.worlds.split(",")]
    if device == "cuda":
        worlds = [w for w in worlds if w <= torch.cuda.device_count()]
    cmd = "python3 " + " ".join([os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:])
    rows, impls = [], set()
    for world in worlds:
        med, impl = _measure(world, device, args)
        impls.add(impl)
        small_n, small_d = med[(native, "small")], med[("dlpg", "small")]
        rows.append("| %d | 8 B | time per call (us) | %.1f | %.1f | %.2fx | <= 0.9x |" % (
            world, small_n * 1e6, small_d * 1e6, small_d / small_n))
        if not args.rounds_large:
            continue  # --rounds-large 0: 8 B calls alone, no idle gaps between windows.
        bw_n = LARGE_BYTES / med[(native, "large")] / 1e9
        bw_d = LARGE_BYTES / med[("dlpg", "large")] / 1e9
        rows += [
            "| %d | 64 MiB | time per call (ms) | %.2f | %.2f | %.2fx | |" % (
                world, med[(native, "large")] * 1e3, med[("dlpg", "large")] * 1e3,
                med[("dlpg", "large")] / med[(native, "large")]),
            "| %d | 64 MiB | bandwidth (GB/s, algbw) | %.2f | %.2f | %.2fx | >= 0.98x |" % (
                world, bw_n, bw_d, bw_d / bw_n),
        ]
    lines = [
        "# torch.distributed all_reduce: dlpg vs %s (%s)" % (native, device),
        "",
        "- command: `%s` (PYTHONPATH=python_shim, DLPG_LIBRARY=%s)" % (
            cmd, os.environ.get("DLPG_LIBRARY", "(default search)")),
        "- machine: %s" % _machine(device),
        "- date: %s" % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "- torch %s, Python %s, dlpg backend: %s; float32, medians over %d rounds (8 B, %d "
        "calls between syncs) and %d rounds (64 MiB), rounds interleaved" % (
            torch.__version__, platform.python_version(), "/".join(sorted(impls)), args.rounds,
            SMALL_CALLS, args.rounds_large),
        "",
        "| world | size | metric | %s | dlpg | dlpg / %s | target |" % (native, native),
        "|---|---|---|---|---|---|---|",
    ] + rows + [""]
    text = "\n".join(lines)
    print(text)
    out = args.out or os.path.join(HERE, "results", "torch-overhead-%s.md" % device)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write(text)
    print("wrote", out)


if __name__ == "__main__":
    main()
