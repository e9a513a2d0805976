"""monitored_barrier, timeout wording and the rest of the c10d surface of the "dlpg" torch
backend, on CPU with ranks on loopback (see workers_torch_monitored.py for what each checks)."""

import pytest

from conftest import require_torch_backend, run_ranks, torch_store
import workers_torch_monitored as w


def _all_ok(res, world):
    for rank in range(world):
        bad = {k: v for k, v in res[rank].items() if v != "ok"}
        assert not bad, (rank, bad)


def test_monitored_barrier():
    require_torch_backend()
    with torch_store() as init:
        res = run_ranks(w.monitored, 3, lambda r: (3, init), deadline_s=120)
    _all_ok(res, 3)
    assert set(res[0]) >= {"pass", "rank1_absent", "wait_all", "usable", "zero"}


def test_timeout_says_timed_out():
    require_torch_backend()
    with torch_store() as init:
        res = run_ranks(w.timeout_words, 2, lambda r: (2, init), deadline_s=90)
    _all_ok(res, 2)
    assert "barrier" in res[0]


def test_c10d_surface():
    require_torch_backend()
    with torch_store() as init:
        res = run_ranks(w.surface, 2, lambda r: (2, init), deadline_s=90)
    _all_ok(res, 2)
    assert set(res[0]) >= {"seq", "seq_agrees", "caps", "coalesced_p2p", "sparse", "set_timeout_0",
                          "set_timeout", "after_abort", "after_shutdown"}
