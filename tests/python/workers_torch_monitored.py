"""Rank bodies for test_torch_monitored.py: monitored_barrier, timeouts' wording and the
c10d calls torch 2.x makes of a backend, on the "dlpg" backend (CPU). Each check reports
"ok" or its traceback; a rank's whole result goes through the queue."""

import datetime
import time
import traceback

from dlpg_workers import init_torch


def _raises(fn, *words):
    """Call fn; return "ok" when it raised a RuntimeError containing every word, else why."""
    try:
        fn()
    except RuntimeError as e:
        text = str(e)
        missing = [w for w in words if w not in text]
        return "ok" if not missing else "message lacks %r: %s" % (missing, text)
    return "did not raise"


def monitored(rank, world, init, queue):
    """world 3. Rounds: all pass; rank 1 absent (rank 0 names it, rank 2 learns, rank 1 comes
    late and learns); ranks 1, 2 absent with wait_all_ranks; all pass again; the group still
    reduces; then rank 0 alone with timeout 0, which ends at once."""
    res = {}
    try:
        import torch
        import torch.distributed as dist
        import dlpg.torch  # noqa: F401 - registers "dlpg"
        init_torch("dlpg", init, rank, world)
        # dist.monitored_barrier refuses any backend but gloo by name; the ProcessGroup's own
        # method reaches the backend (as torch's test_monitored_barrier_gloo_rank_0_timeout).
        pg = dist.group.WORLD

        def mb(timeout, wait_all_ranks=False):
            pg.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)

        two = datetime.timedelta(seconds=2)
        mb(two)
        mb(two, True)
        res["pass"] = "ok"

        if rank == 0:
            t0 = time.monotonic()
            res["rank1_absent"] = _raises(lambda: mb(two),
                                          "Rank 1 failed to pass monitoredBarrier in 2000 ms")
            res["rank1_absent_time"] = "ok" if 1.9 < time.monotonic() - t0 < 30 else "took %.1f s" % (time.monotonic() - t0)
        elif rank == 2:
            # Rank 0's verdict (naming rank 1) comes at its deadline, which ends with this
            # rank's: usually in time to be quoted, not always on a loaded machine.
            res["rank1_absent"] = _raises(lambda: mb(two),
                                          "Rank 2 successfully reached monitoredBarrier")
        dist.barrier()  # the group is still usable: no abort
        if rank == 1:  # late: rank 0's verdict is already there
            res["rank1_absent"] = _raises(lambda: mb(two),
                                          "Rank 1 successfully reached monitoredBarrier")

        short = datetime.timedelta(seconds=0.5)
        if rank == 0:
            res["wait_all"] = _raises(
                lambda: mb(short, True),
                "Ranks 1, 2 failed to pass monitoredBarrier in 500 ms")
        dist.barrier()
        if rank != 0:
            res["wait_all"] = _raises(lambda: mb(short),
                                      "Rank %d successfully reached monitoredBarrier" % rank)

        mb(datetime.timedelta(seconds=30), wait_all_ranks=True)
        x = torch.full((4,), float(rank + 1))
        dist.all_reduce(x)
        res["usable"] = "ok" if torch.equal(x, torch.full((4,), float(world * (world + 1) // 2))) else str(x)

        if rank == 0:  # alone, timeout 0: ends at once (it used to wait for the group's timeout)
            t0 = time.monotonic()
            res["zero"] = _raises(lambda: mb(datetime.timedelta(0)),
                                  "Rank 0 timed out in monitoredBarrier")
            took = time.monotonic() - t0
            res["zero_time"] = "ok" if took < 5 else "took %.1f s" % took
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        res["error"] = traceback.format_exc()
    queue.put((rank, res))


def timeout_words(rank, world, init, queue):
    """world 2, torch's timeout 60 s but dlpg.torch.Options(timeout=2): rank 0 alone in a
    barrier times out after the options' 2 s, with torch's words (" Timed out ") and dlpg's
    cause, as torch.distributed.DistBackendError."""
    res = {}
    try:
        import torch.distributed as dist
        import dlpg.torch
        host, port = init
        store = dist.TCPStore(host, port, world, False, datetime.timedelta(seconds=60))
        dist.init_process_group("dlpg", store=store, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=60),
                                pg_options=dlpg.torch.Options(timeout=2, min_ctas=1))
        if rank == 0:
            t0 = time.monotonic()
            try:
                dist.barrier()
                res["barrier"] = "did not raise"
            except dist.DistBackendError as e:
                t = str(e)
                res["barrier"] = "ok" if (" Timed out " in t and "DLPG_ERR_TIMEOUT" in t) else t
            took = time.monotonic() - t0
            res["options_timeout"] = "ok" if took < 20 else "took %.1f s" % took
        else:
            time.sleep(8)  # past rank 0's timeout, then leave
        res["done"] = "ok"
    except Exception:  # noqa: BLE001
        res["error"] = traceback.format_exc()
    queue.put((rank, res))


def surface(rank, world, init, queue):
    """world 2: the sequence number follows dlpg's coll_seq and agrees across ranks;
    capabilities; setTimeout; batch_isend_irecv through startCoalescing/endCoalescing;
    sparse all_reduce refused in torch's words; abort then fails later operations."""
    res = {}
    try:
        import torch
        import torch.distributed as dist
        import dlpg.torch  # noqa: F401
        init_torch("dlpg", init, rank, world)
        pg = dist.group.WORLD
        be = pg._get_backend(torch.device("cpu"))
        s0 = be._get_sequence_number_for_group()
        for _ in range(3):
            dist.all_reduce(torch.ones(3))
        dist.barrier()
        s1 = be._get_sequence_number_for_group()
        res["seq"] = "ok" if s1 == s0 + 4 else "from %d to %d" % (s0, s1)
        seqs = [None] * world
        dist.all_gather_object(seqs, s1)
        res["seq_agrees"] = "ok" if len(set(seqs)) == 1 else str(seqs)
        res["caps"] = "ok" if (be.supports_coalescing and not be.supports_tensor_alloc(torch.device("cpu"))) else "%s %s" % (be.supports_coalescing, be.supports_tensor_alloc(torch.device("cpu")))
        res["set_timeout_0"] = _raises(lambda: be._set_default_timeout(datetime.timedelta(0)),
                                       "setTimeout: the timeout must be positive, got 0 ms")
        be._set_default_timeout(datetime.timedelta(seconds=40))
        peer = 1 - rank
        x = torch.arange(6, dtype=torch.float64) + 10 * rank
        y = torch.zeros(6, dtype=torch.float64)
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, peer), dist.P2POp(dist.irecv, y, peer)])
        for w in works:
            w.wait()
        res["coalesced_p2p"] = "ok" if torch.equal(y, torch.arange(6, dtype=torch.float64) + 10 * peer) else str(y)
        sp = torch.sparse_coo_tensor([[0, 2]], [1.0, 2.0], (4,))
        dist.all_reduce(sp)  # summed as gloo sums it (test_torch_sparse checks it fully)
        want = torch.tensor([1.0, 0.0, 2.0, 0.0]) * world
        res["sparse"] = "ok" if torch.equal(sp.to_dense(), want) else str(sp.to_dense())
        dist.barrier()
        # setTimeout bounds a later wait without a timeout: a receive rank 1 never sends.
        if rank == 0:
            be._set_default_timeout(datetime.timedelta(seconds=1))
            t0 = time.monotonic()
            work = dist.irecv(torch.zeros(3), src=1)
            res["set_timeout"] = _raises(work.wait, " Timed out ", "DLPG_ERR_TIMEOUT")
            took = time.monotonic() - t0
            res["set_timeout_time"] = "ok" if took < 15 else "took %.1f s" % took
        else:
            time.sleep(3)
        be.abort()
        res["after_abort"] = _raises(lambda: dist.all_reduce(torch.ones(2)), "DLPG_ERR_")
        be.shutdown()
        be.abort()  # nothing left to abort: no error
        res["after_shutdown"] = _raises(lambda: dist.all_reduce(torch.ones(2)),
                                        "this process group was shut down")
        dist.destroy_process_group()  # shuts it down again: no error
    except Exception:  # noqa: BLE001
        res["error"] = traceback.format_exc()
    queue.put((rank, res))
