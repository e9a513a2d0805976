"""Read-only memory that dlpg.Group would write into is refused with DLPG_ERR_INVALID_ARGUMENT
naming the operation and the argument, before anything is written (NumPy's writeable=False,
DLPack 1.0's read-only flag); read-only inputs are served."""

import pytest

from conftest import dlpg_store, run_ranks
import workers_read_only

np = pytest.importorskip("numpy")

REFUSED = {
    "allreduce_in_place": ("dlpg.Group.allreduce: tensor", "writeable=False"),
    "allreduce_output": ("dlpg.Group.allreduce: output", "writeable=False"),
    "recv": ("dlpg.Group.recv: tensor", "writeable=False"),
    "alltoall_output": ("dlpg.Group.alltoall: output", "writeable=False"),
    "versioned_in_place": ("dlpg.Group.allreduce: tensor", "DLPack export is flagged read-only"),
}


def test_read_only_memory_is_refused_where_written():
    import dlpg
    with dlpg_store() as url:
        res = run_ranks(workers_read_only.read_only, 2, lambda r: (url,), deadline_s=60)
    for rank, r in sorted(res.items()):
        assert "setup" not in r, r.get("setup")
        cases = dict(REFUSED)
        if rank == 1:
            cases["broadcast_non_root"] = ("dlpg.Group.broadcast: tensor", "writeable=False")
        for case, (who, why) in cases.items():
            assert isinstance(r[case], tuple), "rank %d %s: %s" % (rank, case, r[case])
            status, name, message = r[case]
            assert status == dlpg.ERR_INVALID_ARGUMENT and name == "DLPG_ERR_INVALID_ARGUMENT", r[case]
            assert message.startswith(who + " is read-only") and why in message, message
        for case in ("input_ok", "input_ok_v1", "broadcast"):
            assert r[case] == "no error", "rank %d %s: %s" % (rank, case, r[case])
        # Sum over ranks r of (r + 1) * [1, 2, 3], computed here.
        want = [float(sum((q + 1) * v for q in range(2))) for v in (1, 2, 3)]
        assert r["sums"] == (want, want), r["sums"]
    assert res[1]["broadcast_got"] == [7.0, 8.0, 9.0]
