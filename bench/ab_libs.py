#!/usr/bin/env python3
"""Two builds of libdlpg.so side by side: the same benchmark binaries run against library
folder A and folder B alternately (LD_LIBRARY_PATH; the NCCL module is loaded from beside
whichever libdlpg.so is used), so machine noise hits both alike; prints the median of each
configuration per library and the ratio B/A as a markdown table.

Configurations: the blocking 8-byte CPU allreduce per call (dlpg-call-latency) at the given
rank counts, and with --cuda the 8-byte CUDA allreduce at world size 1 (dlpg-bench, with
NCCL called directly in the same run as the baseline column).

Usage: ab_libs.py --bin DIR --a DIR --b DIR [--extra-lib DIR] [--ranks 1,2] [--cuda]
                  [--rounds 7] [--out FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(cmd, libdir, extra, timeout=300):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join(p for p in (libdir, extra, env.get("LD_LIBRARY_PATH")) if p)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def cpu_latency(args, libdir, ranks):
    r = run([os.path.join(args.bin, "dlpg-call-latency"), "-n", str(ranks), "-o", "allreduce",
             "-b", "8", "-i", "5000", "-R", "3"], libdir, args.extra_lib)
    for line in r.stdout.splitlines():
        if line.startswith("blocking"):
            return float(line.split()[1])
    raise RuntimeError("dlpg-call-latency gave no 'blocking' row:\n" + r.stdout + r.stderr)


def cuda_allreduce(args, libdir):
    with tempfile.NamedTemporaryFile(suffix=".json") as j:
        r = run([os.path.join(args.bin, "dlpg-bench"), "allreduce", "--device", "cuda",
                 "--nranks", "1", "-b", "8", "-e", "8", "-n", "1000", "-w", "100",
                 "--baseline", "nccl", "--outofplace", "-J", j.name], libdir, args.extra_lib)
        if r.returncode != 0:
            raise RuntimeError("dlpg-bench failed:\n" + r.stdout + r.stderr)
        row = json.load(open(j.name))["rows"][0]
        return row["dlpg"]["time_us"], row["baseline"]["time_us"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--a", required=True, help="library folder A (before)")
    ap.add_argument("--b", required=True, help="library folder B (after)")
    ap.add_argument("--extra-lib", default="", help="folder of the libraries both need")
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--cuda", action="store_true")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out")
    args = ap.parse_args()
    ranks = [int(x) for x in args.ranks.split(",") if x]
    res = {}  # (config, lib) -> [values]
    for rnd in range(args.rounds):
        # A first in even rounds, B first in odd ones: neither always runs warm.
        for lib, d in (("A", args.a), ("B", args.b)) if rnd % 2 == 0 else (("B", args.b), ("A", args.a)):
            for n in ranks:
                res.setdefault(("cpu allreduce 8 B blocking, %d rank%s (us/call)" % (n, "" if n == 1 else "s"), lib), []).append(cpu_latency(args, d, n))
            if args.cuda:
                dl, nc = cuda_allreduce(args, d)
                res.setdefault(("cuda allreduce 8 B, world size 1, dlpg (us)", lib), []).append(dl)
                res.setdefault(("cuda allreduce 8 B, world size 1, NCCL direct (us)", lib), []).append(nc)
    configs = []
    for (c, _) in res:
        if c not in configs:
            configs.append(c)
    lines = ["| configuration | A: %s | B: %s | B/A |" % (args.a, args.b), "|---|---|---|---|"]
    for c in configs:
        a, b = statistics.median(res[(c, "A")]), statistics.median(res[(c, "B")])
        lines.append("| %s | %.2f | %.2f | %.3f |" % (c, a, b, b / a if a else float("nan")))
    lines.append("")
    lines.append("Medians of %d alternating rounds; each round's values: %s" % (
        args.rounds, "; ".join("%s %s %s" % (c, l, ",".join("%.2f" % v for v in res[(c, l)]))
                               for (c, l) in res)))
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
