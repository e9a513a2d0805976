"""Rank body of test_torch_cuda_surface (world size 1, one GPU): init_process_group("dlpg",
device_id=cuda:0) with NCCL settings in pg_options and dlpg's log at INFO in a file; checks
that init made the NCCL communicator (its "ready" line is in the log before any collective)
with the settings (the line's config), then a split of the 1-rank group, PREMUL_SUM on CUDA,
and a subgroup by new_group."""

import datetime
import os
import traceback

# What the communicators are configured with; the log line says "config: minCTAs=2 ...".
NCCL = dict(min_ctas=2, max_ctas=4, cga_cluster_size=2, comm_name="dlpg-surface",
            net_name="Socket", traffic_class=0)
WANT_LOG = ("minCTAs=2", "maxCTAs=4", "cgaClusterSize=2", "netName=Socket",
            "commName=dlpg-surface")


def cuda_surface(rank, world, init, log_path, queue):
    res = {}
    try:
        os.environ["DLPG_DEBUG"] = "INFO"
        os.environ["DLPG_DEBUG_FILE"] = log_path
        import torch
        import torch.distributed as dist
        import dlpg.torch
        dev = torch.device("cuda", 0)
        torch.cuda.set_device(dev)
        host, port = init
        store = dist.TCPStore(host, port, world, False, datetime.timedelta(seconds=60))
        dist.init_process_group("dlpg", store=store, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=60), device_id=dev,
                                pg_options=dlpg.torch.Options(**NCCL))
    except Exception:  # noqa: BLE001
        queue.put((rank, {"setup": traceback.format_exc()}))
        return

    def log():
        with open(log_path) as f:
            return f.read()

    def check(name, fn):
        try:
            fn()
            res[name] = "ok"
        except Exception:  # noqa: BLE001 - reported to the test.
            res[name] = traceback.format_exc()

    def eager():
        # No collective yet: the communicator is the one init made.
        text = log()
        ready = [ln for ln in text.splitlines() if "ready" in ln and "communicator" in ln]
        assert ready, "no communicator was made at init; log:\n" + text[-3000:]
        for w in WANT_LOG:
            assert w in ready[0], (w, ready[0])
        assert dist.distributed_c10d._get_default_group().bound_device_id == dev
    check("eager_connect", eager)

    def premul():
        x = torch.arange(6, dtype=torch.float32, device=dev)
        dist.all_reduce(x, op=dist._make_nccl_premul_sum(2.5))
        torch.cuda.synchronize()
        torch.testing.assert_close(x.cpu(), torch.arange(6, dtype=torch.float32) * 2.5)
    check("premul_sum", premul)

    def split():
        sub = dist.split_group(split_ranks=[[0]])
        x = torch.full((4,), 3.0, device=dev)
        dist.all_reduce(x, group=sub)
        torch.cuda.synchronize()
        assert torch.equal(x.cpu(), torch.full((4,), 3.0)), x
        # The child's communicator (split from the parent's, or made anew) has the parent's
        # settings.
        lines = [ln for ln in log().splitlines() if "communicator" in ln and
                 ("ready" in ln or "split from" in ln)]
        assert len(lines) >= 2 and all(w in lines[-1] for w in WANT_LOG), lines
    check("split", split)

    def new_group():
        g = dist.new_group([0])
        x = torch.ones(3, device=dev)
        dist.all_reduce(x, group=g)
        torch.cuda.synchronize()
        assert torch.equal(x.cpu(), torch.ones(3)), x
    check("new_group", new_group)

    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        res["teardown"] = traceback.format_exc()
    queue.put((rank, res))
