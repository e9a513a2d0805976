"""A jitted dlpg.jax.allreduce against JAX's own collective (a jitted shard_map psum over
processes joined by jax.distributed), side by side, at 8 B and 256 MiB.

    python3 bench/jax_allreduce.py [--out FILE.md] [--configs cuda1,cpu2,cpu4,cuda2]
        [--sizes 8,16777216] [--impls dlpg-fast,jax]

Configurations (each one job of WORLD processes, one device each):
  cuda1  world size 1 on the GPU           cudaN  N processes, one GPU each (N GPUs needed)
  cpuN   N processes on JAX's CPU platform (dlpg: its default CPU backend, shared memory on
         one host; JAX: its gloo CPU collectives)
Time per call: the jitted function is dispatched 20 times (fewer at large sizes) and the
last result waited for; the median over batches, on rank 0, after warm-up. Bandwidth is
the algorithm bandwidth (bytes / time); bus bandwidth is 2(N-1)/N of it. Rows "in-jit"
(small sizes only) time LOOP dependent calls inside one jitted function, per call: the
collective without the per-dispatch cost (a fori_loop for jax, dlpg-default and
dlpg-ordered; for dlpg-fast, whose calls must sit in the jitted body itself, LOOP calls
unrolled). Implementations: dlpg-default (dlpg.jax.init's default, ordered=None: a call in
the jitted body carries no effect, one in a loop the ordered effect), dlpg-ordered
(ordered=True: an ordered JAX effect, dispatched by JAX's Python path; the default before
ordered=None existed), dlpg-fast (ordered=False: no effect, JAX's C++ dispatch path),
dlpg-effect (no ordering effect but an unordered one, small sizes only: what any effect
costs per dispatch), jax. Last, the ratio of each dlpg variant's time per call to psum's
at 8 B and of its bandwidth to psum's at every size from 1 MiB, per configuration.

--probe: instead, at each size, the jitted allreduce and a jitted `x + 1` of the same array
timed three ways, each call waited for: alone (the previous result freed first), kept (the
previous result still alive), and two dispatched before one wait; with the minor page faults
of rank 0's process per call (getrusage), to tell an output in fresh pages from the
collective's own cost. Run it again under GLIBC_TUNABLES to try another allocator setting.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

SIZES = (8, 256 << 20)
# dlpg-default: dlpg.jax.init() (ordered=None); dlpg-ordered: ordered=True (an ordered JAX
# effect); dlpg-fast: ordered=False (no effect, JAX's C++ dispatch path); dlpg-effect: the
# same with an unordered effect, 8 B only (what any effect costs per dispatch); jax: a
# jitted shard_map psum.
IMPLS = ("dlpg-default", "dlpg-ordered", "dlpg-fast", "dlpg-effect", "jax")
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def _random_port():
    """A candidate for jax.distributed's coordinator, which cannot report a port it picked
    itself: below Linux's ephemeral range; run_config retries on another when it is taken."""
    return random.SystemRandom().randrange(20000, 32768)


def _port_was_taken(errs):
    text = " ".join(errs).lower()
    return any(w in text for w in ("address already in use", "eaddrinuse", "failed to add port",
                                   "failed to bind"))


def _batches(nbytes, platform):
    if nbytes <= 1 << 20:
        return 20, 15
    return (5, 5) if platform == "cuda" else (2, 3)


