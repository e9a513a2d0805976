#!/usr/bin/env python3
"""Side-by-side CPU collectives on one host, in one invocation: dlpg with its shm backend,
dlpg with Gloo, Open MPI, torch.distributed's gloo, and a single-core memcpy as the
memory-speed reference; allreduce, allgather and broadcast (float32, sum), 8 B to 256 MiB,
at each rank count given.

Every implementation is timed the same way (dlpg-bench's, which is nccl-tests'): per size,
warmup, then `iters` operations back to back divided by iters, the median of `reps` such
loops, the mean over ranks; iterations scale down with size (at most ITERS_BYTES / size, at
least 1) so 8 B and 256 MiB fit one run. busbw uses nccl-tests' factors (allreduce
2(n-1)/n, allgather (n-1)/n, broadcast 1; allgather counts its output). dlpg and MPI run out
of place (MPI_Bcast and torch are in place: their APIs); dlpg and MPI check every result.
With --rounds R the whole sweep runs R times, the order of the implementations rotating
by round, and the tables show the median over rounds.

    python3 bench/cpu-compare.py --ranks 2,4 --out bench/results/cpu-compare.md
    # prebuilt binaries (the GPU machine's bundle):
    python3 bench/cpu-compare.py --bin .gpu/bin --lib .gpu/lib --ranks 2,4,8,16

Writes the markdown (--out) and a bus-bandwidth plot beside it (PNG with matplotlib, else
SVG drawn here)."""
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

OPS = ("allreduce", "allgather", "broadcast")
IMPLS = ("shm", "gloo", "mpi", "torch")
BUSBW = {"allreduce": lambda n: 2.0 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
         "broadcast": lambda n: 1.0}


def parse_size(s):
    s = s.strip().upper().rstrip("B")
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s[:-1] if mul > 1 else s) * mul)


def sizes_of(a):
    out, s = [], a.minbytes
    while s <= a.maxbytes:
        out.append(s)
        s = int(s * a.factor)
    return out


