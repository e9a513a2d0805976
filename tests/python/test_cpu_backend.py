"""The host-memory backend a group chooses, seen from Python with no change in user code:
2 ranks of this machine run their collectives on shared memory by default, and on Gloo with
DLPG_CPU_BACKEND=gloo, through dlpg.Group on NumPy arrays and through torch's "dlpg"
backend on CPU tensors. Evidence: the flight record's backend of each
collective (dlpg.Group) and the INFO line of the group's choice (both); results against
references from every rank's seeded data (workers_cpu_backend.py)."""

import pytest

from conftest import dlpg_store, require_torch_backend, run_ranks, torch_store
import workers_cpu_backend as w

COLLECTIVES = ["dlpg_allreduce", "dlpg_broadcast", "dlpg_allgather", "dlpg_reduce_scatter",
               "dlpg_alltoall", "dlpg_barrier"]


def _env(monkeypatch, forced):
    """DLPG_CPU_BACKEND as the case wants it (unset: the default), INFO log of the choice."""
    if forced:
        monkeypatch.setenv("DLPG_CPU_BACKEND", forced)
    else:
        monkeypatch.delenv("DLPG_CPU_BACKEND", raising=False)
    monkeypatch.setenv("DLPG_DEBUG", "INFO")
    monkeypatch.setenv("DLPG_DEBUG_SUBSYS", "INIT")
    return forced or "shm"


def _check_choice(log, want, forced):
    """The rank's log has the choice's INFO line for host memory, naming want and why."""
    lines = w.choices(log)
    cpu = [c for c in lines if "cpu" in c[0]]
    assert cpu, "no INFO line of the CPU backend's choice in %s: %s" % (log, open(log).read())
    for devices, backend, why in cpu:
        assert backend == want, (devices, backend, why)
        if forced:
            assert "DLPG_CPU_BACKEND" in why, why
        else:
            assert "all 2 ranks run at" in why, why


@pytest.mark.parametrize("forced", [None, "gloo"], ids=["default", "gloo"])
def test_numpy_group(forced, monkeypatch, tmp_path):
    want = _env(monkeypatch, forced)
    logs = [str(tmp_path / ("rank%d.log" % r)) for r in range(2)]
    with dlpg_store() as url:
        res = run_ranks(w.numpy_group, 2, lambda r: (2, url, "cpu-backend", logs[r]),
                        deadline_s=120)
    for r in range(2):
        assert "error" not in res[r], res[r]["error"]
        assert res[r]["results"] == "ok"
        flight = res[r]["flight"]
        for op in COLLECTIVES:
            assert flight.get(op) == [want], (r, op, flight)
        _check_choice(logs[r], want, forced)


@pytest.mark.parametrize("forced", [None, "gloo"], ids=["default", "gloo"])
def test_torch_cpu(forced, monkeypatch, tmp_path):
    require_torch_backend()
    want = _env(monkeypatch, forced)
    logs = [str(tmp_path / ("rank%d.log" % r)) for r in range(2)]
    with torch_store() as init:
        res = run_ranks(w.torch_group, 2, lambda r: (2, init, logs[r]), deadline_s=150)
    for r in range(2):
        assert "error" not in res[r], res[r]["error"]
        assert res[r]["results"] == "ok"
        _check_choice(logs[r], want, forced)