def setup(a):
    """This process's part of configuration a: (fn, looped, make, first, done), where fn is
    the jitted allreduce, looped LOOP dependent calls in one jitted function, make(n) this
    rank's input of n float32, first(y) the first element of y here, done() the teardown."""
    if a.platform == "cuda" and a.world > 1:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(a.rank)
    os.environ["JAX_PLATFORMS"] = a.platform
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import numpy as np
    import jax
    import jax.numpy as jnp
    if a.impl == "jax":
        if a.platform == "cpu":
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        if a.world > 1:
            jax.distributed.initialize("127.0.0.1:%d" % a.port, num_processes=a.world,
                                       process_id=a.rank)
        from jax.sharding import NamedSharding, PartitionSpec as P
        try:
            from jax import shard_map
        except ImportError:
            from jax.experimental.shard_map import shard_map
        mesh = jax.make_mesh((a.world,), ("x",), devices=jax.devices()[:a.world]) \
            if a.world == 1 else jax.make_mesh((a.world,), ("x",))
        fn = jax.jit(shard_map(lambda x: jax.lax.psum(x, "x"), mesh=mesh,
                               in_specs=P("x"), out_specs=P("x")))
        # psum's result is invariant over "x" while the loop carry varies: cast it back
        # (jax.lax.pcast in jax 0.11, pvary before).
        if hasattr(jax.lax, "pcast"):
            body = lambda i, y: jax.lax.pcast(jax.lax.psum(y, "x"), "x", to="varying")  # noqa: E731
        elif hasattr(jax.lax, "pvary"):
            body = lambda i, y: jax.lax.pvary(jax.lax.psum(y, "x"), "x")  # noqa: E731
        else:
            body = lambda i, y: jax.lax.psum(y, "x")  # noqa: E731
        looped = jax.jit(shard_map(lambda x: jax.lax.fori_loop(0, a.loop, body, x),
                                   mesh=mesh, in_specs=P("x"), out_specs=P("x")))
        sharding = NamedSharding(mesh, P("x"))

        def make(n):
            local = np.full((n,), a.rank + 1, np.float32)
            return jax.make_array_from_process_local_data(sharding, local)

        def first(y):
            return np.asarray(y.addressable_shards[0].data)[:1]

        def done():
            if a.world > 1:
                jax.distributed.shutdown()
    else:
        import dlpg.jax as dj
        # The driver serves the store (port 0, read back); every rank is its client.
        url = "tcp://127.0.0.1:%d" % a.port
        ordered = {"dlpg-default": None, "dlpg-ordered": True}.get(a.impl, False)
        dj.init(url, rank=a.rank, world_size=a.world, timeout=120, ordered=ordered)
        if a.impl == "dlpg-effect":
            dj._set_mode("unordered-effect")
        fn = jax.jit(dj.allreduce)
        if ordered is not False:
            looped = jax.jit(lambda x: jax.lax.fori_loop(0, a.loop, lambda i, y: dj.allreduce(y), x))
        else:
            # ordered=False orders calls only in the jitted body itself: unrolled, the same
            # LOOP dependent calls.
            def looped(x):
                for _ in range(a.loop):
                    x = dj.allreduce(x)
                return x
            looped = jax.jit(looped)

        def make(n):
            return jnp.full((n,), a.rank + 1, jnp.float32)

        def first(y):
            return np.asarray(y[:1])

        done = dj.finalize
    return fn, looped, make, first, done