def counted(op, size, n):
    """The bytes nccl-tests counts at this size (allgather: n equal blocks of its output)."""
    blocks = n if op == "allgather" else 1
    return (size // (4 * blocks)) * blocks * 4


def iters_at(a, nbytes):
    return max(1, min(a.iters, a.iters_bytes // max(nbytes, 1)))


# ----------------------------------------------------------------------------- torch side

def torch_worker(a):
    """One torch rank: every op and size, timed as dlpg-bench times them; rank 0 writes
    {op: {bytes: time_us}} to a.result."""
    import torch
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", a.port, a.world, False,
                          timeout=datetime.timedelta(seconds=a.timeout))
    dist.init_process_group("gloo", store=dist.PrefixStore("pg", store), rank=a.rank,
                            world_size=a.world, timeout=datetime.timedelta(seconds=a.timeout))
    n, rank = a.world, a.rank
    into = getattr(dist, "all_gather_into_tensor", None)
    use_list = [into is None]

    def gather(out, t):
        # Older torch's gloo lacks the flat form: gather into views of the output instead.
        if not use_list[0]:
            try:
                return into(out, t)
            except RuntimeError:
                use_list[0] = True
        dist.all_gather(list(out.chunk(n)), t)
    res, ok = {}, True
    for op in a.ops.split(","):
        res[op] = {}
        for size in sizes_of(a):
            nbytes = counted(op, size, n)
            per = nbytes // 4 // (n if op == "allgather" else 1)
            if per == 0:
                continue
            src = torch.arange(per if op == "allgather" else nbytes // 4, dtype=torch.float32) % 4 + 1 + rank
            t = src.clone()
            out = torch.empty(per * n, dtype=torch.float32) if op == "allgather" else None

            def one():
                if op == "allreduce":
                    dist.all_reduce(t)
                elif op == "allgather":
                    gather(out, t)
                else:
                    dist.broadcast(t, 0)
            one()  # checked once per size
            if op == "allreduce":
                want = (torch.arange(t.numel(), dtype=torch.float32) % 4 + 1) * n + n * (n - 1) / 2
                ok &= bool(torch.equal(t, want))
            elif op == "allgather":
                ok &= bool(torch.equal(out[:per], torch.arange(per, dtype=torch.float32) % 4 + 1))
            iters = iters_at(a, nbytes)
            for _ in range(min(a.warmup, iters)):
                one()
            times = []
            for _ in range(a.reps):
                t.copy_(src)
                t0 = time.perf_counter()
                for _ in range(iters):
                    one()
                times.append((time.perf_counter() - t0) * 1e6 / iters)
            med = torch.tensor([statistics.median(times)], dtype=torch.float64)
            dist.all_reduce(med)
            res[op][nbytes] = med.item() / n
    flag = torch.tensor([0 if ok else 1], dtype=torch.int32)
    dist.all_reduce(flag)
    if rank == 0:
        with open(a.result, "w") as f:
            json.dump({"ok": flag.item() == 0, "res": res}, f)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def run_torch(a, n, ops, tmp, limit):
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", 0, n + 1, True,
                          timeout=datetime.timedelta(seconds=a.timeout), wait_for_workers=False)
    result = os.path.join(tmp, "torch-%d.json" % n)
    cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker", "--port", str(store.port),
           "--world", str(n), "--ops", ",".join(ops), "--result", result] + common_args(a)
    procs = [subprocess.Popen(cmd + ["--rank", str(r)], start_new_session=True) for r in range(n)]
    deadline = time.time() + limit
    rcs = []
    for p in procs:
        try:
            rcs.append(p.wait(timeout=max(1, deadline - time.time())))
        except subprocess.TimeoutExpired:
            rcs.append(None)
    for p, rc in zip(procs, rcs):
        if rc is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    del store
    if any(rc != 0 for rc in rcs) or not os.path.exists(result):
        return None, "torch ranks exited %s" % rcs
    with open(result) as f:
        doc = json.load(f)
    res = {op: {int(k): v for k, v in d.items()} for op, d in doc["res"].items()}
    return res, None if doc["ok"] else "torch results wrong"


def common_args(a):
    return ["--minbytes", str(a.minbytes), "--maxbytes", str(a.maxbytes), "--factor", str(a.factor),
            "--warmup", str(a.warmup), "--iters", str(a.iters), "--reps", str(a.reps),
            "--iters-bytes", str(a.iters_bytes), "--timeout", str(a.timeout)]


# ----------------------------------------------------------------------------- dlpg, MPI, memcpy

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


def bench_env(a, extra):
    env = dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    if a.lib:
        env["LD_LIBRARY_PATH"] = a.lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env.update(extra)
    return env


def run_dlpg(a, backend, n, op, tmp, limit):
    js = os.path.join(tmp, "dlpg.json")
    cmd = [a.dlpg_bench, op, "--nranks", str(n), "-d", "float", "-o", "sum", "-b", str(a.minbytes),
           "-e", str(a.maxbytes), "-f", str(a.factor), "-w", str(a.warmup), "-n", str(a.iters),
           "--reps", str(a.reps), "--iters-bytes", str(a.iters_bytes), "-c", "1", "--outofplace",
           "-T", str(a.timeout), "-J", js]
    rc, out = run_cmd(cmd, bench_env(a, {"DLPG_CPU_BACKEND": backend}), limit)
    if rc != 0:
        return None, "dlpg-bench (%s) exit %s: %s" % (backend, rc, out[-800:])
    with open(js) as f:
        doc = json.load(f)
    if any(r["dlpg"]["wrong"] for r in doc["rows"]):
        return None, "dlpg-bench (%s): wrong elements" % backend
    return {r["size"]: r["dlpg"]["time_us"] for r in doc["rows"]}, None


def run_mpi(a, n, op, limit):
    env = dict(os.environ)
    # mpi_bench uses the machine's own libmpi, never the bundle's library folder.
    if a.lib and env.get("LD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] = ":".join(p for p in env["LD_LIBRARY_PATH"].split(":")
                                          if os.path.abspath(p) != os.path.abspath(a.lib))
    cmd = [a.mpirun, "--allow-run-as-root", "--oversubscribe"] + shlex.split(a.mpi_args) + \
        ["-np", str(n), a.mpi_bench, op, str(a.minbytes), str(a.maxbytes), str(a.factor),
         str(a.warmup), str(a.iters), str(a.reps), str(a.iters_bytes)]
    rc, out = run_cmd(cmd, env, limit)
    rows = {}
    for line in (out or "").splitlines():
        f = line.split()
        if len(f) == 7 and f[0] == "ROW":
            if int(f[5]):
                return None, "mpi_bench: %s wrong elements at %s B" % (f[5], f[1])
            rows[int(f[1])] = float(f[2])
    if rc != 0:
        return None, "mpi_bench exit %s: %s" % (rc, out[-800:])
    return rows, None


def run_memcpy(a, tmp, limit):
    js = os.path.join(tmp, "memcpy.json")
    cmd = [a.dlpg_bench, "--memcpy", "-b", str(a.minbytes), "-e", str(a.maxbytes), "-f", str(a.factor),
           "-w", str(a.warmup), "-n", str(a.iters), "--reps", str(a.reps),
           "--iters-bytes", str(a.iters_bytes), "-J", js]
    rc, out = run_cmd(cmd, bench_env(a, {}), limit)
    if rc != 0:
        return None, "dlpg-bench --memcpy exit %s: %s" % (rc, out[-400:])
    with open(js) as f:
        doc = json.load(f)
    return {r["size"]: r["memcpy"]["time_us"] for r in doc["rows"]}, None


# ----------------------------------------------------------------------------- report

def med(xs):
    return statistics.median(xs) if xs else None


def bw(nbytes, us, factor):
    return nbytes / (us * 1e3) * factor if us else None


def fnum(x, fmt="%.2f"):
    return "-" if x is None else fmt % x


def ftime(us):
    if us is None:
        return "-"
    return "%.2f" % us if us < 100 else "%.1f" % us if us < 10000 else "%.0f" % us


def tables(a, data, memcpy, ranks):
    """Markdown per op and rank count; returns (lines, plot series, verdict inputs)."""
    lines, series = [], {}
    for op in a.ops:
        for n in ranks:
            have = {impl: data.get((impl, n, op), {}) for impl in IMPLS}
            if not any(have.values()):
                continue
            f = BUSBW[op](n)
            lines += ["", "### %s, %d ranks" % (op, n), "",
                      "| size | shm (us) | gloo (us) | MPI (us) | torch (us) | shm busbw | gloo busbw | "
                      "MPI busbw | torch busbw | memcpy (GB/s) | shm/gloo | shm/MPI | shm/memcpy |",
                      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
            sizes = sorted(set().union(*[set(d) for d in have.values()]))
            for s in sizes:
                t = {impl: med(have[impl].get(s, [])) for impl in IMPLS}
                b = {impl: bw(s, t[impl], f) for impl in IMPLS}
                mc = med(memcpy.get(s, []))
                mbw = s / (mc * 1e3) if mc else None
                for impl in IMPLS:
                    if b[impl]:
                        series.setdefault((op, n), {}).setdefault(impl, []).append((s, b[impl]))
                if mbw:
                    series.setdefault((op, n), {}).setdefault("memcpy", []).append((s, mbw))
                r = lambda x, y: x / y if x and y else None  # noqa: E731
                lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    fmt_size(s), ftime(t["shm"]), ftime(t["gloo"]), ftime(t["mpi"]), ftime(t["torch"]),
                    fnum(b["shm"], "%.3f"), fnum(b["gloo"], "%.3f"), fnum(b["mpi"], "%.3f"),
                    fnum(b["torch"], "%.3f"), fnum(mbw, "%.2f"), fnum(r(b["shm"], b["gloo"]), "%.3g"),
                    fnum(r(b["shm"], b["mpi"]), "%.3g"), fnum(r(b["shm"], mbw), "%.3g")))
    return lines, series


