#!/usr/bin/env python3
"""The uneven collectives side by side on one host: dlpg (shared memory) against Open MPI's
MPI_Allgatherv and MPI_Alltoallv, uniform and skewed, at each rank count given, in one
invocation; prints and writes a markdown table with medians and ratios.

Both run the same layout (dlpg-bench --skew K and mpi_bench's SKEW; dlpg_bench.h,
bench_weight): the first half of the ranks (rank 0 at least) K times the others' blocks --
allgatherv: what they contribute; alltoallv: what every rank sends them. A size counts
allgatherv's output and each alltoallv input (nccl-tests' allgather / alltoall convention;
skewed: the mean buffer), busbw = bytes / time x (n-1)/n. Both are timed as dlpg-bench times
(nccl-tests'): per size, warmup, then `iters` operations back to back divided by iters, the
median of `reps` loops, the mean over ranks; both check every result. With --rounds R the
sweep runs R times, the order of the two alternating, and the tables show the median over
rounds.

    python3 bench/vcoll-compare.py --ranks 2,4 --maxbytes 256K --out bench/results/vcoll-compare-2core.md
    # a 16-core machine, the whole grid in one call (the GPU machine: ci/gpu-bundle.sh's
    # bundle, carry .gpu):
    python3 .gpu/bench/vcoll-compare.py --bin .gpu/bin --lib .gpu/lib --ranks 2,4,8,16 \\
        --maxbytes 16M --rounds 3 --out "$OUT/vcoll-compare-16core.md"
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from bench_util import cpu_model, fmt_size  # noqa: E402

OPS = ("allgatherv", "alltoallv")


def parse_size(s):
    s = s.strip().upper().rstrip("B")
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s[:-1] if mul > 1 else s) * mul)


def run_cmd(cmd, env, limit):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=env, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return None, out + "\n(killed after %.0f s)" % limit
    return p.returncode, out


def run_dlpg(a, n, op, skew, tmp, limit):
    js = os.path.join(tmp, "dlpg.json")
    cmd = [a.dlpg_bench, op, "--nranks", str(n), "--skew", str(skew), "-d", "float",
           "-b", str(a.minbytes), "-e", str(a.maxbytes), "-f", str(a.factor), "-w", str(a.warmup),
           "-n", str(a.iters), "--reps", str(a.reps), "--iters-bytes", str(a.iters_bytes),
           "-c", "1", "--outofplace", "-T", str(a.timeout), "-J", js]
    env = dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    env["DLPG_CPU_BACKEND"] = "shm"
    if a.lib:
        env["LD_LIBRARY_PATH"] = a.lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    rc, out = run_cmd(cmd, env, limit)
    if rc != 0:
        return None, "dlpg-bench exit %s: %s" % (rc, (out or "")[-600:])
    with open(js) as f:
        doc = json.load(f)
    if any(r["dlpg"]["wrong"] for r in doc["rows"]):
        return None, "dlpg-bench: wrong elements"
    return {r["size"]: r["dlpg"]["time_us"] for r in doc["rows"]}, None


def run_mpi(a, n, op, skew, limit):
    env = dict(os.environ)
    # mpi_bench uses the machine's own libmpi, never a bundle's library folder.
    if a.lib and env.get("LD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] = ":".join(p for p in env["LD_LIBRARY_PATH"].split(":")
                                          if os.path.abspath(p) != os.path.abspath(a.lib))
    cmd = [a.mpirun, "--allow-run-as-root", "--oversubscribe"] + shlex.split(a.mpi_args) + \
        ["-np", str(n), a.mpi_bench, op, str(a.minbytes), str(a.maxbytes), str(a.factor),
         str(a.warmup), str(a.iters), str(a.reps), str(a.iters_bytes), str(skew)]
    rc, out = run_cmd(cmd, env, limit)
    rows = {}
    for line in (out or "").splitlines():
        f = line.split()
        if len(f) == 7 and f[0] == "ROW":
            if int(f[5]):
                return None, "mpi_bench: %s wrong elements at %s B" % (f[5], f[1])
            rows[int(f[1])] = float(f[2])
    if rc != 0:
        return None, "mpi_bench exit %s: %s" % (rc, (out or "")[-600:])
    return rows, None


def ftime(us):
    if us is None:
        return "-"
    return "%.2f" % us if us < 100 else "%.1f" % us if us < 10000 else "%.0f" % us


def machine():
    load = " ".join("%.2f" % x for x in os.getloadavg())
    return "%s, nproc %d, %s; load average %s" % (platform.node() or "?", os.cpu_count() or 0,
                                                   cpu_model("?"), load)


def tables(data, ops, ranks, skews):
    lines, summary = [], []
    for op in ops:
        for skew in skews:
            for n in ranks:
                d, m = data.get(("dlpg", op, skew, n), {}), data.get(("mpi", op, skew, n), {})
                if not d and not m:
                    continue
                f = (n - 1) / n
                lines += ["", "### %s, %s, %d ranks" % (op, "uniform" if skew == 1 else "skew %d:1" % skew, n), "",
                          "| size | dlpg shm (us) | MPI (us) | dlpg busbw (GB/s) | MPI busbw (GB/s) | MPI time / dlpg time |",
                          "|---:|---:|---:|---:|---:|---:|"]
                ratios = []
                for s in sorted(set(d) | set(m)):
                    td = statistics.median(d[s]) if s in d else None
                    tm = statistics.median(m[s]) if s in m else None
                    bd = s / (td * 1e3) * f if td else None
                    bm = s / (tm * 1e3) * f if tm else None
                    q = tm / td if td and tm else None
                    if q:
                        ratios.append(q)
                    lines.append("| %s | %s | %s | %s | %s | %s |" % (
                        fmt_size(s), ftime(td), ftime(tm), "-" if bd is None else "%.3f" % bd,
                        "-" if bm is None else "%.3f" % bm, "-" if q is None else "%.2f" % q))
                if ratios:
                    summary.append("| %s | %s | %d | %.2f | %.2f | %.2f |" % (
                        op, "uniform" if skew == 1 else "%d:1" % skew, n, min(ratios),
                        statistics.median(ratios), max(ratios)))
    head = ["", "## Summary: MPI time / dlpg time over the sizes (> 1: dlpg faster)", "",
            "| op | counts | ranks | min | median | max |", "|---|---|---:|---:|---:|---:|"]
    return (head + summary if summary else []) + lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,4", help="comma-separated rank counts")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--skews", default="1,4", help="comma-separated K of --skew (1: uniform)")
    ap.add_argument("--minbytes", type=parse_size, default=8)
    ap.add_argument("--maxbytes", type=parse_size, default=16 << 20)
    ap.add_argument("--factor", type=float, default=4)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=50, help="iterations at small sizes")
    ap.add_argument("--iters-bytes", type=parse_size, default=16 << 20,
                    help="per size, iterations at most this / size (at least 1)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--budget-s", type=float, default=540,
                    help="start nothing new after this many seconds (the rest is reported as skipped)")
    ap.add_argument("--bin", default=None, help="folder with dlpg-bench and mpi_bench (default build/bench)")
    ap.add_argument("--lib", default=None, help="folder for LD_LIBRARY_PATH of dlpg-bench (e.g. .gpu/lib)")
    ap.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    ap.add_argument("--mpi-args", default="--mca btl self,vader --bind-to none")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "vcoll-compare.md"))
    a = ap.parse_args()
    ops = [o for o in a.ops.split(",") if o]
    ranks = [int(x) for x in a.ranks.split(",") if x]
    skews = [int(x) for x in a.skews.split(",") if x]
    bindir = a.bin or os.path.join(REPO, "build", "bench")
    a.dlpg_bench = os.path.join(bindir, "dlpg-bench")
    a.mpi_bench = os.path.join(bindir, "mpi_bench")
    impls = ["dlpg", "mpi"]
    notes, skipped = [], []
    if not (os.access(a.mpi_bench, os.X_OK) and shutil.which(a.mpirun)):
        notes.append("no %s or %s: MPI left out" % (a.mpi_bench, a.mpirun))
        impls.remove("mpi")
    started = datetime.datetime.now(datetime.timezone.utc)
    t_start = time.time()
    machine_before = machine()
    data = {}
    with tempfile.TemporaryDirectory(prefix="dlpg-vcoll-") as tmp:
        for rnd in range(a.rounds):
            for op in ops:
                for skew in skews:
                    for n in ranks:
                        order = impls if rnd % 2 == 0 else impls[::-1]
                        for impl in order:
                            left = a.budget_s - (time.time() - t_start)
                            if left < 10:
                                skipped.append("%s %s skew %d %d ranks round %d" % (impl, op, skew, n, rnd + 1))
                                continue
                            t0 = time.time()
                            limit = min(left, a.timeout * 4)
                            if impl == "mpi":
                                res, err = run_mpi(a, n, op, skew, limit)
                            else:
                                res, err = run_dlpg(a, n, op, skew, tmp, limit)
                            print("round %d: %s %s skew %d %d ranks: %.1f s%s" % (
                                rnd + 1, impl, op, skew, n, time.time() - t0,
                                "" if not err else " (" + err[:200] + ")"), flush=True)
                            if err:
                                notes.append("%s %s skew %d %d ranks: %s" % (impl, op, skew, n, err))
                            for s, us in (res or {}).items():
                                data.setdefault((impl, op, skew, n), {}).setdefault(s, []).append(us)
    elapsed = time.time() - t_start
    mpiv = "absent"
    if "mpi" in impls:
        _, out = run_cmd([a.mpirun, "--version"], dict(os.environ), 30)
        mpiv = (out or "?").splitlines()[0] if out else "?"
    cmd = " ".join(shlex.quote(x) for x in [sys.executable] + sys.argv)
    md = ["# Uneven collectives side by side: dlpg shm vs Open MPI (MPI_Allgatherv, MPI_Alltoallv)", "",
          "- command: `%s` (from `%s`)" % (cmd, os.getcwd()),
          "- the full grid on a 16-core machine, one call (build with `ci/build.sh`, Open MPI's "
          "`mpicc` on the path so bench/CMakeLists.txt builds `mpi_bench`): `python3 "
          "bench/vcoll-compare.py --ranks 2,4,8,16 --maxbytes 16M --rounds 3 --out "
          "bench/results/vcoll-compare-16core.md`; on the GPU machine from the bundle of "
          "`ci/gpu-bundle.sh` (carry `.gpu`): `python3 .gpu/bench/vcoll-compare.py --bin .gpu/bin "
          "--lib .gpu/lib --ranks 2,4,8,16 --maxbytes 16M --rounds 3 --out "
          "$OUT/vcoll-compare-16core.md`",
          "- date: %s, %.0f s" % (started.strftime("%Y-%m-%d %H:%M UTC"), elapsed),
          "- machine before: %s" % machine_before,
          "- machine after: %s" % machine(),
          "- dlpg: `dlpg-bench OP --skew K --outofplace -c 1` with DLPG_CPU_BACKEND=shm; MPI: "
          "`mpi_bench OP ... K` under `%s %s` (%s)" % (os.path.basename(a.mpirun), a.mpi_args, mpiv),
          "- layout: skew K = the first half of the ranks (rank 0 at least) K times the others' "
          "blocks (allgatherv: contributed; alltoallv: received from every rank); packed "
          "displacements",
          "- method: float32; a size counts allgatherv's output and each alltoallv input (the "
          "mean buffer when skewed), nccl-tests' convention; per size %d warmup (at most the "
          "iterations), iterations min(%d, %s / size) (at least 1), median of %d loops, mean over "
          "ranks; %d round(s), median over rounds; busbw = size / time x (n-1)/n; ratio = MPI "
          "time / dlpg time (> 1: dlpg faster)" % (a.warmup, a.iters, fmt_size(a.iters_bytes),
                                                   a.reps, a.rounds)]
    if skipped:
        md.append("- skipped (budget of %.0f s spent): %s" % (a.budget_s, "; ".join(skipped)))
    for nte in notes:
        md.append("- problem: %s" % nte.replace("\n", " ")[:600])
    md += tables(data, ops, ranks, skews) + [""]
    text = "\n".join(md)
    print(text)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        f.write(text)
    print("vcoll-compare: wrote %s" % a.out)
    return 1 if notes else 0


if __name__ == "__main__":
    sys.exit(main())