def _minor_faults():
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def probe(a, fn, make):
    """--probe at each size: fn and a jitted x + 1, alone / kept / two then wait."""
    import jax
    add = jax.jit(lambda v: v + 1.0)
    for nbytes in a.sizes:
        x = make(max(1, nbytes // 4))
        for op, f in (("allreduce", fn), ("x + 1", add)):
            for _ in range(3):
                jax.block_until_ready(f(x))
            res = {}
            for mode in ("alone", "kept", "two then wait"):
                times, faults = [], []
                # kept: the previous call's result stays referenced while the next runs.
                alive = [jax.block_until_ready(f(x))] if mode == "kept" else []
                for _ in range(7 if mode != "two then wait" else 5):
                    f0, t0 = _minor_faults(), time.perf_counter()
                    if mode == "two then wait":
                        y1 = f(x)
                        y = f(x)
                        jax.block_until_ready(y)
                        jax.block_until_ready(y1)
                        calls = 2
                    else:
                        y = jax.block_until_ready(f(x))
                        calls = 1
                    times.append((time.perf_counter() - t0) / calls)
                    faults.append((_minor_faults() - f0) / calls)
                    alive = [y] if mode == "kept" else []
                    y = y1 = None
                alive.clear()
                res[mode] = (statistics.median(times), statistics.median(faults))
            if a.rank == 0:
                for mode, (t, flt) in res.items():
                    print(json.dumps({"impl": a.impl, "platform": a.platform, "world": a.world,
                                      "bytes": nbytes, "op": op, "mode": mode, "us": t * 1e6,
                                      "faults": flt}), flush=True)


def worker(a):
    """One process of one configuration; rank 0 prints one JSON line per size (--probe: per
    size, operation and mode)."""
    fn, looped, make, first, done = setup(a)  # sets JAX_PLATFORMS: jax is imported after it
    import jax
    if a.probe:
        probe(a, fn, make)
        return done()
    want = a.world * (a.world + 1) / 2
    for nbytes in a.sizes:
        n = max(1, nbytes // 4)
        x = make(n)
        y = fn(x)
        got = float(first(jax.block_until_ready(y))[0])
        assert got == want, "%s %s: got %s expected %s" % (a.impl, nbytes, got, want)
        per, nb = _batches(nbytes, a.platform)
        for _ in range(2):  # warm-up batches
            for _ in range(per):
                y = fn(x)
            jax.block_until_ready(y)
        times = []
        for _ in range(nb):
            t0 = time.perf_counter()
            for _ in range(per):
                y = fn(x)
            jax.block_until_ready(y)
            times.append((time.perf_counter() - t0) / per)
        rows = [("", statistics.median(times))]
        if nbytes <= 1 << 20 and a.loop > 0:
            jax.block_until_ready(looped(x))
            lt = []
            for _ in range(5):
                t0 = time.perf_counter()
                jax.block_until_ready(looped(x))
                lt.append((time.perf_counter() - t0) / a.loop)
            rows.append((" in-jit", statistics.median(lt)))
        for tag, t in rows:
            if a.rank == 0:
                print(json.dumps({"impl": a.impl + tag, "platform": a.platform, "world": a.world,
                                  "bytes": nbytes, "us": t * 1e6, "algbw_gbs": nbytes / t / 1e9}),
                      flush=True)
    done()


def run_config(impl, platform, world, sizes, timeout, loop, probe=False):
    if impl.startswith("dlpg"):
        # A dlpg store served here on a port the kernel picks; the ranks connect to it.
        sys.path.insert(0, os.path.join(REPO, "python_shim"))
        import dlpg
        with dlpg.Store("tcp://127.0.0.1:0?serve=1", float(timeout)) as store:
            return _run_ranks(impl, platform, world, sizes, timeout, loop, store.port, probe)
    for _ in range(8):
        rows, errs = _run_ranks(impl, platform, world, sizes, timeout, loop, _random_port(), probe)
        if not _port_was_taken(errs):
            break
    return rows, errs


def _run_ranks(impl, platform, world, sizes, timeout, loop, port, probe):
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
               NVSHMEM_DISABLE_NVLS="1")
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "python_shim"),
                                         env.get("PYTHONPATH", "")])
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker",
                               "--impl", impl, "--platform", platform, "--world", str(world),
                               "--rank", str(r), "--port", str(port),
                               "--sizes", ",".join(map(str, sizes)), "--loop", str(loop)]
                              + (["--probe"] if probe else []),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(world)]
    rows, errs = [], []
    for r, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            errs.append("rank %d timed out after %ds" % (r, timeout))
            continue
        if p.returncode != 0:
            errs.append("rank %d exit %d: %s" % (r, p.returncode, err.strip()[-1500:]))
        rows += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return rows, errs


def gpu_count():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    except Exception:  # noqa: BLE001 - no driver
        return 0


def _finish(lines, failures, out):
    """Print the table and the failures, write them to out (if set); the exit status."""
    table = "\n".join(lines)
    print(table)
    for f in failures:
        print("FAILED:", f)
    if out:
        with open(out, "w") as fh:
            fh.write(table + "\n" + "".join("\nFAILED: %s\n" % f for f in failures))
    return 1 if failures else 0


