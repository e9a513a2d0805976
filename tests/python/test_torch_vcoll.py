"""torch.distributed's rooted and uneven collectives on the "dlpg" backend (gather, scatter,
all_to_all_single with split sizes, all_to_all of lists, all_gather and reduce_scatter of
different sizes), each one native dlpg call: against Gloo and references on 2-4 ranks (CPU,
on shared memory and on dlpg's Gloo), and split sizes that disagree across ranks."""

import pytest

from conftest import require_torch_backend, run_ranks, torch_store
import workers_torch_vcoll

CHECKS = ["all_to_all_single", "all_to_all", "all_gather_uneven", "gather", "scatter",
          "reduce_scatter_uneven", "bad_splits", "mismatch"]
RUNS = [(2, "shm"), (3, "shm"), (4, "shm"), (3, "gloo")]
_cache = {}


def _results(world, cpu_backend):
    require_torch_backend()
    key = (world, cpu_backend)
    if key not in _cache:
        with torch_store() as init:
            _cache[key] = run_ranks(workers_torch_vcoll.torch_vcoll, world,
                                    lambda r: (world, init, cpu_backend, 31 + world),
                                    deadline_s=150)
    return _cache[key]


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("world,cpu_backend", RUNS)
def test_vcoll(world, cpu_backend, check):
    for rank, r in sorted(_results(world, cpu_backend).items()):
        assert "setup" not in r, "rank %d setup failed:\n%s" % (rank, r["setup"])
        assert r.get(check) == "ok", "rank %d %s:\n%s" % (rank, check, r.get(check))
        assert "teardown" not in r, r["teardown"]
