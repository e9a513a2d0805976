"""dlpg as a backend of Ray's collective library (ray.util.collective).

    import dlpg.ray
    dlpg.ray.register()                     # in the driver and in every actor
    col.create_collective_group(actors, 2, [0, 1], backend="dlpg", group_name="g")
    # or, inside each actor: col.init_collective_group(2, rank, backend="dlpg", group_name="g")
    col.allreduce(tensor, group_name="g")   # ray.util.collective as before

The ranks meet through Ray's internal key-value store (no address, port or extra actor).
This module's functions mirror ray.util.collective's, take any object with __dlpack__ (JAX
arrays too, which Ray's own functions refuse) and return their results: in place where the
tensor can be written, a new JAX array where it is a JAX array (immutable). They also add
gather, scatter, alltoall and the v-forms. Every process registers the backend itself (Ray
asks that of custom backends); this module's functions register it when they are called.
"""

try:
    import ray  # noqa: F401 - the ImportError below names Ray
    from ray.util import collective as _col
    from ray.util.collective.backend_registry import _global_registry, register_collective_backend
    from ray.util.collective.types import ReduceOp
except ImportError as e:  # pragma: no cover - exercised in a process without Ray
    raise ImportError("dlpg.ray needs Ray (ray.util.collective, Ray 2.58 or later): "
                      "pip install 'ray>=2.58' (%s)" % e) from e

from ._group import BACKEND, DlpgGroup, settings
from . import _kv

__all__ = ["register", "DlpgGroup", "BACKEND", "ReduceOp", "clear_store", "allreduce",
           "allreduce_multigpu", "barrier", "reduce", "reduce_multigpu", "broadcast",
           "broadcast_multigpu", "allgather", "allgather_multigpu", "reducescatter",
           "reducescatter_multigpu", "send", "send_multigpu", "recv", "recv_multigpu",
           "synchronize", "gather", "scatter", "alltoall", "allgatherv", "alltoallv",
           "reduce_scatter_v", "get_rank", "get_collective_group_size",
           "destroy_collective_group", "group"]


def register(timeout=None):
    """Register the "dlpg" backend of ray.util.collective in this process (driver or
    actor); idempotent. timeout: seconds of every blocking step of the groups this process
    creates afterwards (rendezvous, operations; None: DLPG_TIMEOUT, else 300): Ray's
    gloo_timeout is not handed to custom backends."""
    if timeout is not None:
        settings["timeout"] = float(timeout)
    if _global_registry.is_registered(BACKEND):
        cls = _global_registry.get(BACKEND)
        if cls is not DlpgGroup:
            raise RuntimeError("dlpg.ray.register: Ray's backend %r is already registered to "
                               "%r" % (BACKEND, cls))
        return
    register_collective_backend(BACKEND, DlpgGroup)


def clear_store(group_name="default"):
    """Delete the rendezvous keys of every group named group_name from Ray's KV store.
    Call it only when no process uses a group of that name (e.g. from the driver once the
    actors are gone); a group of the name made afterwards starts from scratch."""
    _kv.clear(group_name)


def group(group_name="default"):
    """This process's DlpgGroup named group_name (created on first use when the driver
    declared it with create_collective_group)."""
    register()
    g = _col.get_group_handle(group_name)
    if not isinstance(g, DlpgGroup):
        raise RuntimeError("dlpg.ray: collective group %r uses backend %s, not dlpg"
                           % (group_name, type(g).__name__))
    return g


