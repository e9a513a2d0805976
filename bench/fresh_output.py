"""An out-of-place CPU allreduce through dlpg.Group into an output of pages never touched
(a fresh anonymous mapping per call with only its first page touched, as JAX's CPU client
and glibc's malloc of large blocks hand out) against one output reused, N local ranks, NumPy float32. Prints the medians per
round (ms; every call after a barrier, rank 0's time), modes alternated so a slow phase of
the machine hits both.

    /usr/bin/python3 bench/fresh_output.py [--ranks 2] [--bytes 16777216] [--rounds 2]
        [--iters 15]

Set DLPG_* variables around it to compare settings (e.g. DLPG_SHM_THREADS=1).
"""

import argparse
import mmap
import os
import statistics
import subprocess
import sys
import time


def rank_main(a):
    import numpy as np
    import dlpg
    g = dlpg.Group("tcp://127.0.0.1:%d" % a.port, a.rank, a.ranks, timeout=60)
    x = np.full(a.bytes // 4, a.rank + 1, np.float32)
    want = a.ranks * (a.ranks + 1) / 2
    reused = np.zeros(a.bytes // 4, np.float32)
    res = {}
    for _ in range(a.rounds):
        for mode in ("reused", "fresh"):
            ts = []
            for _ in range(a.iters):
                m = mmap.mmap(-1, a.bytes) if mode == "fresh" else None
                if m is not None:
                    m[0] = 0  # the first page touched, as malloc's header before a block does
                out = np.frombuffer(m, np.float32) if m is not None else reused
                g.barrier()
                t0 = time.perf_counter()
                g.allreduce(x, output=out)
                ts.append(time.perf_counter() - t0)
                assert out[0] == want and out[-1] == want, (mode, out[0], out[-1])
                del out
                if m is not None:
                    m.close()
            res.setdefault(mode, []).append(statistics.median(ts) * 1e3)
    if a.rank == 0:
        for mode, v in res.items():
            print("%s: %s ms" % (mode, " ".join("%.2f" % t for t in v)), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--bytes", type=int, default=16 << 20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--iters", type=int, default=15)
    ap.add_argument("--rank", type=int, default=-1)
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    if a.rank >= 0:
        return rank_main(a)
    import dlpg
    with dlpg.Store("tcp://127.0.0.1:0?serve=1", 60) as store:
        args = [sys.executable, os.path.abspath(__file__), "--ranks", str(a.ranks), "--bytes",
                str(a.bytes), "--rounds", str(a.rounds), "--iters", str(a.iters), "--port",
                str(store.port)]
        procs = [subprocess.Popen(args + ["--rank", str(r)]) for r in range(a.ranks)]
        codes = [p.wait(timeout=300) for p in procs]
    print("%d ranks, %d bytes, %d rounds of %d calls per mode" % (a.ranks, a.bytes, a.rounds, a.iters))
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
