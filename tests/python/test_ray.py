"""dlpg as a ray.util.collective backend (dlpg.ray) on a local Ray instance, CPU only: every
operation with NumPy, torch and JAX arrays, on groups the driver declares and groups the
actors initialise, frameworks mixed in one group, threads of one actor, destroy and create
again under one name, and an actor killed mid-allreduce. One Ray instance and one pool of
actors serve the module (Ray's start-up is most of its time); references are computed here
from the ranks' seeded draws (workers_ray.rank_data)."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest

import conftest  # noqa: F401 - the shim and this folder on PYTHONPATH, for Ray's workers too

ray = pytest.importorskip("ray")
col = pytest.importorskip("ray.util.collective")
import dlpg.ray as dr  # noqa: E402
import workers_ray as w  # noqa: E402

SEED = int(os.environ.get("DLPG_TEST_SEED", "20261205"))
POOL = 4
FW_SEED = {"numpy": 100, "torch": 200, "jax": 300}
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def pool():
    print("seed", SEED)
    # The library the test process found, for the actors too.
    from dlpg import _abi
    os.environ.setdefault("DLPG_LIBRARY", _abi.library_path())
    # CPU only, also on a GPU host: JAX in an actor would otherwise take the GPU and, by
    # default, most of its memory per process (four actors ran out of it on an H100).
    ray.init(num_cpus=POOL, include_dashboard=False, log_to_driver=False,
             configure_logging=False, runtime_env={"env_vars": {"JAX_PLATFORMS": "cpu"}})
    pids = []
    try:
        dr.register()
        actors = [w.Worker.remote() for _ in range(POOL)]
        pids += ray.get([a.pid.remote() for a in actors], timeout=180)
        yield actors
    finally:
        ray.shutdown()
        _reap(pids)


def _reap(pids, within=30.0):
    """Wait until the actors' processes are gone (Ray's workers end after its raylet, not
    with ray.shutdown), so that nothing of this module runs on after it; kill stragglers."""
    end = time.monotonic() + within
    for pid in pids:
        while time.monotonic() < end:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass


def _get(refs, timeout=120):
    return ray.get(refs, timeout=timeout)


def _reference(seed, world):
    """{rank: {name: expected numpy result}} of workers_ray.run_ops."""
    d = w.rank_data
    ranks = range(world)
    root, src = world - 1, 1 % world
    counts = [r + 1 for r in ranks]
    cdispl = np.concatenate([[0], np.cumsum(counts)])
    red = {"sum": np.sum, "prod": np.prod, "min": np.min, "max": np.max}
    exp = {}
    for r in ranks:
        e = {}
        for name, f in red.items():
            e["allreduce-" + name] = f(np.stack([d(seed, q, "allreduce-" + name) for q in ranks]),
                                       axis=0)
        e["reduce"] = (sum(d(seed, q, "reduce") for q in ranks) if r == root
                       else d(seed, r, "reduce"))
        e["broadcast"] = d(seed, src, "broadcast")
        e["allgather"] = np.stack([d(seed, q, "allgather") for q in ranks])
        e["reducescatter"] = sum(d(seed, q, "reducescatter-%d" % r) for q in ranks)
        e["sendrecv"] = d(seed, (r - 1) % world, "sendrecv")
        p = np.full(w.N, 7.0, np.float32)
        if r == 1:
            p[:3] = d(seed, 0, "prefix")[:3]
        e["prefix"] = p
        e["gather"] = (np.concatenate([d(seed, q, "gather") for q in ranks]) if r == 0
                       else None)
        e["scatter"] = d(seed, src, "scatter", w.N * world)[r * w.N:(r + 1) * w.N]
        e["alltoall"] = np.concatenate([d(seed, q, "alltoall", w.N * world)[r * w.N:(r + 1) * w.N]
                                        for q in ranks])
        e["allgatherv"] = np.concatenate([d(seed, q, "allgatherv", counts[q]) for q in ranks])
        parts = []
        for i in ranks:
            sc = [(i + j) % 3 + 1 for j in ranks]
            start = sum(sc[:r])
            parts.append(d(seed, i, "alltoallv", sum(sc))[start:start + sc[r]])
        e["alltoallv"] = np.concatenate(parts)
        e["reduce_scatter_v"] = sum(d(seed, q, "rsv", sum(counts))[cdispl[r]:cdispl[r + 1]]
                                    for q in ranks)
        exp[r] = e
    return exp


def _check(results, seed, world):
    exp = _reference(seed, world)
    for rank, size, got in results:
        assert size == world
        for name, want in exp[rank].items():
            if want is None:
                assert got[name] is None, (rank, name)
                continue
            np.testing.assert_array_equal(got[name], want, err_msg="rank %d %s" % (rank, name))


def _destroy(actors, group):
    took = _get([a.destroy.remote(group) for a in actors], timeout=60)
    assert max(took) < 30, took


@pytest.mark.parametrize("fw", ["numpy", "torch", "jax"])
def test_driver_declared_every_op(pool, fw):
    group = "declared-" + fw
    seed = SEED + FW_SEED[fw]
    col.create_collective_group(pool, POOL, list(range(POOL)), backend="dlpg",
                                group_name=group)
    res = _get([a.run_ops.remote(group, fw, seed) for a in pool])
    assert [r[0] for r in res] == list(range(POOL))
    _check(res, seed, POOL)
    _destroy(pool, group)


@pytest.mark.parametrize("fw", ["numpy", "torch", "jax"])
def test_actor_initialised_every_op(pool, fw):
    """Three of the actors, ranked backwards."""
    group = "init-" + fw
    seed = SEED + 7 + FW_SEED[fw]
    actors = pool[:3][::-1]
    _get([a.init_group.remote(3, r, group) for r, a in enumerate(actors)])
    res = _get([a.run_ops.remote(group, fw, seed) for a in actors])
    _check(res, seed, 3)
    _destroy(actors, group)


def test_mixed_frameworks_one_group(pool):
    """Ranks 0 and 2 use torch, ranks 1 and 3 JAX, in one group."""
    group = "mixed"
    seed = SEED + 11
    _get([a.init_group.remote(POOL, r, group) for r, a in enumerate(pool)])
    fws = ["torch", "jax", "torch", "jax"]
    res = _get([a.run_ops.remote(group, fw, seed) for a, fw in zip(pool, fws)])
    _check(res, seed, POOL)
    _destroy(pool, group)


def test_threads_of_one_actor(pool):
    """Four threads per actor issue allreduces on one group at once."""
    group = "threads"
    seed = SEED + 13
    actors = pool[:2]
    _get([a.init_group.remote(2, r, group) for r, a in enumerate(actors)])
    res = _get([a.allreduce_threads.remote(group, seed, 4, 25) for a in actors])
    want = w.rank_data(seed, 0, "threads") + w.rank_data(seed, 1, "threads")
    for errors, results in res:
        assert not errors, errors
        assert len(results) == 100
        for x in results:
            np.testing.assert_array_equal(x, want)
    _destroy(actors, group)


def test_destroy_and_create_again(pool):
    """A group destroyed and created again under its name, declared by the driver and
    initialised by the actors, starts clean: new data, right results."""
    actors = pool[:2]
    for i in range(2):
        _get([a.init_group.remote(2, r, "again") for r, a in enumerate(actors)])
        res = _get([a.run_ops.remote("again", "numpy", SEED + 20 + i) for a in actors])
        _check(res, SEED + 20 + i, 2)
        _destroy(actors, "again")
    for i in range(2):
        # Ray's destroy kills the driver's record of the group (a named actor) as it goes:
        # wait until the name is free.
        deadline = time.monotonic() + 30
        while True:
            try:
                col.create_collective_group(actors[::-1], 2, [0, 1], backend="dlpg",
                                            group_name="again-declared")
                break
            except RuntimeError:
                assert time.monotonic() < deadline, "info actor of the group never went away"
                time.sleep(0.2)
        res = _get([a.run_ops.remote("again-declared", "torch", SEED + 30 + i)
                    for a in actors])
        _check(res, SEED + 30 + i, 2)
        _destroy(actors, "again-declared")


def test_bad_arguments_are_named(pool):
    group = "bad"
    actors = pool[:2]
    _get([a.init_group.remote(2, r, group) for r, a in enumerate(actors)])
    errs = _get(actors[0].bad_calls.remote(group))
    assert "allgather" in errs["allgather"] and "world_size * devices = 2" in errs["allgather"]
    assert "n_elements=99" in errs["prefix"] and "6 elements" in errs["prefix"]
    assert "root_tensor=3" in errs["root_tensor"]
    assert "rank 5 outside [0, 2)" in errs["rank"]
    assert "this rank" in errs["self"]
    assert "exactly one tensor per call" in errs["multigpu"], errs["multigpu"]
    with pytest.raises(ray.exceptions.RayTaskError) as e:
        _get(actors[0].run_ops.remote("no-such-group", "numpy", 1))
    assert "no-such-group" in str(e.value)
    _destroy(actors, group)


def test_kv_store_counters(pool):
    """The rendezvous store over Ray's KV: adds from threads get distinct values, a deleted
    counter starts again at zero, values and counters read back, names scope keys."""
    import threading
    from dlpg.ray import _kv
    a, b = _kv.RayKVStore("kv/a"), _kv.RayKVStore("kv")
    got = []

    def adder():
        s = _kv.RayKVStore("kv/a")  # a process of its own, as far as caches go
        for _ in range(10):
            got.append(s.add("n", 1))
    ts = [threading.Thread(target=adder) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert sorted(got) == list(range(1, 41))
    assert a.add("n", 0) == 40 and a.get("n") == b"40" and a.check(["n"])
    assert not b.check(["n"]) and b.add("n", 0) == 0  # another group's name
    a.set("v", b"hello")
    assert a.get("v") == b"hello" and a.check(["v", "n"])
    assert a.delete_key("n") and not a.check(["n"])
    assert a.add("n", 5) == 5 and _kv.RayKVStore("kv/a").add("n", 2) == 7
    # A get of a key set later waits for it (dlpg's get blocks); one never set times out.
    from dlpg.store import Store
    st = Store.from_host_store(_kv.RayKVStore("kv/w"), 5.0)
    threading.Timer(0.3, lambda: _kv.RayKVStore("kv/w").set("late", b"x")).start()
    assert st.get("late", timeout=5.0) == b"x"
    t0 = time.monotonic()
    with pytest.raises(Exception) as e:
        st.get("never", timeout=0.5)
    assert "TIMEOUT" in str(e.value) and time.monotonic() - t0 < 3, e.value
    st.close()
    _kv.clear("kv/w")
    _kv.clear("kv/a")
    assert not a.check(["v"]) and a.add("n", 0) == 0


def test_killed_actor_mid_allreduce(pool):
    """Rank 2 is killed while ranks 0 and 1 wait in an allreduce for it: they raise within
    the group's timeout + 1 s of the kill, naming rank 2, and destroy returns promptly; a
    group made again under the name with another actor as rank 2 works."""
    timeout = 4.0
    victim = w.Worker.remote()
    actors = [pool[0], pool[1], victim]
    _get([a.set_timeout.remote(timeout) for a in actors + [pool[2]]])
    try:
        _get([a.init_group.remote(3, r, "killed") for r, a in enumerate(actors)])
        # One allreduce completes: the group is up on every rank.
        ok = _get([a.allreduce_timed.remote("killed") for a in actors])
        assert all(err is None for _, err in ok), ok
        waiting = [a.allreduce_timed.remote("killed") for a in actors[:2]]
        time.sleep(1.0)
        ray.kill(victim)
        killed_at = time.monotonic()
        res = _get(waiting, timeout=timeout + 30)
        elapsed = time.monotonic() - killed_at
        print("after the kill: %.2f s" % elapsed, res)
        for took, err in res:
            assert err is not None, res
            assert "rank 2" in err, err
        assert elapsed <= timeout + 1.0 + 1.0, (elapsed, res)  # + 1 s for Ray's round trip
        took = _get([a.destroy.remote("killed") for a in actors[:2]], timeout=60)
        assert max(took) < 2.0, took
        # A new group under the name, a fresh actor in the dead one's rank: the failure
        # recorded by the old group's job is not this one's.
        again = [pool[0], pool[1], pool[2]]
        _get([a.init_group.remote(3, r, "killed") for r, a in enumerate(again)])
        res = _get([a.run_ops.remote("killed", "numpy", SEED + 40) for a in again])
        _check(res, SEED + 40, 3)
        _destroy(again, "killed")
    finally:
        _get([a.set_timeout.remote(300) for a in pool[:3]])


def test_import_without_ray_names_ray():
    code = ("import sys; sys.modules['ray'] = None\n"
            "try:\n import dlpg.ray\nexcept ImportError as e:\n print('ERR', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert "ERR dlpg.ray needs Ray" in out.stdout, (out.stdout, out.stderr)
