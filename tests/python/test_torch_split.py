"""Subgroups of the "dlpg" torch backend on 4 CPU ranks: torch's split (a dlpg_group_split
child, no new rendezvous), new_group (a dlpg_group_create_subset child, also as the job's
first step without rank 0), new_subgroups and DeviceMesh 1-D and 2-D, each checked
by collectives against references (workers_torch_split)."""

import pytest

from conftest import require_torch_backend, run_ranks, torch_store
import workers_torch_split

CHECKS = ["new_group_without_rank0", "split", "split_bad_ranks", "new_group_local", "new_group", "new_subgroups", "device_mesh"]
WORLD = 4
_cache = {}


def _results():
    require_torch_backend()
    if "r" not in _cache:
        with torch_store() as init:
            _cache["r"] = run_ranks(workers_torch_split.torch_split, WORLD,
                                    lambda r: (WORLD, init, 34), deadline_s=150)
    return _cache["r"]


@pytest.mark.parametrize("check", CHECKS)
def test_torch_split(check):
    for rank, r in sorted(_results().items()):
        assert "setup" not in r, "rank %d setup failed:\n%s" % (rank, r["setup"])
        assert r.get(check) == "ok", "rank %d %s:\n%s" % (rank, check, r.get(check))
        assert "teardown" not in r, r["teardown"]


@pytest.mark.parametrize("check", ["split_group", "mesh"])
def test_torch_split_cuda(check):
    """dist.split_group and DeviceMesh with a bound CUDA device (one rank per GPU, up to 2)."""
    import torch
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: dist.split_group needs an accelerator")
    require_torch_backend()
    world = min(2, torch.cuda.device_count())
    if "cuda" not in _cache:
        with torch_store() as init:
            _cache["cuda"] = run_ranks(workers_torch_split.torch_split_cuda, world,
                                       lambda r: (world, init, 35), deadline_s=150)
    for rank, r in sorted(_cache["cuda"].items()):
        assert "setup" not in r, "rank %d setup failed:\n%s" % (rank, r["setup"])
        assert r.get(check) == "ok", "rank %d %s:\n%s" % (rank, check, r.get(check))
        assert "teardown" not in r, r["teardown"]
