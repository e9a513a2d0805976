"""dlpg.Group.split (dlpg_group_split) from Python: random colors (None: no subgroup) and
keys over 3 seeded trials on 4 spawned ranks, each subgroup's rank, size and allreduce
checked against a reference (workers_split.py)."""

from conftest import dlpg_store, run_ranks
import workers_split as w


def test_split_numpy():
    seed = 20261205
    print("seed", seed)
    with dlpg_store() as url:
        res = run_ranks(w.split_ranks, 4, lambda r: (4, url, "split-py", seed),
                        deadline_s=120)
    for r in range(4):
        assert "error" not in res[r], res[r]["error"]
        assert res[r]["results"] == "ok"


def test_subset_numpy():
    """dlpg.Group.subset (dlpg_group_create_subset): random member lists over 3 seeded trials
    on 4 spawned ranks, called by the members only; and Group's nccl settings."""
    seed = 20261206
    print("seed", seed)
    with dlpg_store() as url:
        res = run_ranks(w.subset_ranks, 4, lambda r: (4, url, "subset-py", seed),
                        deadline_s=120)
    for r in range(4):
        assert "error" not in res[r], res[r]["error"]
        assert res[r]["results"] == "ok"
