"""Rank body of test_split.py: dlpg.Group.split on NumPy arrays, each subgroup's rank, size
and allreduce checked against an MPI_Comm_split reference computed here from every rank's
seeded data."""

import traceback


def reference(colors, keys, me):
    """MPI_Comm_split's members of me's color: parent ranks ordered by (key, rank)."""
    if colors[me] is None or colors[me] < 0:
        return []
    return sorted((r for r in range(len(colors)) if colors[r] == colors[me]),
                  key=lambda r: (keys[r], r))


def split_ranks(rank, world, url, name, seed, queue):
    res = {}
    try:
        import numpy as np
        import dlpg
        g = dlpg.Group(url, rank, world, timeout=60, name=name)
        rng = np.random.default_rng(seed)
        for trial in range(3):
            colors = [int(c) if c >= 0 else None for c in rng.integers(-1, 3, world)]
            keys = [int(k) for k in rng.integers(-2, 2, world)]
            sub = g.split(colors[rank], key=keys[rank], name="sub%d" % trial)
            members = reference(colors, keys, rank)
            if not members:
                assert sub is None, (trial, colors, keys)
                continue
            assert (sub.rank, sub.size) == (members.index(rank), len(members)), \
                (trial, colors, keys, sub.rank, sub.size)
            data = lambda r: np.random.default_rng(seed * 100 + trial * 10 + r).integers(
                -50, 50, 17).astype(np.int64)
            x = data(rank)
            sub.allreduce(x)
            want = sum(data(r) for r in members)
            assert (x == want).all(), (trial, x, want)
            sub.destroy()
        # key defaults to the rank: the reverse order needs explicit keys.
        sub = g.split(0, key=world - rank)
        assert sub.rank == world - 1 - rank
        sub.destroy()
        g.destroy()
        res["results"] = "ok"
    except Exception:  # noqa: BLE001 - reported to the test.
        res["error"] = traceback.format_exc()
    queue.put((rank, res))


def subset_ranks(rank, world, url, name, seed, queue):
    """dlpg.Group.subset: per trial, random member lists (random sizes and orders) called by
    their members only, in list order; each child's rank, size and allreduce against a
    reference; the nccl settings refused by name."""
    res = {}
    try:
        import numpy as np
        import dlpg
        g = dlpg.Group(url, rank, world, timeout=60, name=name,
                       nccl={"min_ctas": 2, "comm_name": "subset-test"})  # host lines ignore them
        rng = np.random.default_rng(seed)
        for trial in range(3):
            lists = [[int(r) for r in rng.permutation(world)[:int(rng.integers(1, world + 1))]]
                     for _ in range(3)]
            for l, members in enumerate(lists):
                if rank not in members:
                    continue
                sub = g.subset(members, name="u%d.%d" % (trial, l))
                assert (sub.rank, sub.size) == (members.index(rank), len(members)), \
                    (trial, members, sub.rank, sub.size)
                data = lambda r: np.random.default_rng(seed * 100 + trial * 10 + l + r * 1000) \
                    .integers(-50, 50, 19).astype(np.int64)
                x = data(rank)
                sub.allreduce(x)
                want = sum(data(r) for r in members)
                assert (x == want).all(), (trial, members, x, want)
                sub.destroy()
        # Refused on the calling rank alone, naming the rank: out of range, and a list
        # without the caller.
        for bad in ([world], [(rank + 1) % world]):
            try:
                g.subset(bad)
            except dlpg.DlpgError as e:
                assert "rank" in str(e) and "INVALID_ARGUMENT" in str(e), str(e)
            else:
                raise AssertionError("subset(%r) was not refused" % (bad,))
        try:
            dlpg.Group(url, rank, world, name=name + "-bad", nccl={"min_cta": 2})
        except dlpg.DlpgError as e:
            assert "'min_cta'" in str(e) and "min_ctas" in str(e), str(e)
        else:
            raise AssertionError("nccl={'min_cta': 2} was not refused")
        g.destroy()
        res["results"] = "ok"
    except Exception:  # noqa: BLE001 - reported to the test.
        res["error"] = traceback.format_exc()
    queue.put((rank, res))
