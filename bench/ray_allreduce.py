#!/usr/bin/env python3
"""allreduce between Ray actors through ray.util.collective: backend "dlpg" (dlpg.ray)
against Ray's own CPU backend "gloo" (TorchGLOOGroup, torch.distributed's gloo), the same
actors, sizes and iterations, in one run.

Every actor holds both groups; per size and world size the two alternate for --rounds
rounds. A round is --reps loops, each a barrier (untimed) then `iters` back-to-back
col.allreduce calls on a float32 torch tensor timed together in the actor (the nccl-tests
way: no per-call skew between the ranks); a round's figure is the median over its loops of
the slowest rank's time per call, the table's the median over rounds. Results are checked
once per size and round.

    PYTHONPATH=python_shim DLPG_LIBRARY=build/libdlpg.so .venv/bin/python \
        bench/ray_allreduce.py --actors 2 4 --out bench/results/ray-allreduce-2core.md
"""

import argparse
import datetime
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
SHIM = os.path.join(REPO, "python_shim")
if SHIM not in sys.path:
    sys.path.insert(0, SHIM)
# Ray's workers inherit the driver's environment: they find the shim the same way.
os.environ["PYTHONPATH"] = os.pathsep.join(
    [SHIM] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

from bench_util import cpu_model, fmt_size  # noqa: E402

import ray  # noqa: E402
import ray.util.collective as col  # noqa: E402

SIZES = [8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def iterations(nbytes, scale):
    n = 100 if nbytes <= 4096 else 30 if nbytes <= (256 << 10) else 5 if nbytes <= (4 << 20) \
        else 2
    return max(3, int(n * scale))


@ray.remote(num_cpus=0)
class Bencher(object):
    def __init__(self):
        import dlpg.ray
        dlpg.ray.register()

    def init(self, world, rank):
        col.init_collective_group(world, rank, backend="gloo", group_name="bench-gloo")
        col.init_collective_group(world, rank, backend="dlpg", group_name="bench-dlpg")
        return os.getpid()

    def run(self, group, nbytes, iters, warmup, reps):
        """reps times: a barrier, then iters back-to-back allreduces timed together;
        returns the time per allreduce of each rep, and whether a check of ones summed to
        world_size held (checked before; the timed ones add zeros, which stay finite)."""
        import torch
        world = col.get_collective_group_size(group)
        x = torch.ones(max(1, nbytes // 4), dtype=torch.float32)
        col.allreduce(x, group_name=group)
        ok = bool((x == world).all())
        x.zero_()
        for _ in range(warmup):
            col.allreduce(x, group_name=group)
        times = []
        for _ in range(reps):
            col.barrier(group_name=group)
            t0 = time.perf_counter()
            for _ in range(iters):
                col.allreduce(x, group_name=group)
            times.append((time.perf_counter() - t0) / iters)
        return times, ok and bool((x == 0).all())

    def done(self):
        col.destroy_collective_group("bench-dlpg")
        col.destroy_collective_group("bench-gloo")


def measure(actors, group, nbytes, iters, warmup, reps):
    res = ray.get([a.run.remote(group, nbytes, iters, warmup, reps) for a in actors],
                  timeout=600)
    if not all(ok for _, ok in res):
        raise SystemExit("%s: wrong allreduce result at %d bytes" % (group, nbytes))
    return statistics.median(max(t[i] for t, _ in res) for i in range(reps))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--actors", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--sizes", type=int, nargs="+", default=SIZES, help="bytes")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5, help="timed loops per round")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies the iterations")
    ap.add_argument("--out", help="markdown file to write (else stdout only)")
    args = ap.parse_args()

    import dlpg
    import dlpg.ray
    os.environ.setdefault("DLPG_LIBRARY", dlpg.library_path())
    started = datetime.datetime.now(datetime.timezone.utc)
    load = os.getloadavg()
    ray.init(num_cpus=max(args.actors), include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    dlpg.ray.register()
    tables = []
    try:
        for world in args.actors:
            actors = [Bencher.remote() for _ in range(world)]
            ray.get([a.init.remote(world, r) for r, a in enumerate(actors)], timeout=300)
            rows = []
            for nbytes in args.sizes:
                iters = iterations(nbytes, args.scale)
                warm = 3 if nbytes <= (1 << 20) else 1
                d, g = [], []
                for _ in range(args.rounds):
                    d.append(measure(actors, "bench-dlpg", nbytes, iters, warm, args.reps))
                    g.append(measure(actors, "bench-gloo", nbytes, iters, warm, args.reps))
                td, tg = statistics.median(d), statistics.median(g)
                rows.append((nbytes, iters, td, tg))
                print("%d actors %8s  dlpg %10.1f us  gloo %10.1f us  dlpg/gloo %.3f" %
                      (world, fmt_size(nbytes), td * 1e6, tg * 1e6, td / tg), flush=True)
            ray.get([a.done.remote() for a in actors], timeout=120)
            for a in actors:
                ray.kill(a)
            tables.append((world, rows))
    finally:
        ray.shutdown()

    import torch
    lines = ["# allreduce between Ray actors: dlpg.ray vs Ray's gloo backend", "",
             "- command: `PYTHONPATH=python_shim DLPG_LIBRARY=build/libdlpg.so .venv/bin/python "
             "bench/ray_allreduce.py %s`" % " ".join(sys.argv[1:]),
             "- on the 16-core GPU host, the same command (CPU tensors; no GPU is used)",
             "- machine: %s, %s, %d cores; load average %.1f at the start" %
             (platform.node(), cpu_model("unknown CPU"), os.cpu_count(), load[0]),
             "- date: %s" % started.strftime("%Y-%m-%d %H:%M UTC"),
             "- Ray %s, torch %s, Python %s; float32 torch tensors through "
             "`ray.util.collective.allreduce` in each actor; time per call of `iters` "
             "back-to-back calls, slowest rank, median over %d loops, median over %d "
             "alternating rounds; algbw = bytes / time" %
             (ray.__version__, torch.__version__, platform.python_version(), args.reps,
              args.rounds),
             "- targets: 8 B dlpg <= 0.1x gloo's time; 16 MiB dlpg >= 3x gloo's bandwidth", ""]
    for world, rows in tables:
        lines += ["## %d actors" % world, "",
                  "| size | iters | dlpg (us) | gloo (us) | dlpg algbw (GB/s) | gloo algbw (GB/s) "
                  "| dlpg / gloo time |", "|---|---|---|---|---|---|---|"]
        for nbytes, iters, td, tg in rows:
            lines.append("| %s | %d | %.1f | %.1f | %.3f | %.3f | %.3fx |" %
                         (fmt_size(nbytes), iters, td * 1e6, tg * 1e6, nbytes / td / 1e9,
                          nbytes / tg / 1e9, td / tg))
        lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
