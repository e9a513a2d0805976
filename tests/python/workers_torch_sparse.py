"""Rank body of test_torch_sparse: all_reduce (SUM) of sparse COO tensors on a "dlpg" group,
on random per-rank sparse tensors (every rank builds every rank's from its seed, so the
reference is the dense sum computed here), against the same all_reduce on a "gloo" group;
then inputs that disagree across ranks, which fail on every rank naming both ranks."""

import traceback

from dlpg_workers import init_torch, use_backend


def sparse_of(torch, seed, rank, size, sparse_dim, nnz, dtype, dups=False):
    """Rank `rank`'s random sparse tensor: nnz entries (indices may repeat when dups, so
    the tensor is uncoalesced), values random of dtype, dense dims after sparse_dim."""
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    idx = torch.stack([torch.randint(0, size[d], (nnz,), generator=g) for d in range(sparse_dim)])
    if dups and nnz > 1:
        idx[:, -1] = idx[:, 0]
    vshape = (nnz,) + tuple(size[sparse_dim:])
    if dtype.is_floating_point:
        vals = torch.randn(vshape, generator=g, dtype=torch.float64).to(dtype)
    else:
        vals = torch.randint(-50, 50, vshape, generator=g).to(dtype)
    return torch.sparse_coo_tensor(idx, vals, size)


# name: (size, sparse_dim, nnz of rank r, dtype, duplicate indices). No complex dtype: torch's
# all_reduce hands a complex tensor to the backend as its view_as_real, and a sparse result
# written there never reaches the caller's tensor (gloo's leaves it unchanged too).
CASES = {
    "float64_2d": ((7, 9), 2, lambda r: 5 + 3 * r, "float64", False),
    "hybrid_float32": ((6, 4, 3), 1, lambda r: 2 + r, "float32", False),
    "int64_uncoalesced": ((10, 10), 2, lambda r: 6, "int64", True),
    "float32_1d": ((8,), 1, lambda r: 4, "float32", False),
    "one_rank_empty": ((5, 5), 2, lambda r: 0 if r == 1 else 3, "float64", False),
    "all_empty": ((5, 5), 2, lambda r: 0, "float64", False),
}


def torch_sparse(rank, world, init, seed, queue):
    res = {}
    try:
        import torch
        import torch.distributed as dist
        use_backend()
        init_torch("dlpg", init, rank, world)
        gg = dist.new_group(backend="gloo")
    except Exception:  # noqa: BLE001
        queue.put((rank, {"setup": traceback.format_exc()}))
        return

    def check(name, fn):
        try:
            fn()
            res[name] = "ok"
        except Exception:  # noqa: BLE001 - reported to the test.
            res[name] = traceback.format_exc()

    def case(name, k):
        size, sdim, nnz, dtype, dups = CASES[name]
        dtype = getattr(torch, dtype)

        def run():
            mine = [sparse_of(torch, seed + k, r, size, sdim, nnz(r), dtype, dups)
                    for r in range(world)]
            want = sum(t.to_dense() for t in mine)
            t = mine[rank].clone()
            dist.all_reduce(t)
            assert t.is_sparse and t.is_coalesced(), (t.layout, t.is_coalesced())
            assert t.dtype == dtype and tuple(t.shape) == size, (t.dtype, t.shape)
            exact = not (dtype.is_floating_point or dtype.is_complex)
            if exact:
                assert torch.equal(t.to_dense(), want), (t.to_dense(), want)
            else:
                torch.testing.assert_close(t.to_dense(), want, rtol=1e-5, atol=1e-6)
            # gloo's result: the same entries (the same indices once coalesced, the same
            # values up to the order of the additions).
            u = mine[rank].clone()
            dist.all_reduce(u, group=gg)
            t, u = t.coalesce(), u.coalesce()
            assert torch.equal(t.indices(), u.indices()), (t.indices(), u.indices())
            if exact:
                assert torch.equal(t.values(), u.values())
            else:
                torch.testing.assert_close(t.values(), u.values(), rtol=1e-5, atol=1e-6)
        check(name, run)

    for k, name in enumerate(CASES):
        case(name, k)

    def mismatch():
        # The last rank passes another size: every rank fails, naming rank 0 and that rank.
        size = (4, 6) if rank == world - 1 else (4, 5)
        t = sparse_of(torch, seed, rank, size, 2, 3, torch.float64)
        try:
            dist.all_reduce(t)
        except Exception as e:  # noqa: BLE001
            msg = str(e)
            assert "rank 0" in msg and "rank %d" % (world - 1) in msg, msg
            assert "[4, 5]" in msg and "[4, 6]" in msg, msg
        else:
            raise AssertionError("a size mismatch was not refused")
        # The group is still usable: every rank failed at the same point.
        x = torch.ones(3)
        dist.all_reduce(x)
        assert torch.equal(x, torch.full((3,), float(world))), x
    check("mismatch", mismatch)

    def not_sum():
        t = sparse_of(torch, seed, rank, (3, 3), 2, 2, torch.float64)
        try:
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        except Exception as e:  # noqa: BLE001
            assert "ReduceOp.SUM" in str(e), str(e)
        else:
            raise AssertionError("MAX of sparse tensors was not refused")
    check("not_sum", not_sum)

    try:
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        res["teardown"] = traceback.format_exc()
    queue.put((rank, res))
