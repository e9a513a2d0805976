"""A jitted dlpg.jax.allreduce of 16 MiB on JAX's CPU platform, 2 processes: each call
waited for alone, against two calls dispatched before one wait (the first result still
alive when the second runs), beside a jitted `x + 1` timed the same ways; once with JAX's
asynchronous CPU dispatch and once without (jax_cpu_enable_async_dispatch=False).

    PYTHONPATH=python_shim DLPG_LIBRARY=... python3 bench/jax_cpu_probe.py

Needs libdlpg_xla.so (plugin/xla/build.sh). Prints one line per case, rank 0's medians.
"""
import os
import statistics
import subprocess
import sys
import time


def rank(rank, world, port):
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax
    import jax.numpy as jnp
    import dlpg.jax as dj
    sync = bool(os.environ.get("PROBE_SYNC_DISPATCH"))
    if sync:
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    dj.init("tcp://127.0.0.1:%d" % port, rank=rank, world_size=world, timeout=60, ordered=False)
    x = jnp.full((4 << 20,), rank + 1.0, jnp.float32)
    for name, fn in (("dlpg allreduce", jax.jit(dj.allreduce)), ("x + 1", jax.jit(lambda v: v + 1.0))):
        for _ in range(2):
            jax.block_until_ready(fn(x))
        alone, pairs = [], []
        for _ in range(7):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(x))
            alone.append(time.perf_counter() - t0)
        for _ in range(5):
            t0 = time.perf_counter()
            y = fn(x)
            y = fn(x)
            jax.block_until_ready(y)
            pairs.append((time.perf_counter() - t0) / 2)
        if rank == 0:
            print("%s dispatch, %s: alone %.2f ms, two then wait %.2f ms per call" % (
                "sync" if sync else "async", name, statistics.median(alone) * 1e3,
                statistics.median(pairs) * 1e3), flush=True)
    dj.finalize()


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--rank":
        return rank(*map(int, sys.argv[2:]))
    import dlpg
    for sync in ("", "1"):
        env = dict(os.environ, PROBE_SYNC_DISPATCH=sync)
        with dlpg.Store("tcp://127.0.0.1:0?serve=1", 60) as s:
            ps = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank", str(r), "2",
                                    str(s.port)], env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True) for r in range(2)]
            for r, p in enumerate(ps):
                out, err = p.communicate(timeout=120)
                sys.stdout.write(out)
                if p.returncode:
                    print("rank %d exit %d: %s" % (r, p.returncode, err[-1500:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
