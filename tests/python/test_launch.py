"""Joining a job by a library call: dlpg.Group.from_env() under a simulated Slurm step and an
Open MPI job (libdlpg's detection, store/launcher.c, called through the ABI), the dlpg://
torch rendezvous' errors, and dlpg.bf16 on NumPy without ml_dtypes (uint16 bit patterns
viewed as bfloat16 through DLPack), checked against torch's own bfloat16 rounding."""

import importlib.util
import os
import random

import numpy as np
import pytest

import dlpg
from conftest import dlpg_store, port_was_taken, run_ranks

_LAUNCHER_VARS = [v for v in os.environ if v.startswith(("SLURM_", "OMPI_", "PMI_", "PMIX_"))] + [
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "DLPG_STORE_URL", "DLPG_STORE_PORT", "MPI_LOCALNRANKS", "MPI_LOCALRANKID"]


def _from_env_rank(rank, env, seed, queue):
    """One rank: the launcher's variables, Group.from_env(), a checked allreduce."""
    for v in _LAUNCHER_VARS:
        os.environ.pop(v, None)
    os.environ.update({k: v.format(rank=rank) for k, v in env.items()})
    out = {}
    try:
        g = dlpg.Group.from_env(timeout=60, name="from-env")
        world = g.size
        x = np.random.RandomState(seed + rank).randint(-64, 64, size=257).astype(np.float32)
        want = sum(np.random.RandomState(seed + r).randint(-64, 64, size=257).astype(np.float32)
                   for r in range(world))
        g.allreduce(x)
        out = {"rank": g.rank, "size": world, "ok": bool(np.array_equal(x, want))}
        g.destroy()
    except dlpg.DlpgError as e:
        out = {"error": str(e)}
    queue.put((rank, out))


def _job(env, world):
    """Run world ranks with env (values formatted with {rank}; {job} drawn at random, again
    when the port it names is taken)."""
    for _ in range(8):
        job = str(random.randrange(1, 1 << 30))
        e = {k: v.replace("{job}", job) for k, v in env.items()}
        seed = random.randrange(1 << 20)
        res = run_ranks(_from_env_rank, world, lambda r: (e, seed), deadline_s=120)
        if not any(port_was_taken(r.get("error", "")) for r in res.values()):
            return res
    return res


@pytest.mark.parametrize("launcher", ["slurm", "openmpi"])
def test_group_from_env_joins_the_launchers_job(launcher):
    world = 3
    env = {"slurm": {"SLURM_PROCID": "{rank}", "SLURM_NTASKS": str(world),
                     "SLURM_LOCALID": "{rank}", "SLURM_JOB_NUM_NODES": "1",
                     "SLURM_STEP_NODELIST": "node[1]", "SLURM_JOB_ID": "{job}",
                     "SLURM_STEP_ID": "0"},
           "openmpi": {"OMPI_COMM_WORLD_RANK": "{rank}", "OMPI_COMM_WORLD_SIZE": str(world),
                       "OMPI_COMM_WORLD_LOCAL_SIZE": str(world),
                       "OMPI_MCA_ess_base_jobid": "{job}"}}[launcher]
    res = _job(env, world)
    for r in range(world):
        assert res[r] == {"rank": r, "size": world, "ok": True}, res


def test_group_from_env_names_the_variables_when_no_launcher_is_found(monkeypatch):
    for v in _LAUNCHER_VARS:
        monkeypatch.delenv(v, raising=False)
    with pytest.raises(dlpg.DlpgError) as e:
        dlpg.Group.from_env()
    for v in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        assert v in e.value.message, e.value.message


# ------------------------------------------------------------------ bfloat16 without ml_dtypes

def test_bf16_view_is_bfloat16_through_dlpack_without_ml_dtypes():
    torch = pytest.importorskip("torch")
    x = np.random.RandomState(random.randrange(1 << 20)).standard_normal((3, 7)).astype(np.float32)
    x[0, 0], x[0, 1] = np.inf, -0.0
    bits = dlpg.bf16.from_float32(x)
    assert bits.dtype == np.uint16 and bits.shape == x.shape
    # An independent rounding: torch's float32 -> bfloat16.
    ref = torch.from_numpy(x).to(torch.bfloat16)
    assert np.array_equal(bits, ref.view(torch.int16).numpy().view(np.uint16))
    t = torch.utils.dlpack.from_dlpack(dlpg.bf16.view(bits))
    assert t.dtype == torch.bfloat16 and tuple(t.shape) == x.shape
    assert torch.equal(t, ref)
    one = dlpg.bf16.from_float32(np.float32(3.5))
    assert one.shape == ()  # a scalar's bit pattern is a scalar (numpy 2.5 refuses (1,) here)
    bits[1, 2] = one  # the same memory
    assert t[1, 2].item() == 3.5
    assert np.array_equal(dlpg.bf16.to_float32(bits), t.float().numpy())
    assert np.isnan(dlpg.bf16.to_float32(dlpg.bf16.from_float32(np.float32("nan"))))
    with pytest.raises(TypeError, match="uint16"):
        dlpg.bf16.view(x)
    # What a DLPack 1.0 consumer passes (torch 2.x's from_dlpack): the view answers it.
    v = dlpg.bf16.view(bits)
    cap = v.__dlpack__(stream=None, max_version=(1, 0), dl_device=v.__dlpack_device__(),
                       copy=None)
    assert torch.equal(torch.utils.dlpack.from_dlpack(cap), t)
    with pytest.raises(BufferError, match="copy=True"):
        v.__dlpack__(max_version=(1, 0), copy=True)


