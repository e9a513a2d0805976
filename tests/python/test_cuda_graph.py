"""CUDA-graph capture of every dlpg.Group operation and every torch.distributed operation on
the "dlpg" backend, in the pattern torch documents: warm-up on a side
stream, then `with torch.cuda.graph(g):` in the default (global) capture error mode, each
kind in a fresh process (the first capture of a process is the one that used to fail with
cudaErrorStreamCaptureInvalidated). World size 1 on one GPU, 2 where two are lent, and 2
processes sharing GPU 0 (the CUDA IPC path, whose captured operations number their steps on
the device so that every replay is a new exchange); CuPy's stream capture where CuPy is
installed. Skipped without CUDA."""

import pytest

from conftest import cuda_devices, dlpg_store, require_torch_backend, run_ranks, torch_store
import workers_cuda_graph

SHIM = ["allreduce_out_of_place", "allreduce_in_place", "broadcast", "reduce", "allgather",
        "reduce_scatter", "alltoall"]
TORCH = ["all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor",
         "reduce_scatter_tensor", "reduce_scatter", "all_to_all_single"]
_cache = {}


def _run(kind, world, shared):
    if cuda_devices() < (1 if shared else world):
        pytest.skip("needs %d CUDA devices" % world)
    if kind == "torch":
        require_torch_backend()
    key = (kind, world, shared)
    if key not in _cache:
        # torch.distributed meets on a TCPStore, dlpg.Group on a dlpg store, served here.
        with (torch_store() if kind == "torch" else dlpg_store()) as init:
            _cache[key] = run_ranks(workers_cuda_graph.graph_capture, world,
                                    lambda r: (world, init, kind, shared), deadline_s=180)
    res = _cache[key]
    for rank, r in sorted(res.items()):
        if str(r.get("setup", "")).startswith("skip:"):
            pytest.skip(r["setup"][5:])
        assert "setup" not in r, "rank %d setup failed:\n%s" % (rank, r["setup"])
        assert "teardown" not in r, "rank %d teardown:\n%s" % (rank, r["teardown"])
    return res


def _cases():
    out = []
    for world, shared in ((1, False), (2, False), (2, True)):
        out += [("shim", op, world, shared) for op in SHIM + (["send_recv"] if world > 1 else [])]
        out += [("torch", op, world, shared)
                for op in TORCH + (["batch_isend_irecv"] if world > 1 else [])]
        out += [("cupy", "cupy_" + op, world, shared)
                for op in ("allreduce", "broadcast", "reduce", "allgather", "reduce_scatter")]
    return out


@pytest.mark.parametrize("kind,op,world,shared", _cases())
def test_capture(kind, op, world, shared):
    res = _run(kind, world, shared)
    for rank, r in sorted(res.items()):
        assert r.get(op) == "ok", "rank %d %s %s:\n%s" % (rank, kind, op, r.get(op))
