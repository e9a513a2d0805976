#!/usr/bin/env python3
"""torch.distributed all_to_all_single with uneven split sizes on CPU: the "dlpg" backend's
native dlpg_alltoallv, the send/recv emulation it replaced, and torch's gloo, side by side.

N processes on this host (--ranks, default 4), torch's TCPStore on loopback (served here,
port 0 read back). Each rank sends S bytes in all (--sizes, default 1 KiB .. 16 MiB) of
float32 with skew 4:1: its block to the next rank ((rank + 1) % N) is four times each other
block (its own block included). Three ways, in interleaved rounds on the same ranks:
  native     dist.all_to_all_single(out, in, out_splits, in_splits) on a "dlpg" group
             (one dlpg_alltoallv)
  emulation  what the dlpg backend did before dlpg_alltoallv: dist.batch_isend_irecv of the
             per-peer slices on the same "dlpg" group (one batch of sends and receives,
             peers in ring order) and a copy of the rank's own block
  gloo       dist.all_to_all_single on a "gloo" group
The first round checks that the three outputs are equal. Times are the slowest rank's median
per call; prints a markdown table and writes it to
bench/results/torch-alltoall-uneven-<cores>core.md (or --out).

    PYTHONPATH=python_shim DLPG_LIBRARY=build/libdlpg.so python3 bench/torch_alltoall_uneven.py [--ranks 4]
"""

import argparse
import datetime
import os
import platform
import statistics
import sys
import time

from bench_util import cpu_model, fmt_size, spawn_ranks

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "python_shim"))

DEFAULT_SIZES = [1 << k for k in range(10, 25, 2)]  # 1 KiB, 4 KiB, ... 16 MiB
WAYS = ("native", "emulation", "gloo")


def splits_of(rank, world, nbytes):
    """Element counts rank sends to each rank: the next rank's block four times the others'."""
    n = nbytes // 4
    unit = n // (world - 1 + 4)
    s = [unit] * world
    nxt = (rank + 1) % world
    s[nxt] = n - unit * (world - 1)  # 4 units, plus the remainder
    return s


