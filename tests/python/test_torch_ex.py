"""The "dlpg" torch backend on CPU across 3 ranks: PREMUL_SUM (float and tensor factors)
through all_reduce, reduce, reduce_scatter(_tensor); complex tensors; and recv without a
source (recv_anysource) reporting its sender, as torch's own test_send_recv_any_source
checks it, on shared memory (the default) and on Gloo (workers_torch_ex.py)."""

import pytest

from conftest import require_torch_backend, run_ranks, torch_store
import workers_torch_ex as w


def _env(monkeypatch, forced):
    if forced:
        monkeypatch.setenv("DLPG_CPU_BACKEND", forced)
    else:
        monkeypatch.delenv("DLPG_CPU_BACKEND", raising=False)


@pytest.mark.parametrize("forced", [None, "gloo"], ids=["default", "gloo"])
def test_premul_sum_and_complex(forced, monkeypatch):
    require_torch_backend()
    _env(monkeypatch, forced)
    world = 3
    with torch_store() as init:
        res = run_ranks(w.premul_and_complex, world, lambda r: (world, init, 41), deadline_s=180)
    for r in range(world):
        assert "error" not in res[r], res[r]["error"]
        assert res[r]["results"] == "ok"
        assert "complex" in res[r]["complex max"].lower(), res[r]


@pytest.mark.parametrize("forced", [None, "gloo"], ids=["default", "gloo"])
def test_recv_any_source(forced, monkeypatch):
    require_torch_backend()
    _env(monkeypatch, forced)
    world = 3
    with torch_store() as init:
        res = run_ranks(w.any_source, world, lambda r: (world, init, 5), deadline_s=180)
    for r in range(world):
        assert "error" not in res[r], res[r]["error"]
        assert res[r]["results"] == "ok"
        # Each other rank sent twice; which receive took which is the matcher's choice.
        others = [q for q in range(world) if q != r]
        assert sorted(res[r]["recv_ranks"] + res[r]["irecv_ranks"]) == sorted(others * 2), res[r]
