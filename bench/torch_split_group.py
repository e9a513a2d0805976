#!/usr/bin/env python3
"""Making subgroups in torch.distributed on CPU: the "dlpg" backend vs torch's gloo, side by
side.

N processes on this host (--ranks, default 8), torch's TCPStore on loopback (served here,
port 0 read back); one job with a "dlpg" default group, then one with a "gloo" one, the same
steps in each, after a first all_reduce on the default group. Each trial times, on every rank:
  new_group    8 subgroups by 8 dist.new_group calls (every rank calls each: torch's
               contract), then a first all_reduce (4 floats) on each subgroup the rank is in.
               The subgroups: the pairs {0,1},{2,3},.. and the pairs {1,2},{3,4},..,{N-1,0}
               (N = 8: 8 subgroups, each rank in two).
  split        the same 8 subgroups by two splits of the default group (disjoint pairs in
               each), through torch's ProcessGroup.split_group, which dist.split_group calls
               (dist.split_group itself refuses to run without an accelerator), then the same
               first all_reduces; dlpg only: one dlpg_group_split each. dist.split_group
               documents gloo as unsupported, and ProcessGroupGloo's split, called this way
               on 8 ranks of a 2-core machine, did not finish within 300 s; the table sets
               dlpg's split against gloo's new_group, which is how a gloo user makes them.
  mesh         init_device_mesh("cpu", (2, N/2)) and a first all_reduce on each of its two
               dimensions' groups (on CPU torch makes those by new_group).
  fresh        a job's whole start as FSDP2/DTensor scripts write it: a new default group
               (init_process_group on a fresh prefix of the store, after the previous one is
               destroyed), init_device_mesh("cpu", (2, N/2)) right after it, with no operation
               on the default group first, and a first all_reduce on both dimensions. The
               backends' own connection work (gloo's pairs at init, dlpg's at the first
               operations) is all inside it.
A trial's time is its slowest rank's; the table has the median over --trials trials and
the ratio dlpg / gloo (target: <= 0.2x). Writes bench/results/torch-split-group-<cores>core.md
(or --out).

    PYTHONPATH=python_shim DLPG_LIBRARY=build/libdlpg.so python3 bench/torch_split_group.py [--ranks 8]

torch's TCPStore asks the host's resolver for the peer's name at every connection it makes,
split_group's store clone included: where the resolver drops queries, that clone stalls for
glibc's 5 s retry whatever the backend. Run the bench where no resolver answers to time the
backends alone, e.g. `unshare -n sh -c 'ip link set lo up; python3 bench/torch_split_group.py'`.
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

WAYS = ("new_group", "split", "mesh", "fresh")


def subgroup_sets(n):
    """Two lists of disjoint pairs: {0,1},{2,3},.. and {1,2},..,{n-1,0}."""
    return ([[i, i + 1] for i in range(0, n, 2)],
            [sorted([i, (i + 1) % n]) for i in range(1, n, 2)])


def _worker(rank, world, port, backend, trials, q):
    import torch
    import torch.distributed as dist
    import dlpg.torch  # noqa: F401 - registers "dlpg"
    from torch.distributed.device_mesh import init_device_mesh
    timeout = datetime.timedelta(seconds=300)
    store = dist.TCPStore("127.0.0.1", port, world, False, timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    dist.all_reduce(torch.ones(4))
    sets = subgroup_sets(world)
    times = {w: [] for w in WAYS}

    def first_ops(groups, registered):
        for g in groups:
            x = torch.ones(4)
            if registered:
                dist.all_reduce(x, group=g)
            else:
                g.allreduce([x]).wait()
            assert x[0].item() == 2.0, x

    for trial in range(trials):
        for way in WAYS:
            if way == "split" and backend == "gloo":
                continue  # see the module's docstring
            dist.barrier()
            if way == "fresh":
                dist.destroy_process_group()
            t0 = time.perf_counter()
            if way == "fresh":
                dist.init_process_group(backend, store=dist.PrefixStore("fresh%d" % trial, store),
                                        rank=rank, world_size=world, timeout=timeout)
            if way == "new_group":
                mine = []
                for pairs in sets:
                    for p in pairs:
                        g = dist.new_group(p)
                        if rank in p:
                            mine.append(g)
                first_ops(mine, True)
            elif way == "split":
                mine = []
                default = dist.distributed_c10d._get_default_group()  # fresh replaces it
                for pairs in sets:
                    p = next(p for p in pairs if rank in p)
                    mine.append(default.split_group(p, timeout=timeout))
                first_ops(mine, False)
            else:  # mesh, fresh
                mesh = init_device_mesh("cpu", (2, world // 2))
                for dim in range(2):
                    x = torch.ones(4)
                    dist.all_reduce(x, group=mesh.get_group(dim))
                    assert x[0].item() == mesh.size(dim), x
            times[way].append(time.perf_counter() - t0)
    dist.barrier()
    q.put((rank, times))
    dist.destroy_process_group()


def run_job(backend, world, trials):
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=300),
                          wait_for_workers=False)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, world, store.port, backend, trials, q))
             for r in range(world)]
    for p in procs:
        p.start()
    got = dict(q.get(timeout=600) for _ in range(world))
    for p in procs:
        p.join(60)
    # Slowest rank per trial, then the median over trials.
    return {w: statistics.median(max(got[r][w][t] for r in got) for t in range(trials))
            for w in WAYS if got[0][w]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    assert a.ranks % 2 == 0 and a.ranks >= 4, "--ranks must be even and >= 4"
    import torch
    res = {b: run_job(b, a.ranks, a.trials) for b in ("dlpg", "gloo")}
    cores = os.cpu_count()
    k = a.ranks  # subgroups: two sets of ranks/2 pairs
    label = {"new_group": "%d subgroups by dist.new_group + first all_reduce on each" % k,
             "split": "%d subgroups by 2 ProcessGroup.split_group + first all_reduce on each" % k,
             "mesh": "init_device_mesh(\"cpu\", (2, %d)) + first all_reduce on both dims"
                     % (a.ranks // 2),
             "fresh": "init_process_group, then init_device_mesh(\"cpu\", (2, %d)) + first "
                      "all_reduce on both dims" % (a.ranks // 2)}
    lines = [
        "# torch.distributed subgroup creation on CPU, %d ranks: dlpg vs gloo" % a.ranks, "",
        "- command: `python3 bench/torch_split_group.py --ranks %d --trials %d` "
        "(PYTHONPATH=python_shim, DLPG_LIBRARY=build/libdlpg.so)" % (a.ranks, a.trials),
        "- machine: %s, %s, %d cores" % (platform.node(), cpu_model(platform.processor() or "unknown CPU"), cores),
        "- date: %s UTC" % datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"),
        "- torch %s, Python %s; processes on this host, TCPStore on loopback; slowest rank's "
        "time per trial, median over %d trials; target: dlpg <= 0.2x gloo"
        % (torch.__version__, platform.python_version(), a.trials),
        "",
        "| what | dlpg (ms) | gloo (ms; split: its new_group) | dlpg / gloo |",
        "|---|---|---|---|",
    ]
    for w in WAYS:
        d, g = res["dlpg"][w] * 1e3, res["gloo"].get(w, res["gloo"]["new_group"]) * 1e3
        lines.append("| %s | %.1f | %.1f | %.2fx |" % (label[w], d, g, d / g))
    text = "\n".join(lines) + "\n"
    print(text)
    out = a.out or os.path.join(HERE, "results", "torch-split-group-%dcore.md" % cores)
    with open(out, "w") as f:
        f.write(text)
    print("written to", out)


if __name__ == "__main__":
    main()
