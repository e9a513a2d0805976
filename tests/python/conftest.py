"""Shared helpers: the shim on sys.path, stores the ranks meet on, and a multi-process
launcher with a hard deadline (pytest-timeout is not assumed to be installed).

No test picks a port by binding port 0 and releasing it (another job on the machine can take
it in between): a store is served here, in the test's own process, on a port the kernel picks
and that the server reports (port 0, read back), and the ranks get its address. Where a
server cannot report its port (torchrun's, jax.distributed's), random_port() gives a
candidate and the launch is retried when the port proves taken (retry_on_taken_port)."""

import contextlib
import datetime
import multiprocessing as mp
import os
import queue as queue_mod
import random
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


@contextlib.contextmanager
def dlpg_store(timeout=300):
    """A dlpg TCP store served by this process on a port the kernel picked: yields the URL
    every rank connects to (none serves), valid until the block ends."""
    import dlpg
    with dlpg.Store("tcp://127.0.0.1:0?serve=1", timeout) as s:
        yield "tcp://127.0.0.1:%d" % s.port


@contextlib.contextmanager
def torch_store(timeout=300):
    """A torch TCPStore served by this process on a port the kernel picked: yields
    (host, port) for dlpg_workers.init_torch, valid until the block ends."""
    import torch.distributed as dist
    s = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=timeout),
                      wait_for_workers=False)
    try:
        yield ("127.0.0.1", s.port)
    finally:
        del s


def random_port():
    """A candidate port for a server that cannot report the one it got, below Linux's
    ephemeral range (32768-60999) so that no outgoing connection holds it (nor the port
    after it, which env:// serves on); it may be taken: the caller retries with another one
    when it is (retry_on_taken_port)."""
    return random.SystemRandom().randrange(20000, 32767)


# How a server says its port was taken (EADDRINUSE from C, Python, gRPC and torch's stores).
TAKEN_PORT_WORDS = ("address already in use", "eaddrinuse", "errno 98", "in use",
                    "failed to add port", "failed to bind")


def port_was_taken(text):
    t = str(text).lower()
    return any(w in t for w in TAKEN_PORT_WORDS)


def retry_on_taken_port(launch, attempts=8):
    """launch(port) -> (result, failure text: "" when it did not fail) for random ports until
    a run does not fail for a taken port (port_was_taken); returns the last result."""
    for _ in range(attempts):
        result, text = launch(random_port())
        if not port_was_taken(text):
            return result
    return result


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


def require_torch_backend():
    """Import dlpg.torch here, in the test's process, before ranks start: where the C++
    extension has not been built for this torch (ci/test.sh and ci/gpu-test.sh prebuild it
    with python3 -m dlpg.build_torch_ext), the import builds it once here rather than inside
    the ranks' deadline; one that cannot be built fails the test."""
    import dlpg.torch
    assert dlpg.torch.IMPLEMENTATION == "cpp", dlpg.torch.IMPLEMENTATION
