"""Rank body of test_torch_backend's error checks: bad input to the "dlpg" backend raises a
RuntimeError whose message names the operation and the values; nothing hangs."""

import traceback

from dlpg_workers import init_torch, use_backend


def bad_input(rank, world, init, queue):
    import torch
    import torch.distributed as dist
    res = {}
    try:
        use_backend()
        init_torch("dlpg", init, rank, world)
    except Exception:  # noqa: BLE001
        queue.put((rank, {"setup": traceback.format_exc()}))
        return

    def expect(name, fn, *words):
        try:
            fn()
            res[name] = "no error"
        except RuntimeError as e:
            msg = str(e)
            missing = [w for w in words if w not in msg]
            res[name] = "ok" if not missing else "message lacks %s: %s" % (missing, msg)
        except Exception:  # noqa: BLE001
            res[name] = traceback.format_exc()

    # Every rank passes a different element count: libdlpg names both ranks and counts.
    n = 4 + rank

    def mismatched():
        w = dist.all_reduce(torch.ones(n), async_op=True)
        w.wait()
    expect("mismatched_sizes", mismatched, "dlpg_allreduce", "4", "5")
    expect("bad_root", lambda: dist.broadcast(torch.ones(3), src=world + 3), "root")
    # Sparse tensors are summed (as by gloo); any other op is refused, naming the one it takes.
    expect("sparse", lambda: dist.all_reduce(torch.ones(2, dtype=torch.float64).to_sparse(),
                                             op=dist.ReduceOp.MAX), "sparse", "ReduceOp.SUM")
    try:
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        res["teardown"] = traceback.format_exc()
    queue.put((rank, res))
