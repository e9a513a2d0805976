"""all_reduce of sparse COO tensors on the "dlpg" backend (SUM, as gloo's: every rank's
indices and values gathered by dlpg_allgatherv, summed and coalesced) on 2 and 3 ranks:
random per-rank sparse tensors (hybrid, uncoalesced, integer, empty) against the dense
sum computed here and against gloo, and sizes that disagree across ranks."""

import pytest

from conftest import require_torch_backend, run_ranks, torch_store
import workers_torch_sparse

CHECKS = list(workers_torch_sparse.CASES) + ["mismatch", "not_sum"]
_cache = {}


def _results(world):
    require_torch_backend()
    if world not in _cache:
        with torch_store() as init:
            _cache[world] = run_ranks(workers_torch_sparse.torch_sparse, world,
                                      lambda r: (world, init, 17 + world), deadline_s=150)
    return _cache[world]


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("world", [2, 3])
def test_sparse_all_reduce(world, check):
    for rank, r in sorted(_results(world).items()):
        assert "setup" not in r, "rank %d setup failed:\n%s" % (rank, r["setup"])
        assert r.get(check) == "ok", "rank %d %s:\n%s" % (rank, check, r.get(check))
        assert "teardown" not in r, r["teardown"]
