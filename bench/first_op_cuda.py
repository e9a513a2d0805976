"""The first CUDA allreduce of a fresh process: dlpg's (group creation + first op) against
NCCL's own library load + ncclGetUniqueId + ncclCommInitRank + first ncclAllReduce, world
size 1, each run in its own process, the variants alternating so that the machine's drift
hits all alike.

    python3 bench/first_op_cuda.py --runs 5 [--modes default,split,nonblocking,blocking]
        [--nccl-modes blocking,nonblocking] [--out F.md]

Every child first creates the CUDA context and a 1-float tensor with torch (not timed:
both sides need it), then times (NCCL's side from its dlopen of libnccl, which dlpg's first
CUDA op also does through its module), on the host clock, from the first communication call to
the end of a cudaStreamSynchronize after the first allreduce ("first op"), then the median
of 20 further allreduces ("next op"). dlpg's variants are DLPG_NCCL_COMM_MODE values: split
(a non-blocking init polled against the group's deadline, then a blocking ncclCommSplit
child for the operations), nonblocking and blocking, or default (the variable unset: split,
except that a communicator of one NCCL rank, as here, is created blocking). The store (dlpg's
tcp:// server, in the process) is opened before the clock starts, as NCCL's unique id is
assumed already exchanged. Prints a Markdown table of medians and the ratio to NCCL.
"""
import argparse
import ctypes
import ctypes.util
import glob
import json
import os
import statistics
import subprocess
import sys
import time


def _nccl_lib():
    cands = [os.environ.get("DLPG_BENCH_NCCL", ""), "/usr/local/cuda/lib64/libnccl.so.2",
             "/lib/x86_64-linux-gnu/libnccl.so.2", "/usr/lib/x86_64-linux-gnu/libnccl.so.2"]
    for p in sys.path:
        cands += glob.glob(os.path.join(p, "nvidia", "nccl", "lib", "libnccl.so.2"))
    for c in cands:
        if c and os.path.exists(c):
            return ctypes.CDLL(c)
    found = ctypes.util.find_library("nccl")
    if found:
        return ctypes.CDLL(found)
    raise SystemExit("first_op_cuda: libnccl.so.2 not found (set DLPG_BENCH_NCCL)")


class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def _child_nccl(torch, x, stream, nonblocking=False):
    t0 = time.perf_counter()
    # Loading libnccl is timed: dlpg's first CUDA op loads it too (through its module).
    nccl = _nccl_lib()
    comm = ctypes.c_void_p()

    def op():
        r = nccl.ncclAllReduce(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(x.data_ptr()),
                               ctypes.c_size_t(1), 7, 0, comm, ctypes.c_void_p(stream))
        assert r == 0, "ncclAllReduce returned %d" % r
        torch.cuda.synchronize()

    tl = time.perf_counter()
    uid = _UniqueId()
    assert nccl.ncclGetUniqueId(ctypes.byref(uid)) == 0
    t1 = time.perf_counter()
    r = nccl.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0)
    if nonblocking:  # NCCL_COMM_BLOCKING=0: poll as dlpg does, sleeping 20 us doubling to 1 ms
        nap, state = 20e-6, ctypes.c_int(7)
        while r in (0, 7):  # 7: ncclInProgress
            r = nccl.ncclCommGetAsyncError(comm, ctypes.byref(state)) or state.value
            if r != 7:
                break
            time.sleep(nap)
            nap = min(nap * 2, 1e-3)
    assert r == 0, "ncclCommInitRank returned %d" % r
    t2 = time.perf_counter()
    op()
    first = time.perf_counter() - t0
    phases = {"load": tl - t0, "unique id": t1 - tl, "init": t2 - t1, "op": first - (t2 - t0)}
    nxt = []
    for _ in range(20):
        t = time.perf_counter()
        op()
        nxt.append(time.perf_counter() - t)
    nccl.ncclCommDestroy(comm)
    return first, statistics.median(nxt), phases


def _child_dlpg(torch, x, _stream):  # dlpg orders on torch's current stream itself
    import dlpg
    store = dlpg.Store("tcp://127.0.0.1:0?serve=1", 60)
    t0 = time.perf_counter()
    g = dlpg.Group(store, 0, 1, timeout=60, name="first-op")
    t1 = time.perf_counter()
    g.allreduce(x)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    # The group (store rendezvous) and the first op (the NCCL module, the communicator, the op).
    phases = {"group": t1 - t0, "first op": first - (t1 - t0)}
    nxt = []
    for _ in range(20):
        t = time.perf_counter()
        g.allreduce(x)
        torch.cuda.synchronize()
        nxt.append(time.perf_counter() - t)
    g.destroy()
    return first, statistics.median(nxt), phases


def _stamp_stderr():
    """Route this process's stderr (NCCL's and dlpg's logs) through a pipe that stamps each
    line with the host clock; returns the list the lines land in, as (seconds, text)."""
    import threading
    r, w = os.pipe()
    os.dup2(w, 2)
    lines = []

    def read():
        with os.fdopen(r, "r", errors="replace") as f:
            for line in f:
                lines.append((time.perf_counter(), line.rstrip()))
    threading.Thread(target=read, daemon=True).start()
    return lines


