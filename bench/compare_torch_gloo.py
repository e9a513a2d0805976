#!/usr/bin/python3
"""Side-by-side CPU allreduce: dlpg (through dlpg-bench) against torch.distributed on
backend "gloo", two processes each, on this machine, in one invocation.

Both sides run the same sizes with the same warmup, iterations and repetitions, and are
measured the nccl-tests way: host time of `iters` back-to-back operations divided by
iters, median over repetitions, averaged over the ranks. The two alternate size by size
for several rounds (dlpg, torch, dlpg, torch, ...) so machine noise hits both; the table
shows, per size, the median over rounds.

Run with /usr/bin/python3 (Debian's torch 1.13, which uses the same libgloo as dlpg):
    /usr/bin/python3 bench/compare_torch_gloo.py --bench build-bench/bench/dlpg-bench
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from bench_util import cpu_model, fmt_size

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MIB = 1 << 20


def parse_size(s):
    s = s.strip().upper().rstrip("B")
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s[:-1] if mul > 1 else s) * mul)


# ----------------------------------------------------------------------------- torch side

def torch_measure(dist, torch, rank, size, a):
    """One size on one torch rank: the median per-op time, averaged over the ranks."""
    count = max(size // 4, 1)
    # Small integers that differ by rank; reset before each repetition so nothing grows.
    src = torch.arange(count, dtype=torch.float32) % 4 + 1 + rank
    t = src.clone()
    for _ in range(a.warmup):
        dist.all_reduce(t)
    times = []
    for _ in range(a.reps):
        t.copy_(src)
        t0 = time.perf_counter()
        for _ in range(a.iters):
            dist.all_reduce(t)
        times.append((time.perf_counter() - t0) * 1e6 / a.iters)
    med = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(med)  # average over ranks, as dlpg-bench (and nccl-tests) do
    return med.item() / 2


def torch_worker(a):
    """One persistent torch rank: measures the sizes the driver posts under cmd/<k> in the
    driver's TCPStore, answers under res/<k> (rank 0), until it reads "stop"."""
    import torch
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", a.port, 3, False,
                          timeout=datetime.timedelta(seconds=a.timeout))
    pg_store = dist.PrefixStore("pg", store)
    dist.init_process_group("gloo", store=pg_store, rank=a.rank, world_size=2,
                            timeout=datetime.timedelta(seconds=a.timeout))
    # One correctness check: two ranks, every element is (i % 4 + 1) * 2 + 1.
    t = torch.arange(1024, dtype=torch.float32) % 4 + 1 + a.rank
    dist.all_reduce(t)
    ok = bool(torch.equal(t, (torch.arange(1024, dtype=torch.float32) % 4 + 1) * 2 + 1))
    if a.rank == 0:
        store.set("check", "ok" if ok else "wrong")
    k = 0
    while True:
        cmd = store.get("cmd/%d" % k).decode()
        if cmd == "stop":
            break
        us = torch_measure(dist, torch, a.rank, int(cmd), a)
        if a.rank == 0:
            store.set("res/%d" % k, "%.6f" % us)
        k += 1
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


class TorchRanks:
    """Two persistent torch ranks driven through a TCPStore hosted here, so torch and dlpg
    can alternate size by size without paying torch's start-up each time."""

    def __init__(self, a):
        import torch.distributed as dist
        self.a = a
        self.k = 0
        self.store = dist.TCPStore("127.0.0.1", 0, 3, True,
                                   timeout=datetime.timedelta(seconds=a.timeout),
                                   wait_for_workers=False)
        cmd = [sys.executable, os.path.abspath(__file__), "--torch-worker",
               "--port", str(self.store.port), "--warmup", str(a.warmup),
               "--iters", str(a.iters), "--reps", str(a.reps), "--timeout", str(a.timeout)]
        self.procs = [subprocess.Popen(cmd + ["--rank", str(r)]) for r in range(2)]
        self.check = self.store.get("check").decode()

    def measure(self, size):
        self.store.set("cmd/%d" % self.k, str(size))
        us = float(self.store.get("res/%d" % self.k).decode())
        self.k += 1
        return us

    def close(self):
        self.store.set("cmd/%d" % self.k, "stop")
        rcs = []
        for p in self.procs:
            try:
                rcs.append(p.wait(timeout=self.a.timeout))
            except subprocess.TimeoutExpired:
                p.kill()
                rcs.append(-9)
        return rcs