def verdicts(data, memcpy, ranks):
    """The issue's benchmark targets that these tables can judge."""
    out = []

    def t(impl, n, op, s):
        return med(data.get((impl, n, op), {}).get(s, []))
    if t("shm", 2, "allreduce", 8) is not None:
        v = t("shm", 2, "allreduce", 8)
        out.append("- allreduce 8 B, 2 ranks, blocking <= 2 us: %.2f us: **%s**" % (v, "met" if v <= 2 else "missed"))
    worst = None
    for n in ranks:
        if not 2 <= n <= 8:
            continue
        for s in sorted(data.get(("shm", n, "allreduce"), {})):
            if s > 4096:
                continue
            x, m = t("shm", n, "allreduce", s), t("mpi", n, "allreduce", s)
            if x and m and (worst is None or x / m > worst[0]):
                worst = (x / m, n, s)
    if worst:
        out.append("- allreduce up to 4 KiB, 2-8 ranks, <= 4x MPI's time: worst %.2fx (%d ranks, %s): **%s**" % (
            worst[0], worst[1], fmt_size(worst[2]), "met" if worst[0] <= 4 else "missed"))
    s16 = 16 << 20
    x, g, m = t("shm", 2, "allreduce", s16), t("gloo", 2, "allreduce", s16), t("mpi", 2, "allreduce", s16)
    if x and g:
        out.append("- allreduce 16 MiB, 2 ranks, busbw >= 5x Gloo's: %.2fx: **%s**" % (g / x, "met" if g / x >= 5 else "missed"))
    if x and m:
        out.append("- allreduce 16 MiB, 2 ranks, busbw >= 2x MPI's: %.2fx: **%s**" % (m / x, "met" if m / x >= 2 else "missed"))
    worst = None
    for n in ranks:
        for s in sorted(data.get(("shm", n, "allreduce"), {})):
            x, m = t("shm", n, "allreduce", s), t("mpi", n, "allreduce", s)
            if s >= 64 << 10 and x and m and (worst is None or m / x < worst[0]):
                worst = (m / x, n, s)
    if worst:
        out.append("- allreduce from 64 KiB up, busbw >= 1.0x MPI's at every rank count: worst %.2fx "
                   "(%d ranks, %s): **%s**" % (worst[0], worst[1], fmt_size(worst[2]),
                                               "met" if worst[0] >= 1.0 else "missed"))
    worst = None
    for n in ranks:
        f = BUSBW["allreduce"](n)
        for s in sorted(data.get(("shm", n, "allreduce"), {})):
            x, mc = t("shm", n, "allreduce", s), med(memcpy.get(s, []))
            if s >= 64 << 20 and x and mc:
                q = (s / x * f) / (s / mc)
                if worst is None or q < worst[0]:
                    worst = (q, n, s)
    if worst:
        out.append("- allreduce from 64 MiB up, busbw >= 0.5x single-core memcpy: worst %.2fx (%d ranks, %s): **%s**" % (
            worst[0], worst[1], fmt_size(worst[2]), "met" if worst[0] >= 0.5 else "missed"))
    return out