class _Opts(object):
    """An options object of ray.util.collective.types (a fresh one per call: Ray's own
    allreduce sets reduceOp on the class, which threads share)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def _rank_ok(g, rank, what):
    if not 0 <= int(rank) < g.world_size:
        raise ValueError("dlpg.ray %s: rank %d outside [0, %d)" % (what, rank, g.world_size))
    return int(rank)


def allreduce(tensor, group_name="default", op=ReduceOp.SUM):
    return group(group_name).allreduce([tensor], _Opts(reduceOp=op))[0]


def allreduce_multigpu(tensor_list, group_name="default", op=ReduceOp.SUM):
    return group(group_name).allreduce(list(tensor_list), _Opts(reduceOp=op))


def barrier(group_name="default"):
    group(group_name).barrier()


def reduce(tensor, dst_rank=0, group_name="default", op=ReduceOp.SUM):
    g = group(group_name)
    return g.reduce([tensor], _Opts(reduceOp=op, root_rank=_rank_ok(g, dst_rank, "reduce"),
                                    root_tensor=0))[0]


def reduce_multigpu(tensor_list, dst_rank=0, dst_tensor=0, group_name="default",
                    op=ReduceOp.SUM):
    g = group(group_name)
    return g.reduce(list(tensor_list), _Opts(reduceOp=op, root_tensor=int(dst_tensor),
                                             root_rank=_rank_ok(g, dst_rank, "reduce")))


def broadcast(tensor, src_rank=0, group_name="default"):
    g = group(group_name)
    return g.broadcast([tensor], _Opts(root_rank=_rank_ok(g, src_rank, "broadcast"),
                                       root_tensor=0))[0]


def broadcast_multigpu(tensor_list, src_rank=0, src_tensor=0, group_name="default"):
    g = group(group_name)
    return g.broadcast(list(tensor_list), _Opts(root_rank=_rank_ok(g, src_rank, "broadcast"),
                                                root_tensor=int(src_tensor)))


def allgather(tensor_list, tensor, group_name="default"):
    return group(group_name).allgather([list(tensor_list)], [tensor], _Opts())[0]


def allgather_multigpu(output_tensor_lists, input_tensor_list, group_name="default"):
    return group(group_name).allgather([list(x) for x in output_tensor_lists],
                                       list(input_tensor_list), _Opts())


def reducescatter(tensor, tensor_list, group_name="default", op=ReduceOp.SUM):
    return group(group_name).reducescatter([tensor], [list(tensor_list)],
                                           _Opts(reduceOp=op))[0]


def reducescatter_multigpu(output_tensor_list, input_tensor_lists, group_name="default",
                           op=ReduceOp.SUM):
    return group(group_name).reducescatter(list(output_tensor_list),
                                           [list(x) for x in input_tensor_lists],
                                           _Opts(reduceOp=op))


def _peer(g, rank, what):
    rank = _rank_ok(g, rank, what)
    if rank == g.rank:
        raise ValueError("dlpg.ray %s: the peer rank %d is this rank" % (what, rank))
    return rank


def send(tensor, dst_rank, group_name="default"):
    g = group(group_name)
    g.send([tensor], _Opts(dst_rank=_peer(g, dst_rank, "send"), n_elements=0))


def send_multigpu(tensor, dst_rank, dst_gpu_index, group_name="default", n_elements=0):
    """dst_gpu_index is not needed by dlpg (the receiver's tensor says where the data
    lands); it is checked to be >= 0 only."""
    g = group(group_name)
    if int(dst_gpu_index) < 0 or int(n_elements) < 0:
        raise ValueError("dlpg.ray send_multigpu: dst_gpu_index=%d and n_elements=%d must be "
                         ">= 0" % (dst_gpu_index, n_elements))
    g.send([tensor], _Opts(dst_rank=_peer(g, dst_rank, "send"), n_elements=int(n_elements)))


def recv(tensor, src_rank, group_name="default"):
    g = group(group_name)
    return g.recv([tensor], _Opts(src_rank=_peer(g, src_rank, "recv"), n_elements=0))[0]


def recv_multigpu(tensor, src_rank, src_gpu_index, group_name="default", n_elements=0):
    g = group(group_name)
    if int(src_gpu_index) < 0 or int(n_elements) < 0:
        raise ValueError("dlpg.ray recv_multigpu: src_gpu_index=%d and n_elements=%d must be "
                         ">= 0" % (src_gpu_index, n_elements))
    return g.recv([tensor], _Opts(src_rank=_peer(g, src_rank, "recv"),
                                  n_elements=int(n_elements)))[0]


def synchronize(gpu_id):
    """Wait for the work queued on CUDA device gpu_id (dlpg's CUDA operations return once
    enqueued, as NCCL's do)."""
    try:
        import torch
        if torch.cuda.is_available():
            torch.cuda.synchronize(int(gpu_id))
            return
    except ImportError:
        pass
    try:
        import cupy
    except ImportError:
        raise RuntimeError("dlpg.ray.synchronize(%r): no CUDA device (neither torch nor CuPy "
                           "sees one)" % (gpu_id,))
    cupy.cuda.Device(int(gpu_id)).synchronize()


def gather(tensor, output=None, dst_rank=0, group_name="default"):
    """dst_rank's output (world_size * numel(tensor) elements) gets every rank's tensor,
    rank-major; returned there (None elsewhere)."""
    g = group(group_name)
    return g.gather(tensor, output, _rank_ok(g, dst_rank, "gather"))


def scatter(output, input=None, src_rank=0, group_name="default"):
    """Block r of src_rank's input (world_size blocks of numel(output)) lands in rank r's
    output, which is returned."""
    g = group(group_name)
    return g.scatter(output, input, _rank_ok(g, src_rank, "scatter"))


def alltoall(input, output, group_name="default"):
    return group(group_name).alltoall(input, output)


def allgatherv(input, output, counts, displs=None, group_name="default"):
    return group(group_name).allgatherv(input, output, counts, displs)


def alltoallv(input, send_counts, output, recv_counts, send_displs=None, recv_displs=None,
              group_name="default"):
    return group(group_name).alltoallv(input, send_counts, output, recv_counts, send_displs,
                                       recv_displs)


def reduce_scatter_v(input, output, counts, displs=None, op="sum", group_name="default"):
    return group(group_name).reduce_scatter_v(input, output, counts, displs, op)


get_rank = _col.get_rank
get_collective_group_size = _col.get_collective_group_size
destroy_collective_group = _col.destroy_collective_group
init_collective_group = _col.init_collective_group
create_collective_group = _col.create_collective_group
