"""Ranks that share one GPU (NCCL refuses them: "Duplicate GPU detected"), through every
binding with no user change: torch's "dlpg" backend with 2, 3 and 4 processes on cuda:0
(collectives against host references, DDP and FSDP2 training equal to one CPU process on
the whole batch) and dlpg.Group on CuPy arrays (dlpg.jax: test_jax; Ray: test_ray_cuda).
Skipped without CUDA."""

import pytest

from conftest import cuda_devices, dlpg_store, require_torch_backend, run_ranks, torch_store
import workers_shared_gpu


def _need_gpu():
    if cuda_devices() < 1:
        pytest.skip("needs a CUDA device (torch.cuda.is_available() is False here)")


@pytest.mark.parametrize("world", [2, 3, 4])
def test_torch_ranks_share_gpu(world):
    _need_gpu()
    require_torch_backend()
    with torch_store() as init:
        res = run_ranks(workers_shared_gpu.torch_shared, world, lambda r: (world, init, 5),
                        deadline_s=240)
    for rank in range(world):
        r = res[rank]
        assert "setup" not in r, r["setup"]
        for name in ("collectives", "ddp", "fsdp2"):
            assert r.get(name) == "ok", "rank %d %s:\n%s" % (rank, name, r.get(name))
        assert "teardown" not in r, r["teardown"]


def test_cupy_ranks_share_gpu():
    _need_gpu()
    pytest.importorskip("cupy")
    with dlpg_store() as url:
        res = run_ranks(workers_shared_gpu.cupy_shared, 2, lambda r: (2, url), deadline_s=180)
    for rank in range(2):
        assert res[rank].get("cupy") == "ok", "rank %d:\n%s" % (rank, res[rank].get("cupy"))
