"""monitored_barrier, timeout wording and the rest of the c10d surface of the "dlpg" torch
backend, on CPU with ranks on loopback (see workers_torch_monitored.py for what each checks)."""

import pytest

import contextlib

from conftest import dlpg_store, require_torch_backend, run_ranks, torch_store
import workers_torch_monitored as w


@contextlib.contextmanager
def _rendezvous(kind):
    """init for dlpg_workers.init_torch: torch's TCPStore, or a dlpg:// URL on a dlpg store
    (the group then meets on torch's view of that store)."""
    if kind == "torch_store":
        with torch_store() as init:
            yield lambda r: init
    else:
        with dlpg_store() as url:
            hostport = url[len("tcp://"):]
            # serve=0: this process serves the store, not rank 0.
            yield lambda r: "dlpg://%s?serve=0" % hostport


def _all_ok(res, world):
    for rank in range(world):
        bad = {k: v for k, v in res[rank].items() if v != "ok"}
        assert not bad, (rank, bad)


@pytest.mark.parametrize("kind", ["torch_store", "dlpg_url"])
def test_monitored_barrier(kind):
    require_torch_backend()
    with _rendezvous(kind) as init_of:
        res = run_ranks(w.monitored, 3, lambda r: (3, init_of(r)), deadline_s=120)
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