# ----------------------------------------------------------------------------- dlpg side

def dlpg_measure(a, size, out_json):
    """One size through dlpg-bench (its own 2 ranks and store); returns (time_us, wrong, doc)."""
    cmd = [a.bench, "allreduce", "--device", "cpu", "--nranks", "2", "-d", "float", "-o", "sum",
           "-b", str(size), "-e", str(size), "-w", str(a.warmup), "-n", str(a.iters),
           "--reps", str(a.reps), "-c", "1", "-T", str(a.timeout), "-J", out_json] + \
        shlex.split(a.dlpg_args)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=a.timeout * 2)
    if r.returncode != 0:
        sys.stdout.write(r.stdout)
        raise RuntimeError("dlpg-bench failed with exit code %d" % r.returncode)
    with open(out_json) as f:
        doc = json.load(f)
    row = doc["rows"][0]
    # --inplace runs the in-place columns only ("dlpg_inplace"), else out of place ("dlpg").
    res = row["dlpg_inplace"] if "--inplace" in a.dlpg_args else row["dlpg"]
    return res["time_us"], res["wrong"], doc


def sizes_of(a):
    out, s = [], a.minbytes
    while s <= a.maxbytes:
        out.append(s)
        nxt = int(s * a.factor)
        if nxt <= s:
            break
        s = nxt
    return out


# ----------------------------------------------------------------------------- report

def run_rounds(a, sizes, torch_ranks, dl, tt, checks):
    """Alternate dlpg and torch size by size for a.rounds rounds; returns dlpg's build."""
    build = "?"
    with tempfile.TemporaryDirectory(prefix="dlpg-cmp-") as tmp:
        for rnd in range(a.rounds):
            for s in sizes:
                # Alternate which side goes first, so neither always follows the other.
                order = ("dlpg", "torch") if rnd % 2 == 0 else ("torch", "dlpg")
                for side in order:
                    if side == "dlpg":
                        us, wrong, doc = dlpg_measure(a, s, os.path.join(tmp, "d.json"))
                        build = doc.get("build", "?")
                        dl[s].append(us)
                        checks.append(wrong)
                    else:
                        tt[s].append(torch_ranks.measure(s))
            print("round %d/%d done" % (rnd + 1, a.rounds), flush=True)
    return build


