"""DTensor on the "dlpg" backend: a small MLP on a 2-D DeviceMesh (CPU, 4 ranks, dp x tp =
2 x 2), ColwiseParallel/RowwiseParallel on "tp" and FSDP2's fully_shard on "dp", trained a few
AdamW steps, against the same run on gloo. Every reduction has two contributions (each mesh
dimension has two ranks), so its result does not depend on the order of the additions: the
parameters after every step must be bitwise those of gloo, and every rank's full parameters
the same."""

import numpy as np

from conftest import require_torch_backend, run_ranks, torch_store
import workers_torch_dtensor

WORLD = 4


def test_dtensor_tp_fsdp_matches_gloo():
    require_torch_backend()
    with torch_store() as init:
        results = run_ranks(workers_torch_dtensor.torch_dtensor, WORLD,
                            lambda r: (WORLD, init, 5), deadline_s=420)
    for rank, r in sorted(results.items()):
        assert "error" not in r, "rank %d:\n%s" % (rank, r["error"])
    ref = results[0]["gloo"]["history"]
    assert len(ref) == workers_torch_dtensor.STEPS
    for rank, r in sorted(results.items()):
        assert r["dlpg"]["losses"] == r["gloo"]["losses"], (rank, r["dlpg"]["losses"],
                                                            r["gloo"]["losses"])
        for step, (got, want) in enumerate(zip(r["dlpg"]["history"], ref)):
            assert sorted(got) == sorted(want), (rank, sorted(got), sorted(want))
            for name in want:
                assert np.array_equal(got[name], want[name]), (
                    "rank %d step %d %s: max |dlpg - gloo| = %g" %
                    (rank, step, name, np.abs(got[name] - want[name]).max()))
    # The model moved: the comparison is not of untouched parameters.
    first, last = ref[0], ref[-1]
    assert any(not np.array_equal(first[n], last[n]) for n in first)
