"""CPU: per-call times of torch.distributed.all_reduce of 8 B on "gloo" and "dlpg", with or
without 64 MiB all_reduces interleaved on one of the two groups, to tell a backend's own
per-call cost from the slowdown that large operations leave behind.

    PYTHONPATH=python_shim DLPG_LIBRARY=build/libdlpg.so \\
        /usr/bin/python3 bench/torch_small_after_large.py --big-on none|gloo|dlpg|both [--sleep S]

--sleep S: instead of the 64 MiB call, both ranks sleep S seconds after each window of the
chosen group(s) (an idle gap of about a large call's length, with no data moved).

Two processes; 30 rounds, each: per group (order alternating) one aligning call, 20 timed
calls, then the 64 MiB call if that group is chosen. Prints, per rank and backend, the 10th,
50th, 75th, 90th and 99th percentile and the mean of the per-call times (us).
"""
import argparse
import multiprocessing as mp
import os
import time


def _worker(rank, port, big_on, sleep_s, q):
    import torch
    import torch.distributed as dist
    import dlpg.torch  # noqa: F401 - registers "dlpg"

    # The driver serves the TCPStore (port 0, read back: no port picked by bind-and-release).
    store = dist.TCPStore("127.0.0.1", port, 2, False)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    groups = (("gloo", dist.group.WORLD), ("dlpg", dist.new_group([0, 1], backend="dlpg")))
    small = torch.ones(2)
    big = torch.ones(16 << 20)
    calls = {"gloo": [], "dlpg": []}
    for r in range(30):
        for name, g in (groups if r % 2 == 0 else groups[::-1]):
            dist.all_reduce(small, group=g)
            for _ in range(20):
                t0 = time.perf_counter()
                dist.all_reduce(small, group=g)
                calls[name].append((time.perf_counter() - t0) * 1e6)
            if big_on in (name, "both"):
                if sleep_s > 0:
                    time.sleep(sleep_s)
                else:
                    dist.all_reduce(big, group=g)
    out = {}
    for k, v in calls.items():
        v = sorted(v)
        out[k] = [round(v[int(len(v) * p)]) for p in (0.1, 0.5, 0.75, 0.9, 0.99)]
        out[k].append(round(sum(v) / len(v)))
    q.put((rank, out))
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--big-on", choices=["none", "gloo", "dlpg", "both"], default="none")
    ap.add_argument("--sleep", type=float, default=0.0)
    args = ap.parse_args()
    import datetime
    import torch.distributed as dist
    master = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=300),
                           wait_for_workers=False)
    port = master.port
    q = mp.Queue()
    ps = [mp.Process(target=_worker, args=(r, port, args.big_on, args.sleep, q)) for r in range(2)]
    for p in ps:
        p.start()
    out = sorted(q.get() for _ in ps)
    for p in ps:
        p.join()
    what = "sleep %g s" % args.sleep if args.sleep > 0 else "64 MiB all_reduce"
    print("%s after windows of %s; per call (us): p10 p50 p75 p90 p99 mean" % (what, args.big_on))
    for rank, d in out:
        for k, v in d.items():
            print("rank %d %-5s %s" % (rank, k, " ".join("%6d" % x for x in v)))


if __name__ == "__main__":
    main()
