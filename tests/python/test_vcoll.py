"""dlpg.Group's rooted and uneven collectives (gather, scatter, allgatherv, alltoallv,
reduce_scatter_v) on NumPy arrays, 3 ranks as processes, on each host-memory backend:
results against references from every rank's seeded data (workers_vcoll.py)."""

import pytest

from conftest import dlpg_store, run_ranks
import workers_vcoll as w


@pytest.mark.parametrize("backend", ["shm", "gloo"])
def test_vcoll_methods(backend, monkeypatch):
    monkeypatch.setenv("DLPG_CPU_BACKEND", backend)
    with dlpg_store() as url:
        results = run_ranks(w.vcoll, 3, lambda r: (3, url, 7), deadline_s=120)
    for rank, res in sorted(results.items()):
        for name, outcome in res.items():
            assert outcome == "ok", "rank %d %s (%s):\n%s" % (rank, name, backend, outcome)