def probe_main(a):
    lines = ["| config | impl | op | size | mode | time/call (ms) | minor page faults/call |",
             "|---|---|---|---|---|---|---|"]
    failures = []
    for c in a.configs.split(",") if a.configs else ["cpu2"]:
        platform, world = ("cuda", int(c[4:])) if c.startswith("cuda") else ("cpu", int(c[3:]))
        for impl in [i for i in IMPLS if i in a.impls.split(",")]:
            rows, errs = run_config(impl, platform, world, a.sizes, a.timeout, 0, probe=True)
            failures += ["%s %s: %s" % (c, impl, e) for e in errs]
            for r in rows:
                size = "%d B" % r["bytes"] if r["bytes"] < 1 << 20 else "%d MiB" % (r["bytes"] >> 20)
                lines.append("| %s | %s | %s | %s | %s | %.2f | %.0f |" % (
                    c, impl, r["op"], size, r["mode"], r["us"] / 1e3, r["faults"]))
            print("\n".join(lines[-len(rows):]) if rows else "%s %s: no result" % (c, impl),
                  flush=True)
    return _finish(lines, failures, a.out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--impl", choices=IMPLS)
    ap.add_argument("--platform", choices=["cpu", "cuda"])
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--configs", default="")
    ap.add_argument("--impls", default=",".join(IMPLS), help="comma-separated, of " + ", ".join(IMPLS))
    ap.add_argument("--loop", type=int, default=50, help="calls per jitted loop (0: none)")
    ap.add_argument("--out", default="")
    ap.add_argument("--timeout", type=int, default=200)
    ap.add_argument("--probe", action="store_true",
                    help="alone / kept / two then wait, with page faults (see the top)")
    a = ap.parse_args()
    a.sizes = [int(s) for s in a.sizes.split(",")]
    if a.worker:
        return worker(a)
    if a.probe:
        return probe_main(a)
    ngpu = gpu_count()
    configs = a.configs.split(",") if a.configs else (
        (["cuda1"] if ngpu >= 1 else []) + (["cuda2"] if ngpu >= 2 else []) + ["cpu2", "cpu4"])
    lines = ["| config | impl | size | time/call (us) | algbw (GB/s) | busbw (GB/s) |",
             "|---|---|---|---|---|---|"]
    failures = []
    at8 = {}  # (config, impl): time per call at 8 B (us), for the ratios to psum
    bw = {}  # (config, impl, bytes): algbw (GB/s) from 1 MiB on
    for c in configs:
        platform, world = ("cuda", int(c[4:])) if c.startswith("cuda") else ("cpu", int(c[3:]))
        if platform == "cuda" and world > ngpu:
            lines.append("| %s | - | - | not run: %d GPU(s) here | | |" % (c, ngpu))
            continue
        for impl in [i for i in IMPLS if i in a.impls.split(",")]:
            sizes = [n for n in a.sizes if n <= 1 << 20] if impl == "dlpg-effect" else a.sizes
            rows, errs = run_config(impl, platform, world, sizes, a.timeout,
                                    0 if impl == "dlpg-effect" else a.loop)
            failures += ["%s %s: %s" % (c, impl, e) for e in errs]
            for r in rows:
                bus = r["algbw_gbs"] * 2 * (world - 1) / world if world > 1 else r["algbw_gbs"]
                size = "%d B" % r["bytes"] if r["bytes"] < 1 << 20 else "%d MiB" % (r["bytes"] >> 20)
                lines.append("| %s | %s | %s | %.1f | %.3f | %.3f |" % (
                    c, r["impl"], size, r["us"], r["algbw_gbs"], bus))
                if r["bytes"] == 8:
                    at8[(c, r["impl"])] = r["us"]
                elif r["bytes"] >= 1 << 20:
                    bw[(c, r["impl"], r["bytes"])] = r["algbw_gbs"]
            print("\n".join(lines[-len(rows):]) if rows else "%s %s: no result" % (c, impl),
                  flush=True)
    lines += ["", "| config | impl | time/call at 8 B vs psum's |", "|---|---|---|"]
    for (c, impl), us in sorted(at8.items()):
        if impl.startswith("dlpg") and "in-jit" not in impl and (c, "jax") in at8:
            lines.append("| %s | %s | %.2fx |" % (c, impl, us / at8[(c, "jax")]))
    lines += ["", "| config | impl | size | bandwidth vs psum's |", "|---|---|---|---|"]
    for (c, impl, nb), g in sorted(bw.items()):
        if impl.startswith("dlpg") and (c, "jax", nb) in bw:
            lines.append("| %s | %s | %d MiB | %.2fx |" % (c, impl, nb >> 20, g / bw[(c, "jax", nb)]))
    return _finish(lines, failures, a.out)


if __name__ == "__main__":
    sys.exit(main())
