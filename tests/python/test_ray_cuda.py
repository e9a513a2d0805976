"""dlpg.ray on CUDA: CuPy and torch CUDA tensors through ray.util.collective's "dlpg"
backend, one GPU per actor (world size = the GPUs used), actors sharing one GPU through
fractional num_gpus (dlpg's CUDA IPC path; NCCL refuses them), and the *_multigpu forms
with two GPUs in one actor. Skips without CUDA; cases that need two GPUs skip, saying so, on one.
References are computed here from the ranks' seeded draws (workers_ray.rank_data)."""

import os

import numpy as np
import pytest

import conftest

ray = pytest.importorskip("ray")
col = pytest.importorskip("ray.util.collective")

GPUS = conftest.cuda_devices()
pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(GPUS == 0, reason="no CUDA device")]

import dlpg.ray as dr  # noqa: E402
import workers_ray as w  # noqa: E402

SEED = int(os.environ.get("DLPG_TEST_SEED", "20261205"))


@ray.remote(num_cpus=0, num_gpus=1)
class GpuWorker(object):
    def __init__(self):
        import dlpg.ray as dr
        dr.register(timeout=120)

    def gpu_ids(self):
        return ray.get_gpu_ids()

    def init_group(self, world, rank, group):
        col.init_collective_group(world, rank, backend="dlpg", group_name=group)

    def ops(self, group, fw, seed):
        """allreduce, broadcast, allgather, reducescatter, send/recv on the actor's GPU;
        {name: numpy result}."""
        import dlpg.ray as dr
        g = dr.group(group)
        rank, world = g.rank, g.world_size
        xp = _xp(fw)
        out = {}
        x = xp(w.rank_data(seed, rank, "allreduce-sum"))
        col.allreduce(x, group_name=group)
        dr.synchronize(0)
        out["allreduce"] = _np(x)
        x = xp(w.rank_data(seed, rank, "broadcast"))
        col.broadcast(x, src_rank=world - 1, group_name=group)
        out["broadcast"] = _np(x)
        lst = [xp(np.zeros(w.N, np.float32)) for _ in range(world)]
        col.allgather(lst, xp(w.rank_data(seed, rank, "allgather")), group_name=group)
        out["allgather"] = np.stack([_np(t) for t in lst])
        y = xp(np.zeros(w.N, np.float32))
        col.reducescatter(y, [xp(w.rank_data(seed, rank, "reducescatter-%d" % b))
                              for b in range(world)], group_name=group)
        out["reducescatter"] = _np(y)
        if world > 1:
            x = xp(w.rank_data(seed, rank, "sendrecv"))
            y = xp(np.zeros(w.N, np.float32))
            if rank == 0:
                col.send(x, 1, group_name=group)
            elif rank == 1:
                col.recv(y, 0, group_name=group)
            out["sendrecv"] = _np(y)
        dr.synchronize(0)
        col.destroy_collective_group(group)
        return rank, out

    def multigpu(self, group, seed):
        """allreduce_multigpu and broadcast_multigpu (src_tensor 1) over both GPUs."""
        import cupy
        import dlpg.ray as dr
        xs = []
        for dev in range(2):
            with cupy.cuda.Device(dev):
                xs.append(cupy.asarray(w.rank_data(seed, dev, "multi")))
        dr.allreduce_multigpu(xs, group_name=group)
        a = [cupy.asnumpy(x) for x in xs]
        for dev in range(2):
            with cupy.cuda.Device(dev):
                xs[dev] = cupy.asarray(w.rank_data(seed, dev, "multi-bcast"))
        dr.broadcast_multigpu(xs, src_rank=0, src_tensor=1, group_name=group)
        b = [cupy.asnumpy(x) for x in xs]
        col.destroy_collective_group(group)
        return a, b


def _xp(fw):
    if fw == "cupy":
        import cupy
        return cupy.asarray
    import torch
    return lambda a: torch.from_numpy(np.array(a)).cuda()


def _np(x):
    if type(x).__module__.startswith("torch"):
        return x.cpu().numpy()
    import cupy
    return cupy.asnumpy(x)


@pytest.fixture(scope="module")
def cluster():
    from dlpg import _abi
    os.environ.setdefault("DLPG_LIBRARY", _abi.library_path())
    ray.init(num_cpus=4, num_gpus=GPUS, include_dashboard=False, log_to_driver=False)
    try:
        dr.register()
        yield
    finally:
        ray.shutdown()


def _run(world, fw, num_gpus=1):
    seed = SEED + world
    actors = [GpuWorker.options(num_gpus=num_gpus).remote() for _ in range(world)]
    if num_gpus < 1:
        ids = ray.get([a.gpu_ids.remote() for a in actors], timeout=180)
        assert all(i == ids[0] for i in ids), "actors were given GPUs %s, not one" % ids
    group = "cuda-%s-%d-%g" % (fw, world, num_gpus)
    ray.get([a.init_group.remote(world, r, group) for r, a in enumerate(actors)], timeout=180)
    res = dict(ray.get([a.ops.remote(group, fw, seed) for a in actors], timeout=180))
    d = w.rank_data
    for r in range(world):
        got = res[r]
        np.testing.assert_array_equal(got["allreduce"],
                                      sum(d(seed, q, "allreduce-sum") for q in range(world)))
        np.testing.assert_array_equal(got["broadcast"], d(seed, world - 1, "broadcast"))
        np.testing.assert_array_equal(got["allgather"],
                                      np.stack([d(seed, q, "allgather") for q in range(world)]))
        np.testing.assert_array_equal(got["reducescatter"], sum(
            d(seed, q, "reducescatter-%d" % r) for q in range(world)))
        if world > 1 and r == 1:
            np.testing.assert_array_equal(got["sendrecv"], d(seed, 0, "sendrecv"))
    for a in actors:
        ray.kill(a)


@pytest.mark.parametrize("fw", ["cupy", "torch"])
def test_one_gpu_world_size_one(cluster, fw):
    if fw == "cupy":
        pytest.importorskip("cupy")
    _run(1, fw)


@pytest.mark.parametrize("fw", ["cupy", "torch"])
def test_two_actors_one_gpu_each(cluster, fw):
    if GPUS < 2:
        pytest.skip("needs 2 CUDA devices, this machine has %d" % GPUS)
    if fw == "cupy":
        pytest.importorskip("cupy")
    _run(2, fw)


@pytest.mark.parametrize("fw", ["cupy", "torch"])
def test_actors_share_one_gpu(cluster, fw):
    # num_gpus=0.5: Ray puts both actors on one GPU.
    if fw == "cupy":
        pytest.importorskip("cupy")
    _run(2, fw, num_gpus=0.5)


def test_multigpu_forms_two_gpus_one_actor(cluster):
    if GPUS < 2:
        pytest.skip("needs 2 CUDA devices, this machine has %d" % GPUS)
    pytest.importorskip("cupy")
    seed = SEED + 50
    a = GpuWorker.options(num_gpus=2).remote()
    ray.get(a.init_group.remote(1, 0, "multi"), timeout=180)
    ar, bc = ray.get(a.multigpu.remote("multi", seed), timeout=180)
    want = w.rank_data(seed, 0, "multi") + w.rank_data(seed, 1, "multi")
    for x in ar:
        np.testing.assert_array_equal(x, want)
    for x in bc:
        np.testing.assert_array_equal(x, w.rank_data(seed, 1, "multi-bcast"))
    ray.kill(a)