def _bf16_rank(rank, url, seed, queue):
    g = dlpg.Group(dlpg.Store(url), rank, 2, timeout=60, name="bf16")
    vals = [np.random.RandomState(seed + r).randint(-32, 32, size=33).astype(np.float32) / 4
            for r in range(2)]
    bits = dlpg.bf16.from_float32(vals[rank])
    g.allreduce(dlpg.bf16.view(bits))
    root = np.random.RandomState(seed).randint(2)
    b = dlpg.bf16.from_float32(vals[rank] + 100)
    g.broadcast(dlpg.bf16.view(b), root=int(root))
    queue.put((rank, {"sum": bool(np.array_equal(dlpg.bf16.to_float32(bits), vals[0] + vals[1])),
                      "bcast": bool(np.array_equal(dlpg.bf16.to_float32(b),
                                                   dlpg.bf16.to_float32(dlpg.bf16.from_float32(vals[root] + 100))))}))
    g.destroy()


def test_bf16_numpy_ranks_allreduce_and_broadcast():
    seed = random.randrange(1 << 20)
    with dlpg_store() as url:
        res = run_ranks(_bf16_rank, 2, lambda r: (url, seed), deadline_s=120)
    assert res == {0: {"sum": True, "bcast": True}, 1: {"sum": True, "bcast": True}}, res


@pytest.mark.skipif(importlib.util.find_spec("ml_dtypes") is None, reason="needs ml_dtypes")
def test_bf16_takes_ml_dtypes_arrays():
    import ml_dtypes
    a = np.arange(6, dtype=np.float32).astype(ml_dtypes.bfloat16)
    assert dlpg.bf16.view(a).__dlpack_device__() == (1, 0)
    assert np.array_equal(dlpg.bf16.to_float32(a), np.arange(6, dtype=np.float32))


# ------------------------------------------------------------------ dlpg:// rendezvous errors

@pytest.mark.parametrize("url,words", [
    ("dlpg://?name=x", "HOST:PORT"),
    ("dlpg://127.0.0.1:1?nme=x", "unknown parameter nme"),
])
def test_dlpg_rendezvous_errors_name_the_problem(url, words):
    pytest.importorskip("torch")
    import datetime
    import torch.distributed as dist
    import dlpg.torch  # noqa: F401 - registers dlpg://
    with pytest.raises(ValueError, match=words):
        next(dist.rendezvous(url, 0, 2, timeout=datetime.timedelta(seconds=5)))


# ------------------------------------------------------------------ dlpg:// with torch ranks

def _mixed_rank(rank, url, seed, queue):
    """Ranks 0 and 2 torch (dlpg://), rank 1 NumPy (dlpg.Group): an allreduce of all three,
    then a torch new_group of the torch ranks alone."""
    vals = [np.random.RandomState(seed + r).randint(-50, 50, size=17).astype(np.float32)
            for r in range(3)]
    out = {}
    if rank == 1:
        g = dlpg.Group(dlpg.Store(url), 1, 3, timeout=60, name="mixed")
        x = vals[1].copy()
        g.allreduce(x)
        out["all"] = bool(np.array_equal(x, vals[0] + vals[1] + vals[2]))
        g.destroy()
    else:
        import datetime
        import torch
        import torch.distributed as dist
        importlib.import_module("dlpg.torch")  # registers "dlpg" and dlpg://
        # serve=0: the test's process serves the store, not rank 0.
        dist.init_process_group("dlpg", init_method=url.replace("tcp://", "dlpg://")
                                + "?name=mixed&serve=0",
                                rank=rank, world_size=3, timeout=datetime.timedelta(seconds=60))
        t = torch.from_numpy(vals[rank].copy())
        dist.all_reduce(t)
        out["all"] = bool(np.array_equal(t.numpy(), vals[0] + vals[1] + vals[2]))
        sub = dist.new_group([0, 2])
        t = torch.from_numpy(vals[rank].copy())
        dist.all_reduce(t, group=sub)
        out["sub"] = bool(np.array_equal(t.numpy(), vals[0] + vals[2]))
        dist.destroy_process_group()
    queue.put((rank, out))


def test_dlpg_rendezvous_torch_and_numpy_ranks_then_a_torch_subgroup():
    pytest.importorskip("torch")
    seed = random.randrange(1 << 20)
    with dlpg_store() as url:
        res = run_ranks(_mixed_rank, 3, lambda r: (url, seed), deadline_s=180)
    assert res == {0: {"all": True, "sub": True}, 1: {"all": True}, 2: {"all": True, "sub": True}}, res