def _calls(nbytes):
    """Calls per timed window: about 4 MiB sent per rank per window, 2 to 50 calls."""
    return max(2, min(50, (4 << 20) // max(nbytes, 1)))


def _worker(rank, world, port, sizes, rounds, q):
    import torch
    import torch.distributed as dist
    import dlpg.torch  # registers "dlpg"

    timeout = datetime.timedelta(seconds=300)
    store = dist.TCPStore("127.0.0.1", port, world, False, timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
    dg = dist.new_group(list(range(world)), backend="dlpg")
    gg = dist.group.WORLD

    def native(out, inp, osp, isp):
        dist.all_to_all_single(out, inp, osp, isp, group=dg)

    def gloo(out, inp, osp, isp):
        dist.all_to_all_single(out, inp, osp, isp, group=gg)

    def emulation(out, inp, osp, isp):
        ins = inp.split(isp)
        outs = out.split(osp)
        ops = []
        for k in range(1, world):  # ring order, empty blocks skipped on both sides
            dst, src = (rank + k) % world, (rank - k) % world
            if isp[dst]:
                ops.append(dist.P2POp(dist.isend, ins[dst], dst, dg))
            if osp[src]:
                ops.append(dist.P2POp(dist.irecv, outs[src], src, dg))
        works = dist.batch_isend_irecv(ops) if ops else []
        outs[rank].copy_(ins[rank])
        for w in works:
            w.wait()

    fns = {"native": native, "emulation": emulation, "gloo": gloo}
    res = {"impl": dlpg.torch.IMPLEMENTATION}
    for nbytes in sizes:
        isp = splits_of(rank, world, nbytes)
        osp = [splits_of(i, world, nbytes)[rank] for i in range(world)]
        g = torch.Generator().manual_seed(rank * 7919 + nbytes)
        inp = torch.randn(sum(isp), generator=g, dtype=torch.float32)
        outs = {w: torch.empty(sum(osp), dtype=torch.float32) for w in WAYS}
        for w in WAYS:  # warm-up, and the check
            fns[w](outs[w], inp, osp, isp)
            fns[w](outs[w], inp, osp, isp)
        for w in ("native", "emulation"):
            if not torch.equal(outs[w], outs["gloo"]):
                raise AssertionError("rank %d, %d B: %s differs from gloo" % (rank, nbytes, w))
        calls = _calls(nbytes)
        times = {w: [] for w in WAYS}
        for r in range(rounds):
            for w in (WAYS if r % 2 == 0 else WAYS[::-1]):
                fn, out = fns[w], outs[w]
                fn(out, inp, osp, isp)  # aligns the ranks
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn(out, inp, osp, isp)
                times[w].append((time.perf_counter() - t0) / calls)
        for w in WAYS:
            res[(nbytes, w)] = statistics.median(times[w])
    dist.barrier()
    q.put((rank, res))
    dist.destroy_process_group()


def _measure(world, sizes, rounds):
    res = spawn_ranks(_worker, world, (sizes, rounds))
    impl = res[0]["impl"]
    keys = [k for k in res[0] if k != "impl"]
    return {k: max(res[r][k] for r in res) for k in keys}, impl


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=4, help="processes (default 4)")
    ap.add_argument("--sizes", default=None,
                    help="bytes each rank sends, comma-separated (default 1 KiB .. 16 MiB, x4)")
    ap.add_argument("--rounds", type=int, default=7, help="timed rounds per size")
    ap.add_argument("--out", default=None, help="markdown file (default bench/results/...)")
    args = ap.parse_args()
    if args.ranks < 2:
        ap.error("--ranks must be at least 2")
    import torch
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else DEFAULT_SIZES
    med, impl = _measure(args.ranks, sizes, args.rounds)
    cores = os.cpu_count() or 0
    cmd = "python3 " + " ".join([os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:])
    rows = []
    for n in sizes:
        t = {w: med[(n, w)] for w in WAYS}
        rows.append("| %s | %.1f | %.1f | %.1f | %.2fx | %.2fx | %.2f |" % (
            fmt_size(n), t["native"] * 1e6, t["emulation"] * 1e6, t["gloo"] * 1e6,
            t["native"] / t["emulation"], t["native"] / t["gloo"],
            n / t["native"] / 1e9))
    lines = [
        "# torch.distributed all_to_all_single, uneven splits (skew 4:1), CPU: dlpg native "
        "vs its former emulation vs gloo",
        "",
        "- command: `%s` (PYTHONPATH=python_shim, DLPG_LIBRARY=%s)" % (
            cmd, os.environ.get("DLPG_LIBRARY", "(default search)")),
        "- machine: %s, %s, %d cores" % (platform.node(), cpu_model(platform.processor() or ""),
                                         cores),
        "- date: %s" % datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "- torch %s, Python %s, dlpg backend: %s; %d ranks (processes on this host, TCPStore "
        "on loopback), float32; each rank's block to the next rank is 4x its other blocks; "
        "slowest rank's median over %d interleaved rounds of 2-50 calls" % (
            torch.__version__, platform.python_version(), impl, args.ranks, args.rounds),
        "- native: one dlpg_alltoallv; emulation: dist.batch_isend_irecv of per-peer slices "
        "on the dlpg group plus the own block's copy (what the backend did before); target: "
        "native <= 0.3x both",
        "",
        "| bytes sent per rank | native (us) | emulation (us) | gloo (us) | native / emulation "
        "| native / gloo | native GB/s per rank |",
        "|---|---|---|---|---|---|---|",
    ] + rows + [""]
    text = "\n".join(lines)
    print(text)
    out = args.out or os.path.join(HERE, "results", "torch-alltoall-uneven-%dcore.md" % cores)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write(text)
    print("wrote", out)


if __name__ == "__main__":
    main()
