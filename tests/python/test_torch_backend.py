"""torch.distributed on the "dlpg" backend: every collective on 2, 3 and 4 ranks (CPU),
and on CUDA where the machine has enough GPUs; references from seeded per-rank data."""

import pytest

from conftest import cuda_devices, free_port, run_ranks
import dlpg_workers

CHECKS = ["broadcast", "all_reduce_sum_f64", "all_reduce_max_i64", "all_reduce_min_f32",
          "all_reduce_prod_i32", "all_reduce_async_future", "reduce", "all_gather",
          "all_gather_into_tensor", "gather", "scatter", "reduce_scatter",
          "reduce_scatter_tensor", "all_to_all_single", "all_to_all_single_uneven",
          "all_to_all_list", "send_recv", "isend_irecv", "batch_isend_irecv", "barrier",
          "all_reduce_coalesced", "new_group", "zero_elements"]

_cache = {}


def _results(device, world, tmp_path_factory):
    key = (device, world)
    if key not in _cache:
        if device == "cuda" and cuda_devices() < world:
            _cache[key] = None
        else:
            if world == 3:
                init = "file://" + str(tmp_path_factory.mktemp("init") / "rdzv")
            else:
                init = "tcp://127.0.0.1:%d" % free_port()
            _cache[key] = run_ranks(dlpg_workers.torch_collectives, world,
                                    lambda r: (world, init, device, 11), deadline_s=150)
    res = _cache[key]
    if res is None:
        pytest.skip("needs %d CUDA devices" % world)
    return res


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("world", [2, 3, 4])
def test_cpu(check, world, tmp_path_factory):
    res = _results("cpu", world, tmp_path_factory)
    for rank, r in sorted(res.items()):
        assert "setup" not in r, "rank %d setup failed:\n%s" % (rank, r["setup"])
        assert r.get(check) == "ok", "rank %d %s:\n%s" % (rank, check, r.get(check))


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("world", [2])
def test_cuda(check, world, tmp_path_factory):
    res = _results("cuda", world, tmp_path_factory)
    for rank, r in sorted(res.items()):
        assert "setup" not in r, "rank %d setup failed:\n%s" % (rank, r["setup"])
        assert r.get(check) == "ok", "rank %d %s:\n%s" % (rank, check, r.get(check))