COLORS = {"shm": "#d62728", "gloo": "#1f77b4", "mpi": "#2ca02c", "torch": "#ff7f0e", "memcpy": "#7f7f7f"}


def plot(series, ops, ranks, path_base):
    """PNG with matplotlib when importable, else an SVG drawn here; returns the path."""
    panels = [(op, n) for op in ops for n in ranks if (op, n) in series]
    if not panels:
        return None
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return plot_svg(series, panels, len(ranks), path_base + ".svg")
    cols = len(ranks)
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for i, (op, n) in enumerate(panels):
        ax = axes[i // cols][i % cols]
        for impl, pts in series[(op, n)].items():
            xs, ys = zip(*pts)
            ax.plot(xs, ys, "--" if impl == "memcpy" else "-", color=COLORS[impl], marker="o",
                    markersize=2, label=impl)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title("%s, %d ranks" % (op, n), fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_xlabel("size (B)", fontsize=8)
        ax.set_ylabel("busbw (GB/s)", fontsize=8)
        ax.legend(fontsize=6)
    for j in range(len(panels), rows * cols):
        axes[j // cols][j % cols].axis("off")
    fig.tight_layout()
    path = path_base + ".png"
    fig.savefig(path, dpi=110)
    return path


def plot_svg(series, panels, cols, path):
    import math
    W, H, M = 360, 260, 40
    rows = (len(panels) + cols - 1) // cols
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" '
           'font-size="9">' % (W * cols, H * rows)]
    for i, key in enumerate(panels):
        ox, oy = (i % cols) * W, (i // cols) * H
        pts = [p for s in series[key].values() for p in s if p[1] > 0]
        x0, x1 = math.log2(min(p[0] for p in pts)), math.log2(max(p[0] for p in pts))
        y0, y1 = math.log10(min(p[1] for p in pts)), math.log10(max(p[1] for p in pts))
        x1, y1 = max(x1, x0 + 1), max(y1, y0 + 1)
        X = lambda v: ox + M + (math.log2(v) - x0) / (x1 - x0) * (W - 2 * M)  # noqa: E731
        Y = lambda v: oy + H - M - (math.log10(v) - y0) / (y1 - y0) * (H - 2 * M)  # noqa: E731
        out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>' % (
            ox + M, oy + M, W - 2 * M, H - 2 * M))
        out.append('<text x="%d" y="%d">%s, %d ranks: busbw (GB/s, log) vs size (B, log2)</text>' % (
            ox + M, oy + M - 6, key[0], key[1]))
        for e in range(int(math.floor(y0)), int(math.ceil(y1)) + 1):
            if y0 <= e <= y1:
                out.append('<text x="%d" y="%.1f" text-anchor="end">1e%d</text>' % (ox + M - 3, Y(10 ** e) + 3, e))
        for e in range(int(x0), int(x1) + 1, 4):
            out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>' % (X(2 ** e), oy + H - M + 12, fmt_size(2 ** e).replace(" ", "")))
        for k, (impl, s) in enumerate(series[key].items()):
            d = " ".join("%s%.1f,%.1f" % ("M" if j == 0 else "L", X(x), Y(y)) for j, (x, y) in enumerate(s) if y > 0)
            out.append('<path d="%s" fill="none" stroke="%s" stroke-width="1.5"%s/>' % (
                d, COLORS[impl], ' stroke-dasharray="4,3"' if impl == "memcpy" else ""))
            out.append('<text x="%d" y="%d" fill="%s">%s</text>' % (ox + M + 6, oy + M + 12 + 11 * k, COLORS[impl], impl))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    return path


def machine():
    try:
        up = subprocess.run(["uptime"], stdout=subprocess.PIPE, text=True).stdout.strip()
    except OSError:
        up = "load average %s" % " ".join("%.2f" % x for x in os.getloadavg())
    return "%s, nproc %d, %s; %s" % (platform.node() or "?", os.cpu_count() or 0, cpu_model("?"), up)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,4", help="comma-separated rank counts")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--impls", default="shm,gloo,mpi,torch,memcpy")
    ap.add_argument("--minbytes", type=parse_size, default=8)
    ap.add_argument("--maxbytes", type=parse_size, default=256 << 20)
    ap.add_argument("--factor", type=float, default=2)
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
    ap.add_argument("--out", default=os.path.join(HERE, "results", "cpu-compare.md"))
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--result", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_worker:
        return torch_worker(a)
    a.ops = [o for o in a.ops.split(",") if o]
    ranks = [int(x) for x in a.ranks.split(",") if x]
    impls = [x for x in a.impls.split(",") if x]
    bindir = a.bin or os.path.join(REPO, "build", "bench")
    a.dlpg_bench = os.path.join(bindir, "dlpg-bench")
    a.mpi_bench = os.path.join(bindir, "mpi_bench")
    if "torch" in impls:
        try:
            import torch  # noqa: F401
        except ImportError:
            print("cpu-compare: torch not importable by %s; torch left out" % sys.executable)
            impls.remove("torch")
    if "mpi" in impls and not (os.access(a.mpi_bench, os.X_OK) and shutil.which(a.mpirun)):
        print("cpu-compare: no %s or %s; MPI left out" % (a.mpi_bench, a.mpirun))
        impls.remove("mpi")
    started = datetime.datetime.now(datetime.timezone.utc)
    t_start = time.time()
    machine_before = machine()
    data, memcpy, notes, skipped, torch_runs = {}, {}, [], [], {}
    order = [i for i in IMPLS if i in impls]
    with tempfile.TemporaryDirectory(prefix="dlpg-cpucmp-") as tmp:
        for rnd in range(a.rounds):
            if "memcpy" in impls:
                res, err = run_memcpy(a, tmp, a.timeout * 4)
                if err:
                    notes.append(err)
                for s, us in (res or {}).items():
                    memcpy.setdefault(s, []).append(us)
            # Collective by collective (allreduce first: most targets are about it), so a
            # spent budget cuts the last collective, not the largest rank counts.
            for op in a.ops:
                for n in ranks:
                    k = rnd % max(len(order), 1)
                    for impl in order[k:] + order[:k]:
                        left = a.budget_s - (time.time() - t_start)
                        if left < 10 and not (impl == "torch" and (rnd, n) in torch_runs):
                            skipped.append("%s %s %d ranks round %d" % (impl, op, n, rnd + 1))
                            continue
                        t0 = time.time()
                        if impl == "mpi":
                            res, err = run_mpi(a, n, op, min(left, a.timeout * 4))
                        elif impl == "torch":
                            # One launch per rank count times every collective: 16 torch
                            # processes take seconds to start, three times that per round.
                            if (rnd, n) not in torch_runs:
                                torch_runs[(rnd, n)] = run_torch(a, n, a.ops, tmp, min(left, a.timeout * 4))
                            got, err = torch_runs[(rnd, n)]
                            res = (got or {}).get(op)
                            if op != a.ops[0]:
                                err = None  # reported with the first collective
                        else:
                            res, err = run_dlpg(a, impl, n, op, tmp, min(left, a.timeout * 4))
                        print("round %d: %s %s %d ranks: %.1f s%s" % (rnd + 1, impl, op, n, time.time() - t0,
                                                                      "" if not err else " (" + err[:200] + ")"),
                              flush=True)
                        if err:
                            notes.append("%s %s %d ranks: %s" % (impl, op, n, err))
                        for s, us in (res or {}).items():
                            data.setdefault((impl, n, op), {}).setdefault(s, []).append(us)
    elapsed = time.time() - t_start
    lines, series = tables(a, data, memcpy, ranks)
    base = os.path.splitext(os.path.abspath(a.out))[0]
    os.makedirs(os.path.dirname(base), exist_ok=True)
    plot_path = plot(series, a.ops, ranks, base + "-busbw")
    try:
        import torch
        tv = torch.__version__
    except ImportError:
        tv = "absent"
    mpiv = ""
    if "mpi" in impls:
        rc, out = run_cmd([a.mpirun, "--version"], dict(os.environ), 30)
        mpiv = (out or "").splitlines()[0] if out else "?"
    cmd = " ".join(shlex.quote(x) for x in [sys.executable] + sys.argv)
    md = ["# CPU collectives side by side: dlpg shm, dlpg Gloo, Open MPI, torch gloo, memcpy", "",
          "- command: `%s` (from `%s`)" % (cmd, os.getcwd()),
          "- date: %s, %.0f s" % (started.strftime("%Y-%m-%d %H:%M UTC"), elapsed),
          "- machine before: %s" % machine_before,
          "- machine after: %s" % machine(),
          "- dlpg-bench: `%s` (DLPG_CPU_BACKEND=shm / gloo, --outofplace, -c 1); MPI: `%s %s` "
          "(%s); torch %s (gloo, in place); memcpy: `dlpg-bench --memcpy` (one core)" % (
              os.path.relpath(a.dlpg_bench, os.getcwd()), os.path.basename(a.mpirun), a.mpi_args, mpiv, tv),
          "- method: float32, sum; per size %d warmup (at most the iterations), iterations min(%d, "
          "%s / size) (at least 1), median of %d loops, mean over ranks; %d round(s), median over "
          "rounds; busbw = bytes / time x nccl-tests' factor; ratios are busbw ratios (> 1: shm "
          "faster); shm/memcpy compares shm's busbw with one core's memcpy bandwidth of the same size"
          % (a.warmup, a.iters, fmt_size(a.iters_bytes), a.reps, a.rounds),
          ]
    if plot_path:
        md.append("- plot: `%s`" % os.path.relpath(plot_path, os.path.dirname(os.path.abspath(a.out))))
    if skipped:
        md.append("- skipped (budget of %.0f s spent): %s" % (a.budget_s, "; ".join(skipped)))
    for nte in notes:
        md.append("- problem: %s" % nte.replace("\n", " ")[:600])
    v = verdicts(data, memcpy, ranks)
    if v:
        md += ["", "## Targets this run can judge", ""] + v
    md += lines + [""]
    text = "\n".join(md)
    print(text)
    with open(a.out, "w") as f:
        f.write(text)
    print("cpu-compare: wrote %s%s" % (a.out, " and %s" % plot_path if plot_path else ""))
    return 1 if notes else 0


if __name__ == "__main__":
    sys.exit(main())
