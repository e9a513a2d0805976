"""Rank body of test_torch_split: subgroups of a "dlpg" default group on CPU, made the ways
torch makes them (its ProcessGroup.split_group, which dist.split_group and DeviceMesh call
where the default group has a bound accelerator; new_group, with and without
use_local_synchronization; new_subgroups; init_device_mesh 1-D and 2-D), each checked by
collectives on random per-rank data against references computed here from every rank's
seeded data."""

import datetime
import traceback

from dlpg_workers import _data, init_torch, use_backend


def torch_split(rank, world, init, seed, queue):
    res = {}
    try:
        import torch
        import torch.distributed as dist
        use_backend()
        init_torch("dlpg", init, rank, world)
        default = dist.distributed_c10d._get_default_group()
    except Exception:  # noqa: BLE001
        queue.put((rank, {"setup": traceback.format_exc()}))
        return

    def data(r, key, shape=(5, 3), dtype=torch.float64):
        return _data(torch, seed, 100 * key + r, shape, dtype, "cpu")

    def eq(a, b, what):
        if not torch.allclose(a, b, rtol=1e-12, atol=1e-12):
            raise AssertionError("%s: got %s, want %s" % (what, a, b))

    def check(name, fn):
        try:
            fn()
            res[name] = "ok"
        except Exception:  # noqa: BLE001 - reported to the test.
            res[name] = traceback.format_exc()

    def collectives(g, members, key, what, registered=True):
        """all_reduce, broadcast, all_gather and reduce_scatter on g (whose global ranks are
        members, in group-rank order) against references. A group torch has not registered
        (ProcessGroup.split_group's result, which dist.split_group registers) is called
        through its own methods, in group ranks."""
        assert g.size() == len(members), (what, g.size(), members)
        me = members.index(rank)
        assert g.rank() == me, (what, g.rank(), members)
        n = len(members)
        x, y = data(rank, key), data(rank, key + 1, (4,))
        outs = [torch.empty(2, 3, dtype=torch.float64) for _ in members]
        z = torch.empty(3, dtype=torch.float64)
        zin = data(rank, key + 3, (3 * n,))
        if registered:
            dist.all_reduce(x, group=g)
            dist.broadcast(y, src=members[-1], group=g)
            dist.all_gather(outs, data(rank, key + 2, (2, 3)), group=g)
            dist.reduce_scatter_tensor(z, zin, group=g)
        else:
            g.allreduce([x]).wait()
            g.broadcast(y, n - 1).wait()
            g.allgather([outs], [data(rank, key + 2, (2, 3))]).wait()
            g._reduce_scatter_base(z, zin).wait()
        eq(x, sum(data(r, key) for r in members), what + " all_reduce")
        eq(y, data(members[-1], key + 1, (4,)), what + " broadcast")
        for i, r in enumerate(members):
            eq(outs[i], data(r, key + 2, (2, 3)), "%s all_gather [%d]" % (what, i))
        eq(z, sum(data(r, key + 3, (3 * n,)) for r in members)[3 * me:3 * me + 3],
           what + " reduce_scatter_tensor")

    def pairs():
        return [list(range(i, min(i + 2, world))) for i in range(0, world, 2)]

    def t_split():
        # What dist.split_group does on every rank of the parent (it needs a bound
        # accelerator to get here, so on CPU the test calls torch's own method): one
        # dlpg_group_split; its child is a dlpg group with the parent's job.
        dist.all_reduce(torch.ones(1), group=default)
        for key, split in ((10, pairs()), (20, [[0, world - 1]])):
            mine = next((g for g in split if rank in g), split[0])
            child = default.split_group(mine, timeout=datetime.timedelta(seconds=60))
            if rank not in mine:
                assert child is None, ("non-member got a group", split)
                continue
            assert child is not None, ("member got none", split)
            assert child._get_backend(torch.device("cpu")).name() == "dlpg"
            collectives(child, mine, key, "split %s" % split, registered=False)
            # A child splits again: each rank on its own.
            grand = child.split_group([child.rank()])
            collectives(grand, [rank], key + 5, "split of split", registered=False)

    def t_split_bad_ranks():
        try:
            default.split_group([rank, world + 3])
        except RuntimeError as e:
            assert "rank %d in" % (world + 3) in str(e) and "0..%d" % (world - 1) in str(e), e
        else:
            raise AssertionError("a rank outside the parent was accepted")
        # Lists that overlap (torch leaves that to the caller): ranks 0 and 1 ask for [0, 1],
        # rank 2 for [0, 2], so the ranks whose lowest is 0 form a group of 3, which every
        # one of them refuses, naming the group it asked for; rank 3 gets its own.
        mine = {0: [0, 1], 1: [0, 1], 2: [0, 2]}.get(rank, [rank])
        try:
            child = default.split_group(mine)
        except RuntimeError as e:
            assert rank < 3 and "asked for the group of ranks %s" % mine in str(e) \
                and "formed a group of 3" in str(e), e
        else:
            assert rank >= 3 and child.size() == 1, (rank, child)
        # The group is still usable.
        x = data(rank, 30)
        dist.all_reduce(x)
        eq(x, sum(data(r, 30) for r in range(world)), "all_reduce after refused split")

    def t_new_group():
        for key, members in ((40, [0, world - 1]), (50, list(range(1, world))),
                             (60, list(range(world)))):
            g = dist.new_group(members)
            if rank in members:
                collectives(g, members, key, "new_group %s" % members)

    def t_new_group_local():
        # Only the members call it. First of all new_groups: torch names such a group by a
        # hash that counts the groups each rank made before, so ranks that made different
        # ones before would disagree on its name (gloo hangs there the same way).
        odd = list(range(1, world, 2))
        if rank in odd:
            g = dist.new_group(odd, use_local_synchronization=True)
            collectives(g, odd, 70, "new_group local sync %s" % odd)

    def t_new_group_without_rank0():
        # The first thing the job does: a subgroup rank 0 is not in, while rank 0 issues
        # nothing on the default group until the members are done (it waits on the store):
        # the members need no more of it than its creation of the default group.
        import time
        members = list(range(1, world))
        g = dist.new_group(members)
        store = dist.distributed_c10d._get_default_store()
        if rank in members:
            collectives(g, members, 120, "new_group without rank 0 %s" % members)
            store.add("without_rank0_done", 1)
            return
        t0 = time.monotonic()
        while store.add("without_rank0_done", 0) < len(members):
            assert time.monotonic() - t0 < 60, "the members did not finish within 60 s"
            time.sleep(0.01)

    def t_new_subgroups():
        cur, subs = dist.new_subgroups(group_size=2)
        assert len(subs) == world // 2
        members = [rank - rank % 2, rank - rank % 2 + 1]
        collectives(cur, members, 80, "new_subgroups")

    def t_device_mesh():
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (world,))
        collectives(mesh.get_group(), list(range(world)), 90, "mesh 1-D")
        mesh2 = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("dp", "tp"))
        grid = mesh2.mesh.tolist()
        row = next(r for r in grid if rank in r)
        col = [r[row.index(rank)] for r in grid]
        collectives(mesh2.get_group("tp"), row, 100, "mesh 2-D tp")
        collectives(mesh2.get_group("dp"), col, 110, "mesh 2-D dp")
        assert mesh2.get_group("tp")._get_backend(torch.device("cpu")).name() == "dlpg"

    check("new_group_without_rank0", t_new_group_without_rank0)
    check("split", t_split)
    check("split_bad_ranks", t_split_bad_ranks)
    check("new_group_local", t_new_group_local)
    check("new_group", t_new_group)
    check("new_subgroups", t_new_subgroups)
    check("device_mesh", t_device_mesh)
    try:
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        res["teardown"] = traceback.format_exc()
    queue.put((rank, res))


