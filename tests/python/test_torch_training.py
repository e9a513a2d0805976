"""Training on "dlpg" ends where training on "gloo" ends: DDP, ZeroRedundancyOptimizer and
FSDP2 (fully_shard with a gradient divide factor) for a few steps of a small float64 model on
2 CPU ranks, from the same weights and per-rank data (workers_training.py). With two ranks a
sum has one order, so DDP and ZeRO must be bitwise equal; FSDP2 divides by its factor where
gloo and dlpg may differ (before or after the sum, PREMUL_SUM), so within 1e-12 relative."""

import random

import numpy as np
import pytest

from conftest import run_ranks, torch_store
import workers_training

pytest.importorskip("torch")


def test_ddp_zero_fsdp2_parameters_match_gloo():
    seed = random.randrange(1 << 20)
    with torch_store() as init:
        res = run_ranks(workers_training.training_vs_gloo, 2, lambda r: (2, init, seed),
                        deadline_s=240)
    for rank, r in res.items():
        assert "error" not in r, "rank %d: %s" % (rank, r["error"])
        for kind in ("ddp", "zero", "fsdp2"):
            d, g = r[kind]["dlpg"], r[kind]["gloo"]
            assert len(d) == len(g), (kind, len(d), len(g))
            for i, (a, b) in enumerate(zip(d, g)):
                a, b = np.asarray(a), np.asarray(b)
                if kind == "fsdp2":
                    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14,
                                               err_msg="rank %d %s param %d" % (rank, kind, i))
                else:
                    assert np.array_equal(a, b), "rank %d %s param %d: max diff %g" % (
                        rank, kind, i, np.abs(a - b).max())
    # The divide factor took effect: FSDP2 (sum / 3) did not end where DDP (sum / 2) did.
    assert res[0]["fsdp2"]["dlpg"] != res[0]["ddp"]["dlpg"]
    # The ranks agree with each other too (every rank holds the full parameters), and the
    # steps moved every parameter (a comparison of untrained weights would prove nothing).
    for kind in ("ddp", "zero", "fsdp2"):
        assert res[0][kind]["dlpg"] == res[1][kind]["dlpg"], kind
        for i, (a, b) in enumerate(zip(res[0][kind]["dlpg"], res[0]["init"])):
            moved = np.abs(np.asarray(a) - np.asarray(b)).max()
            assert moved > 1e-6, "%s param %d moved only %g" % (kind, i, moved)
            print("%s param %d: moved %.3g, |dlpg - gloo| %.3g" % (
                kind, i, moved, np.abs(np.asarray(a) - np.asarray(res[0][kind]["gloo"][i])).max()))
