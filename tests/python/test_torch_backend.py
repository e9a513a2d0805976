"""torch.distributed on the "dlpg" backend (the C++ extension): every collective on 2, 3 and 4 ranks (CPU), and on CUDA where the machine
has enough GPUs; references from seeded per-rank data."""

import pytest

from conftest import cuda_devices, require_torch_backend, run_ranks, torch_store
import dlpg_workers
import workers_errors
import workers_vs_gloo

CHECKS = ["broadcast", "all_reduce_sum_f64", "all_reduce_max_i64", "all_reduce_min_f32",
          "all_reduce_prod_i32", "all_reduce_async_future", "reduce", "all_gather",
          "all_gather_into_tensor", "gather", "scatter", "reduce_scatter",
          "reduce_scatter_tensor", "all_to_all_single", "all_to_all_single_uneven",
          "all_to_all_list", "send_recv", "isend_irecv", "batch_isend_irecv", "barrier",
          "all_reduce_coalesced", "coalescing_manager", "new_group", "zero_elements"]
# Drop-in behaviour: non-contiguous tensors, and all_gather of different sizes per rank.
CHECKS += ["noncontiguous_inplace", "noncontiguous_gathers", "noncontiguous_scatters",
           "noncontiguous_p2p", "all_gather_uneven"]

_cache = {}


def _results(device, world, tmp_path_factory):
    require_torch_backend()
    key = (device, world)
    if key not in _cache:
        if device == "cuda" and cuda_devices() < world:
            _cache[key] = None
        else:
            def run(init):
                return run_ranks(dlpg_workers.torch_collectives, world,
                                 lambda r: (world, init, device, 11), deadline_s=150)
            if world == 3:
                _cache[key] = run("file://" + str(tmp_path_factory.mktemp("init") / "rdzv"))
            else:
                with torch_store() as init:
                    _cache[key] = run(init)
    res = _cache[key]
    if res is None:
        pytest.skip("needs %d CUDA devices" % world)
    return res


# Need a second rank (at world size 1 a send would go to the rank itself).
NEED_PEER = {"send_recv", "isend_irecv", "batch_isend_irecv", "new_group", "noncontiguous_p2p"}


def _cases(worlds):
    return [(c, w) for w in worlds for c in CHECKS if w > 1 or c not in NEED_PEER]


@pytest.mark.parametrize("check,world", _cases([2, 3, 4]))
def test_cpu(check, world, tmp_path_factory):
    res = _results("cpu", world, tmp_path_factory)
    for rank, r in sorted(res.items()):
        assert "setup" not in r, "rank %d setup failed:\n%s" % (rank, r["setup"])
        assert r.get(check) == "ok", "rank %d %s:\n%s" % (rank, check, r.get(check))


# World size 1 checks on one GPU what can be checked there; 2 where two are lent.
@pytest.mark.parametrize("check,world", _cases([1, 2]))
def test_cuda(check, world, tmp_path_factory):
    res = _results("cuda", world, tmp_path_factory)
    for rank, r in sorted(res.items()):
        assert "setup" not in r, "rank %d setup failed:\n%s" % (rank, r["setup"])
        assert r.get(check) == "ok", "rank %d %s:\n%s" % (rank, check, r.get(check))


APIS = ["broadcast"] + ["all_reduce_" + op for op in ("SUM", "PRODUCT", "MIN", "MAX", "BAND",
                                                      "BOR", "BXOR")] + [
    "reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "gather",
    "gather_object", "scatter", "scatter_object_list", "broadcast_object_list",
    "reduce_scatter", "reduce_scatter_tensor", "all_to_all_single", "all_to_all", "send_recv",
    "isend_irecv", "batch_isend_irecv", "barrier", "recv_anysource",
    "unknown_pg_options", "all_reduce_coalesced", "all_gather_coalesced"]
_api_cache = {}


@pytest.mark.parametrize("api", APIS)
def test_every_api_matches_gloo_on_3_ranks(api):
    require_torch_backend()
    if "res" not in _api_cache:
        with torch_store() as init:
            _api_cache["res"] = run_ranks(workers_vs_gloo.apis_vs_gloo, 3,
                                          lambda r: (3, init, 23), deadline_s=150)
    for rank, r in sorted(_api_cache["res"].items()):
        assert "setup" not in r, "rank %d setup failed:\n%s" % (rank, r["setup"])
        assert r.get(api) == "ok", "rank %d %s:\n%s" % (rank, api, r.get(api))
        assert "teardown" not in r, r["teardown"]


def test_bad_input_raises_and_names_values():
    require_torch_backend()
    with torch_store() as init:
        res = run_ranks(workers_errors.bad_input, 2, lambda r: (2, init), deadline_s=120)
    for rank, r in sorted(res.items()):
        assert "setup" not in r, r["setup"]
        for case in ("mismatched_sizes", "bad_root", "sparse"):
            assert r.get(case) == "ok", "rank %d %s:\n%s" % (rank, case, r.get(case))
        assert "teardown" not in r, r["teardown"]
