"""Shared helpers: the shim on sys.path, free ports, and a multi-process launcher with a
hard deadline (pytest-timeout is not assumed to be installed)."""

import multiprocessing as mp
import os
import queue as queue_mod
import socket
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SHIM = os.path.join(REPO, "python_shim")
for p in (SHIM, HERE):
    if p not in sys.path:
        sys.path.insert(0, p)
# Children started by spawn or subprocess find the shim the same way.
os.environ["PYTHONPATH"] = os.pathsep.join(
    [SHIM, HERE] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(target, world, args_of_rank, deadline_s=120):
    """Run target(rank, *args_of_rank(rank), queue) in world spawned processes; return
    {rank: result dict}. Fails the test (and kills every rank) after deadline_s."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r,) + tuple(args_of_rank(r)) + (q,), daemon=True)
             for r in range(world)]
    for p in procs:
        p.start()
    results = {}
    end = time.monotonic() + deadline_s
    try:
        while len(results) < world:
            left = end - time.monotonic()
            if left <= 0:
                pytest.fail("ranks %s did not report within %ds" % (
                    sorted(set(range(world)) - set(results)), deadline_s))
            try:
                rank, res = q.get(timeout=min(left, 1.0))
                results[rank] = res
            except queue_mod.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead and len(results) < world:
                    time.sleep(0.5)
                    while True:
                        try:
                            rank, res = q.get_nowait()
                            results[rank] = res
                        except queue_mod.Empty:
                            break
                    if len(results) < world:
                        pytest.fail("a rank exited with code %s before reporting" %
                                    [p.exitcode for p in dead])
        for p in procs:
            p.join(max(1.0, end - time.monotonic()))
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
    return results


def cuda_devices():
    try:
        import torch
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001
        return 0


def require_impl(impl):
    """The "cpp" torch backend must be built (python3 -m dlpg.build_torch_ext; ci/test.sh and
    ci/gpu-test.sh build it): a missing build fails, it is not skipped."""
    if impl == "cpp":
        so = os.path.join(SHIM, "dlpg", "torch", "_C_dlpg.so")
        if not os.path.exists(so):
            pytest.fail("the C++ torch backend is not built (%s missing): run "
                        "python3 -m dlpg.build_torch_ext" % so)