def torch_split_cuda(rank, world, init, seed, queue):
    """With a bound CUDA device_id, where torch itself takes the split path: dist.split_group
    into single ranks and a 1-D DeviceMesh, each with an all_reduce on CUDA checked."""
    res = {}
    try:
        import torch
        import torch.distributed as dist
        use_backend()
        dev = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        host, port = init
        store = dist.TCPStore(host, port, world, False, datetime.timedelta(seconds=60))
        dist.init_process_group("dlpg", store=store, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=60), device_id=dev)
    except Exception:  # noqa: BLE001
        queue.put((rank, {"setup": traceback.format_exc()}))
        return

    def t_split_group():
        sub = dist.split_group(split_ranks=[[r] for r in range(world)])
        assert sub is not None and sub.size() == 1
        x = _data(torch, seed, rank, (6,), torch.float32, dev)
        want = x.clone()
        dist.all_reduce(x, group=sub)
        torch.cuda.synchronize()
        assert torch.equal(x, want), (x, want)

    def t_mesh():
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cuda", (world,))
        x = torch.full((4,), float(rank + 1), device=dev)
        dist.all_reduce(x, group=mesh.get_group())
        torch.cuda.synchronize()
        assert x[0].item() == world * (world + 1) / 2, x

    for name, fn in (("split_group", t_split_group), ("mesh", t_mesh)):
        try:
            fn()
            res[name] = "ok"
        except Exception:  # noqa: BLE001
            res[name] = traceback.format_exc()
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        res["teardown"] = traceback.format_exc()
    queue.put((rank, res))
