"""Point-to-point on the "dlpg" torch backend beyond the collective matrix: a send to self
inside batch_isend_irecv (what torch issues at world size 1), on CPU."""

import pytest

from conftest import run_ranks, torch_store
import dlpg_workers


@pytest.mark.parametrize("world", [1, 3])
def test_batch_isend_irecv_with_self(world):
    with torch_store() as init:
        res = run_ranks(dlpg_workers.p2p_self_batch, world, lambda r: (world, init),
                        deadline_s=90)
    for rank in range(world):
        assert res[rank] == {"self": True, "ring": True}, (rank, res[rank])
