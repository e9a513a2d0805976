"""Subgroups of the "dlpg" torch backend on 4 CPU ranks: torch's split (a dlpg_group_split
child, no new rendezvous), new_group, new_subgroups and DeviceMesh 1-D and 2-D, each checked
by collectives against references (workers_torch_split)."""

import pytest

from conftest import require_torch_backend, run_ranks, torch_store
import workers_torch_split

CHECKS = ["split", "split_bad_ranks", "new_group_local", "new_group", "new_subgroups", "device_mesh"]
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
