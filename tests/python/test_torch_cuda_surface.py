"""The torch backend's CUDA surface on one GPU (world size 1; skipped without CUDA):
init_process_group(device_id=cuda:0) makes the NCCL communicator at init
(eagerConnectSingleDevice), with pg_options' NCCL settings applied (dlpg's INFO log line of
the communicator shows them); dist.split_group of the 1-rank group (the child inherits the
settings), PREMUL_SUM on CUDA, and new_group."""

import os

import pytest

from conftest import cuda_devices, require_torch_backend, run_ranks, torch_store
import workers_torch_cuda_surface

CHECKS = ["eager_connect", "premul_sum", "split", "new_group"]
_cache = {}


def _results(tmp_dir):
    if "r" not in _cache:
        require_torch_backend()
        with torch_store() as init:
            log = os.path.join(tmp_dir, "dlpg-cuda-surface.log")
            _cache["r"] = run_ranks(workers_torch_cuda_surface.cuda_surface, 1,
                                    lambda r: (1, init, log), deadline_s=180)
    return _cache["r"]


@pytest.mark.parametrize("check", CHECKS)
def test_cuda_surface(check, tmp_path_factory):
    if cuda_devices() < 1:
        pytest.skip("needs a CUDA device (torch.cuda.is_available() is False here)")
    r = _results(str(tmp_path_factory.getbasetemp()))[0]
    assert "setup" not in r, r["setup"]
    assert r.get(check) == "ok", "%s:\n%s" % (check, r.get(check))
    assert "teardown" not in r, r["teardown"]
