"""The first CPU allreduce of a fresh job: N processes on this host, each timing, on the
host clock, from dlpg.Group() to the end of its first allreduce
of one float32 (group creation + the backend's lazy setup + the op), then the median of 20
further allreduces. Every rank has imported dlpg and opened the store before the driver
releases them all at once (process start-up is not counted). One job per variant and rank count, the variants alternating, each job
its own processes; the slowest rank's figure counts (an op ends when its last rank does).

    python3 bench/first_op_cpu.py --ranks 2,8 --runs 5 [--backends shm,gloo]

Variants are DLPG_CPU_BACKEND values (shm: the shared-memory backend, the default for ranks
on one host; gloo). Prints a Markdown table of medians over the runs.
"""
import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python_shim"))


def _rank(url, rank, world, q, ready, go):
    import numpy as np
    import dlpg
    store = dlpg.Store(url, 60)
    x = np.ones(1, dtype=np.float32)
    ready.put(rank)
    go.wait(60)
    t0 = time.perf_counter()
    g = dlpg.Group(store, rank, world, timeout=60, name="first-op-cpu")
    t1 = time.perf_counter()
    g.allreduce(x)
    first = time.perf_counter() - t0
    assert float(x[0]) == world, "allreduce gave %r, not %d" % (float(x[0]), world)
    nxt = []
    for _ in range(20):
        x[0] = 1.0
        t = time.perf_counter()
        g.allreduce(x)
        nxt.append(time.perf_counter() - t)
    g.barrier()
    g.destroy()
    store.close()
    q.put((rank, {"first_s": first, "group_s": t1 - t0, "next_s": statistics.median(nxt)}))


def _job(backend, world):
    """One job: (slowest rank's first op, its group creation, slowest median next op)."""
    import dlpg
    os.environ["DLPG_CPU_BACKEND"] = backend
    ctx = mp.get_context("spawn")
    q, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    with dlpg.Store("tcp://127.0.0.1:0?serve=1", 60) as server:
        url = "tcp://127.0.0.1:%d" % server.port
        procs = [ctx.Process(target=_rank, args=(url, r, world, q, ready, go))
                 for r in range(world)]
        for p in procs:
            p.start()
        for _ in procs:
            ready.get(timeout=120)
        go.set()
        res = dict(q.get(timeout=120) for _ in procs)
        for p in procs:
            p.join(30)
    return (max(r["first_s"] for r in res.values()), max(r["group_s"] for r in res.values()),
            max(r["next_s"] for r in res.values()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", default="2,8")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--backends", default="shm,gloo")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    backends = a.backends.split(",")
    got = {}
    for world in [int(n) for n in a.ranks.split(",")]:
        for run in range(a.runs):
            for b in (backends if run % 2 == 0 else backends[::-1]):
                got.setdefault((world, b), []).append(_job(b, world))
    rows = ["| ranks | backend | runs | first op, median (ms) | min-max (ms) | of it, group "
            "creation (ms) | next op, median (us) |", "|---|---|---|---|---|---|---|"]
    for (world, b), rs in sorted(got.items()):
        f = [r[0] * 1e3 for r in rs]
        rows.append("| %d | %s | %d | %.2f | %.2f-%.2f | %.2f | %.1f |" % (
            world, b, len(rs), statistics.median(f), min(f), max(f),
            statistics.median(r[1] for r in rs) * 1e3, statistics.median(r[2] for r in rs) * 1e6))
    table = "\n".join(rows)
    print(table)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write("Command: `python3 bench/first_op_cpu.py --ranks %s --runs %d --backends %s`\n\n%s\n"
                     % (a.ranks, a.runs, a.backends, table))
    print(json.dumps({"%d/%s" % k: v for k, v in got.items()}), file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