def machine():
    model = cpu_model("?")
    return "%s, nproc %d, %s, load average %s" % (
        platform.node() or "?", os.cpu_count() or 0, model,
        " ".join("%.2f" % x for x in os.getloadavg()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", default=os.environ.get("DLPG_BENCH") or
                    os.path.join(REPO, "build-bench", "bench", "dlpg-bench"))
    ap.add_argument("--minbytes", type=parse_size, default=8)
    ap.add_argument("--maxbytes", type=parse_size, default=64 * MIB)
    ap.add_argument("--factor", type=float, default=2)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300)
    # torch.distributed.all_reduce reduces in place, so the like-for-like dlpg run does too.
    ap.add_argument("--dlpg-args", default="--inplace",
                    help="extra dlpg-bench options, e.g. --inplace")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "cpu-allreduce-vs-torch-gloo.md"))
    # Internal: one torch rank.
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_worker:
        return torch_worker(a)

    import torch
    sizes = sizes_of(a)
    dl = {s: [] for s in sizes}
    tt = {s: [] for s in sizes}
    checks = []
    started = datetime.datetime.now(datetime.timezone.utc)
    torch_ranks = TorchRanks(a)
    # A SIGTERM ends the driver through the except below, which takes its ranks along.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        build = run_rounds(a, sizes, torch_ranks, dl, tt, checks)
    except BaseException:
        for p in torch_ranks.procs:
            p.kill()
        raise
    rcs = torch_ranks.close()
    if any(rcs) or torch_ranks.check != "ok":
        print("torch ranks: exit codes %s, check %s" % (rcs, torch_ranks.check))
        return 1

    lines = []
    lines.append("| size | dlpg time (us) | torch time (us) | time ratio (dlpg/torch) | "
                 "dlpg busbw (GB/s) | torch busbw (GB/s) | bw ratio (dlpg/torch) |")
    lines.append("|---:|---:|---:|---:|---:|---:|---:|")
    res = {}
    for s in sizes:
        if not dl[s] or not tt[s]:
            continue
        d_us, t_us = statistics.median(dl[s]), statistics.median(tt[s])
        # Two ranks: busbw = algbw * 2(n-1)/n = algbw.
        d_bw, t_bw = s / (d_us * 1e3), s / (t_us * 1e3)
        res[s] = (d_us, t_us, d_bw, t_bw)
        lines.append("| %s | %.1f | %.1f | %.3f | %.3f | %.3f | %.3f |" % (
            fmt_size(s), d_us, t_us, d_us / t_us, d_bw, t_bw, d_bw / t_bw))

    verdicts = []
    if 16 * MIB in res:
        d_us, t_us, d_bw, t_bw = res[16 * MIB]
        met = d_bw >= 0.95 * t_bw
        verdicts.append("- bandwidth at 16 MiB >= 0.95x torch's: dlpg %.3f GB/s vs torch %.3f GB/s "
                        "= %.3fx: **%s**" % (d_bw, t_bw, d_bw / t_bw, "met" if met else "MISSED"))
    if 8 in res:
        d_us, t_us, _, _ = res[8]
        met = d_us <= 1.1 * t_us
        verdicts.append("- time at 8 B <= 1.1x torch's: dlpg %.1f us vs torch %.1f us = %.3fx: "
                        "**%s**" % (d_us, t_us, d_us / t_us, "met" if met else "MISSED"))
    wrong = sum(w for w in checks if w and w > 0)
    cmd = " ".join(shlex.quote(x) for x in [sys.executable] + sys.argv)
    md = ["# CPU allreduce: dlpg vs torch.distributed (gloo), 2 processes", "",
          "- command: `%s` (from `%s`)" % (cmd, os.getcwd()),
          "- date: %s" % started.strftime("%Y-%m-%d %H:%M UTC"),
          "- machine: %s" % machine(),
          "- torch %s (Debian, backend gloo, TCPStore on 127.0.0.1)" %
          torch.__version__,
          "- dlpg: `%s` (%s), `dlpg-bench allreduce --device cpu --nranks 2 -d float -o sum %s`" % (
              os.path.relpath(a.bench, REPO), build, a.dlpg_args),
          "- method: float32 sum; per size %d warmup, then %d repetitions of %d back-to-back "
          "operations, median repetition, averaged over the 2 ranks; %d rounds, alternating "
          "dlpg and torch size by size (dlpg-bench started per size, two persistent torch "
          "ranks driven through a TCPStore; the first side alternates by round); the table "
          "shows the median over rounds. dlpg runs %s, torch in place (its API)." % (
              a.warmup, a.reps, a.iters, a.rounds,
              "in place" if "--inplace" in a.dlpg_args else "out of place (input kept)"),
          "- dlpg result check: %s wrong elements over all rows and rounds" % wrong, "",
          ] + lines + ["", "Targets:", ""] + verdicts + [""]
    text = "\n".join(md)
    print(text)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        f.write(text)
    print("wrote %s" % a.out)
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
