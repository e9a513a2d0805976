"""Ranks of different frameworks in one dlpg group (examples/cross_framework.py's rank
bodies): torch.distributed on "dlpg", NumPy/CuPy through dlpg.Group, JAX inside jax.jit.
Each rank checks allreduce, broadcast and send/recv of float32 and bfloat16 data against a
NumPy reference built from every rank's seeded data, the same results a job of a single
framework gives. CPU: torch + NumPy (CI), plus JAX where it and libdlpg_xla.so exist, in
each of dlpg.jax.init's three ordering modes.
CUDA: one framework per GPU, skipped with fewer than two GPUs."""

import importlib.util
import os
import random
import sys

import pytest

from conftest import REPO, cuda_devices, dlpg_store, run_ranks

sys.path.insert(0, os.path.join(REPO, "examples"))
import cross_framework as xf  # noqa: E402

from test_jax import xla_library  # noqa: E402


def _have(mod):
    return importlib.util.find_spec(mod) is not None


def _run(frameworks, device, deadline_s=240, jax_ordered=None):
    seed = random.randrange(1, 10 ** 6)
    world = len(frameworks)
    with dlpg_store() as url:
        results = run_ranks(_entry, world, lambda r: (world, url, device, seed, jax_ordered),
                            deadline_s=deadline_s)
    bad = {}
    for r, res in sorted(results.items()):
        for name, v in res.items():
            if v != "ok":
                bad["rank %d (%s) %s" % (r, frameworks[r], name)] = v
    assert not bad, "\n".join("%s:\n%s" % kv for kv in bad.items())
    checks = {name for res in results.values() for name in res}
    assert {"allreduce bf16", "broadcast f32", "send/recv bf16"} <= checks, checks


def _entry(rank, world, url, device, seed, jax_ordered, queue):
    # run_ranks calls target(rank, *args, queue); the framework travels in the environment
    # so that the spawn pickles only plain values.
    fw = os.environ["XF_FRAMEWORKS"].split(",")[rank]
    xf.rank_entry(fw, rank, world, url, device, seed, queue, jax_ordered)


def _with_frameworks(frameworks, device, monkeypatch, deadline_s=240, jax_ordered=None):
    monkeypatch.setenv("XF_FRAMEWORKS", ",".join(frameworks))
    _run(frameworks, device, deadline_s, jax_ordered)


@pytest.mark.skipif(not (_have("torch") and _have("numpy")), reason="needs torch and numpy")
def test_cpu_torch_and_numpy(monkeypatch):
    _with_frameworks(["torch", "numpy", "torch"], "cpu", monkeypatch)


@pytest.mark.skipif(not (_have("torch") and _have("jax")), reason="needs torch and jax")
@pytest.mark.parametrize("ordered", [None, True, False], ids=["default", "ordered", "fast"])
def test_cpu_torch_numpy_and_jax_under_jit(monkeypatch, ordered):
    if xla_library() is None:
        pytest.skip("libdlpg_xla.so not built (no jaxlib FFI headers where dlpg was built)")
    _with_frameworks(["torch", "jax", "numpy", "jax"], "cpu", monkeypatch, 300, ordered)


def test_cuda_one_framework_per_gpu(monkeypatch):
    n = cuda_devices()
    if n < 2:
        pytest.skip("needs 2 GPUs (one per rank; NCCL allows one rank per GPU), found %d" % n)
    fws = ["torch"]
    if _have("jax") and xla_library() is not None:
        fws.append("jax")
    if _have("cupy"):
        fws.append("cupy")
    fws = (fws + ["torch"])[:n] if len(fws) < 2 else fws[:n]
    _with_frameworks(fws, "cuda", monkeypatch, 300)
