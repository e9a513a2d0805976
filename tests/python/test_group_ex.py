"""dlpg.Group's reduce descriptors, complex arrays and receives from any source, on NumPy
arrays across 3 ranks (shared memory by default, Gloo forced): premul_sum with each rank's
own scalar, complex sum/avg/premul_sum and data movement, and recv(src=None) reporting the
sender in its order (workers_group_ex.py computes the references)."""

import pytest

from conftest import dlpg_store, run_ranks
import workers_group_ex as w

BACKENDS = [None, "gloo"]


def _env(monkeypatch, forced):
    if forced:
        monkeypatch.setenv("DLPG_CPU_BACKEND", forced)
    else:
        monkeypatch.delenv("DLPG_CPU_BACKEND", raising=False)


@pytest.mark.parametrize("forced", BACKENDS, ids=["default", "gloo"])
def test_premul_sum_and_complex(forced, monkeypatch):
    _env(monkeypatch, forced)
    world = 3
    with dlpg_store() as url:
        res = run_ranks(w.reductions, world, lambda r: (world, url, 31), deadline_s=120)
    for r in range(world):
        assert "error" not in res[r], res[r]["error"]
        assert res[r]["results"] == "ok"
        errs = res[r]["errors"]
        assert "needs scalar=" in errs["no scalar"], errs
        assert "PREMUL_SUM" in errs["no scalar"] and "allreduce" in errs["no scalar"], errs
        assert "only for op=dlpg.PREMUL_SUM" in errs["scalar without premul"], errs
        assert "dlpg.Group.reduce:" in errs["reduce no scalar"], errs
        assert "dlpg.Group.reduce_scatter:" in errs["reduce_scatter no scalar"], errs
        assert errs["complex max"].startswith("DLPG_ERR_UNSUPPORTED"), errs
        assert "complex64" in errs["complex max"], errs


@pytest.mark.parametrize("forced", BACKENDS, ids=["default", "gloo"])
def test_recv_from_any_source(forced, monkeypatch):
    _env(monkeypatch, forced)
    world = 3
    with dlpg_store() as url:
        res = run_ranks(w.any_source, world, lambda r: (world, url, 7), deadline_s=120)
    for r in range(world):
        assert "error" not in res[r], res[r]["error"]
        assert res[r]["results"] == "ok"
    assert res[0]["seen"] == {1: 3, 2: 3}, res[0]
    assert res[0]["named_source"] == 1