def child(variant):
    lines = _stamp_stderr() if os.environ.get("FIRST_OP_TRACE") else None
    t_start = time.perf_counter()
    import torch
    x = torch.ones(1, device="cuda")
    torch.cuda.synchronize()
    stream = torch.cuda.current_stream().cuda_stream
    if variant.startswith("nccl"):
        first, nxt, phases = _child_nccl(torch, x, stream, nonblocking=variant != "nccl")
    else:
        first, nxt, phases = _child_dlpg(torch, x, stream)
    assert abs(float(x.item()) - 1.0) < 1e-6, "world-size-1 allreduce changed the value"
    out = {"variant": variant, "first_s": first, "next_s": nxt, "phases": phases}
    if lines is not None:
        time.sleep(0.2)  # the reader's last lines
        out["log"] = ["%8.1f ms  %s" % ((t - t_start) * 1e3, text) for t, text in lines
                      if "Init" in text or "dlpg" in text or "init" in text]
    print(json.dumps(out))


def _run_child(variant, **env):
    """One child process for variant (with env added): (the process, its JSON result or
    None)."""
    env = dict(os.environ, **env)
    # dlpg:MODE[+VAR=VALUE...] sets DLPG_NCCL_COMM_MODE (unless MODE is default) and the
    # named variables;
    # nccl:nonblocking is NCCL's own non-blocking init (NCCL_COMM_BLOCKING=0), polled.
    if variant.startswith("dlpg:"):
        mode, *extra = variant.split(":", 1)[1].split("+")
        if mode == "default":
            env.pop("DLPG_NCCL_COMM_MODE", None)
        else:
            env["DLPG_NCCL_COMM_MODE"] = mode
        env.update(kv.split("=", 1) for kv in extra)
    elif variant == "nccl:nonblocking":
        env["NCCL_COMM_BLOCKING"] = "0"
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", variant],
                       env=env, capture_output=True, text=True, timeout=120)
    line = [s for s in p.stdout.splitlines() if s.startswith("{")]
    return p, json.loads(line[-1]) if line else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--modes", default="default,split,nonblocking,blocking",
                    help="dlpg variants: default or DLPG_NCCL_COMM_MODE values, each optionally followed "
                         "by +VAR=VALUE settings (split+NCCL_RUNTIME_CONNECT=1)")
    ap.add_argument("--nccl-modes", default="blocking",
                    help="NCCL variants: blocking (ncclCommInitRank) and/or nonblocking "
                         "(NCCL_COMM_BLOCKING=0, polled as dlpg polls)")
    ap.add_argument("--out", default="")
    ap.add_argument("--child", default="")
    ap.add_argument("--trace", action="store_true",
                    help="one more run of each variant with NCCL's and dlpg's INFO logs, each "
                         "line stamped with ms since the process started")
    a = ap.parse_args()
    if a.child:
        return child(a.child)
    # Blocking NCCL ("nccl") always runs: it is what the ratios are taken against.
    variants = ["nccl"] + ["nccl:" + m for m in a.nccl_modes.split(",")
                           if m not in ("", "blocking")]
    variants += ["dlpg:" + m for m in a.modes.split(",") if m]
    got = {v: [] for v in variants}
    for run in range(a.runs):
        for v in (variants if run % 2 == 0 else variants[::-1]):
            p, r = _run_child(v)
            if p.returncode != 0 or r is None:
                print("%s run %d failed (rc %d):\n%s%s" % (v, run, p.returncode, p.stdout,
                                                          p.stderr[-3000:]), file=sys.stderr)
                continue
            got[v].append(r)
    nccl_first = statistics.median(r["first_s"] for r in got["nccl"]) if got["nccl"] else None
    rows = ["| variant | runs | first op, median (ms) | min-max (ms) | vs NCCL | next op, "
            "median (us) | phases, medians (ms) |", "|---|---|---|---|---|---|---|"]
    for v in variants:
        rs = got[v]
        if not rs:
            rows.append("| %s | 0 | failed | | | | |" % v)
            continue
        f = [r["first_s"] * 1e3 for r in rs]
        med = statistics.median(f)
        ratio = "%.2fx" % (med / (nccl_first * 1e3)) if nccl_first else "-"
        phases = ", ".join("%s %.1f" % (k, statistics.median(r["phases"][k] for r in rs) * 1e3)
                           for k in rs[0]["phases"])
        rows.append("| %s | %d | %.1f | %.1f-%.1f | %s | %.1f | %s |"
                    % (v, len(rs), med, min(f), max(f), ratio,
                       statistics.median(r["next_s"] for r in rs) * 1e6, phases))
    table = "\n".join(rows)
    print(table)
    if a.trace:
        for v in variants:
            p, r = _run_child(v, FIRST_OP_TRACE="1", NCCL_DEBUG="INFO",
                              NCCL_DEBUG_FILE="/dev/stderr", NCCL_DEBUG_SUBSYS="INIT",
                              DLPG_DEBUG="INFO")
            print("\n## trace of %s (rc %d)" % (v, p.returncode))
            if r is not None:
                print("first op %.1f ms, phases %s" % (r["first_s"] * 1e3, r["phases"]))
                print("\n".join(r.get("log", [])[-60:]))
            else:
                print(p.stdout[-2000:], p.stderr[-2000:])
    if a.out:
        with open(a.out, "w") as f:
            f.write("Command: `python3 bench/first_op_cuda.py --runs %d --modes %s --nccl-modes %s`"
                    "\n\n%s\n" % (a.runs, a.modes, a.nccl_modes, table))


if __name__ == "__main__":
    sys.exit(main())
