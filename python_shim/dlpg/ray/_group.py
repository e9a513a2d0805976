"""DlpgGroup: a ray.util.collective group (BaseGroup) whose operations run on a dlpg.Group.

Ray calls every operation with lists: one tensor per local device (the *_multigpu forms pass
several, the others one), and list-of-lists for the outputs of allgather and the inputs of
reducescatter. A list of several tensors goes to dlpg as its device list (CUDA tensors on
distinct devices; on the CPU dlpg takes one). Results are written in place, as Ray's API
says, and also returned (JAX arrays cannot be written: _tensors.py), one per tensor passed.
"""

import os

from ray.util.collective.collective_group.base_collective_group import BaseGroup
from ray.util.collective.types import ReduceOp

from ..group import Group
from ..store import Store
from . import _kv
from . import _tensors as T

BACKEND = "DLPG"

_OPS = {ReduceOp.SUM: "sum", ReduceOp.PRODUCT: "prod", ReduceOp.MIN: "min",
        ReduceOp.MAX: "max"}

# The groups' timeout in seconds (register(timeout=...)); None: DLPG_TIMEOUT, else 300 s.
# Ray hands a custom backend only (world_size, rank, group_name), so it is per process.
settings = {"timeout": None}


def _op(options):
    op = getattr(options, "reduceOp", ReduceOp.SUM)
    if op in _OPS:
        return _OPS[op]
    if isinstance(op, str):
        return op  # dlpg's names ("avg", "band", ...) are accepted too
    raise ValueError("dlpg.ray: reduce op %r is not one of ray's ReduceOp %s"
                     % (op, [o.name for o in _OPS]))


def _one_list(name, xs):
    if not isinstance(xs, (list, tuple)) or not xs:
        raise ValueError("dlpg.ray %s: expected a non-empty list of tensors (one per local "
                         "device), got %r" % (name, type(xs).__name__))
    return list(xs)


class DlpgGroup(BaseGroup):
    """The "dlpg" backend of ray.util.collective (dlpg.ray.register() registers it)."""

    def __init__(self, world_size, rank, group_name, timeout=None):
        super().__init__(world_size, rank, group_name)
        timeout = timeout if timeout is not None else settings["timeout"]
        if timeout is None:
            timeout = float(os.environ.get("DLPG_TIMEOUT", "300"))
        self._timeout = float(timeout)
        store = Store.from_host_store(_kv.RayKVStore(group_name), self._timeout)
        try:
            self._g = Group(store, rank, world_size, timeout=self._timeout, name=group_name)
        finally:
            store.close()  # the group holds its own reference

    @property
    def dlpg_group(self):
        """The underlying dlpg.Group (gather, scatter, alltoall, v-forms, async_op=True)."""
        return self._g

    @property
    def timeout(self):
        return self._timeout

    @classmethod
    def backend(cls):
        return BACKEND

    @classmethod
    def check_backend_availability(cls):
        try:
            from .. import _abi
            return _abi.lib is not None
        except Exception:  # noqa: BLE001 - the library cannot load: not available.
            return False

    def destroy_group(self):
        self._g.destroy()

    # -- the operations of BaseGroup -----------------------------------------------------

    def allreduce(self, tensors, allreduce_options=None):
        ts = _one_list("allreduce", tensors)
        op = _op(allreduce_options)
        if len(ts) == 1 and not T.is_jax(ts[0]):
            self._g.allreduce(ts[0], op=op)  # the common case, kept short: small messages
            return ts
        outs = [T.target(t) for t in ts]
        if all(o is t for o, t in zip(outs, ts)):
            self._g.allreduce(ts, op=op)
        else:
            self._g.allreduce(ts, output=outs, op=op)
        return [T.finish(t, o) for t, o in zip(ts, outs)]

    def barrier(self, barrier_options=None):
        self._g.barrier()

    def reduce(self, tensors, reduce_options=None):
        ts = _one_list("reduce", tensors)
        root = int(getattr(reduce_options, "root_rank", 0))
        k = int(getattr(reduce_options, "root_tensor", 0))
        self._check_root_tensor("reduce", k, len(ts))
        op = _op(reduce_options)
        mine = self.rank == root
        if not mine:
            self._g.reduce(ts, root=root, op=op)  # nothing is written on this rank
            return list(ts)
        # dlpg writes the root's first output: a scratch one there when the result belongs
        # to another tensor than the first (root_tensor) or to a JAX array.
        if k == 0 and not T.is_jax(ts[0]):
            self._g.reduce(ts, root=root, op=op)
            return list(ts)
        scratch = T.target(ts[k]) if k == 0 else T.empty(ts[0], T.numel(ts[0]))
        outs = [scratch.reshape(tuple(ts[0].shape))] + ts[1:]
        self._g.reduce(ts, root=root, op=op, output=outs)
        res = list(ts)
        if k == 0:
            res[0] = T.finish(ts[0], outs[0])
        elif T.is_jax(ts[k]):
            res[k] = T.finish(ts[k], outs[0])
        else:
            T.copy(ts[k], outs[0])
        return res

    def broadcast(self, tensors, broadcast_options=None):
        ts = _one_list("broadcast", tensors)
        root = int(getattr(broadcast_options, "root_rank", 0))
        k = int(getattr(broadcast_options, "root_tensor", 0))
        self._check_root_tensor("broadcast", k, len(ts))
        if self.rank == root and k != 0:
            # dlpg sends the root's first tensor, which every tensor then receives: the
            # chosen one is copied there first (the device list keeps its order, which the
            # communicator of these devices is built on).
            if T.is_jax(ts[0]):
                raise ValueError("dlpg.ray broadcast: root_tensor=%d with a JAX array first "
                                 "in the list (it cannot be written)" % k)
            T.copy(ts[0], ts[k])
        outs = [T.target(t) for t in ts]
        if all(o is t for o, t in zip(outs, ts)):
            self._g.broadcast(ts, root=root)
        else:
            self._g.broadcast(ts, root=root, output=outs)
        return [T.finish(t, o) for t, o in zip(ts, outs)]

    def allgather(self, tensor_lists, tensors, allgather_options=None):
        ts = _one_list("allgather", tensors)
        lists = _one_list("allgather (outputs)", tensor_lists)
        if len(lists) != len(ts):
            raise ValueError("dlpg.ray allgather: %d output lists for %d input tensors"
                             % (len(lists), len(ts)))
        blocks = self.world_size * len(ts)
        for i, out in enumerate(lists):
            if not isinstance(out, (list, tuple)) or len(out) != blocks:
                raise ValueError("dlpg.ray allgather: output list %d has %s tensors; expected "
                                 "world_size * devices = %d" %
                                 (i, len(out) if isinstance(out, (list, tuple)) else "no",
                                  blocks))
        flats = [T.empty(t, blocks * T.numel(t)) for t in ts]
        self._g.allgather(ts, output=flats)
        res = []
        for flat, out, t in zip(flats, lists, ts):
            row = []
            for b, o in enumerate(out):
                piece = T.block(flat, b, t)
                if T.is_jax(o):
                    row.append(T.finish(o, piece))
                else:
                    T.copy(o, piece)
                    row.append(o)
            res.append(row)
        return res

    def reducescatter(self, tensors, tensor_lists, reducescatter_options=None):
        ts = _one_list("reducescatter", tensors)
        lists = _one_list("reducescatter (inputs)", tensor_lists)
        if len(lists) != len(ts):
            raise ValueError("dlpg.ray reducescatter: %d input lists for %d output tensors"
                             % (len(lists), len(ts)))
        blocks = self.world_size * len(ts)
        flats = []
        for i, (inp, t) in enumerate(zip(lists, ts)):
            if not isinstance(inp, (list, tuple)) or len(inp) != blocks:
                raise ValueError("dlpg.ray reducescatter: input list %d has %s tensors; "
                                 "expected world_size * devices = %d" %
                                 (i, len(inp) if isinstance(inp, (list, tuple)) else "no",
                                  blocks))
            n = T.numel(t)
            for b, x in enumerate(inp):
                if T.numel(x) != n:
                    raise ValueError("dlpg.ray reducescatter: input %d of list %d has %d "
                                     "elements, the output %d" % (b, i, T.numel(x), n))
            flat = T.empty(t, blocks * n)
            for b, x in enumerate(inp):
                T.copy(T.block(flat, b, t), x)
            flats.append(flat)
        outs = [T.target(t) for t in ts]
        self._g.reduce_scatter(flats, output=outs, op=_op(reducescatter_options))
        return [T.finish(t, o) for t, o in zip(ts, outs)]

    def send(self, tensors, send_options):
        ts = _one_list("send", tensors)
        self._single("send", ts)
        n = int(getattr(send_options, "n_elements", 0) or 0)
        t = T.prefix(ts[0], n, "send") if n else ts[0]
        self._g.send(t, int(send_options.dst_rank))

    def recv(self, tensors, recv_options):
        ts = _one_list("recv", tensors)
        self._single("recv", ts)
        n = int(getattr(recv_options, "n_elements", 0) or 0)
        x = ts[0]
        out = T.target(x, keep=bool(n))
        self._g.recv(T.prefix(out, n, "recv") if n else out, int(recv_options.src_rank))
        return [T.finish(x, out)]

    # -- extras (dlpg.ray's functions call them) ----------------------------------------

    def gather(self, tensor, output=None, root=0):
        mine = output is not None and self.rank == root
        out = T.target(output) if mine else None  # only the root's output is written
        self._g.gather(tensor, out, root=root)
        return T.finish(output, out) if mine else None

    def scatter(self, output, input=None, root=0):
        out = T.target(output)
        self._g.scatter(input, out, root=root)
        return T.finish(output, out)

    def alltoall(self, input, output):
        out = T.target(output)
        self._g.alltoall(input, out)
        return T.finish(output, out)

    def allgatherv(self, input, output, counts, displs=None):
        out = T.target(output, keep=displs is not None)
        self._g.allgatherv(input, out, counts, displs)
        return T.finish(output, out)

    def alltoallv(self, input, send_counts, output, recv_counts, send_displs=None,
                  recv_displs=None):
        out = T.target(output, keep=recv_displs is not None)
        self._g.alltoallv(input, send_counts, out, recv_counts, send_displs, recv_displs)
        return T.finish(output, out)

    def reduce_scatter_v(self, input, output, counts, displs=None, op="sum"):
        out = T.target(output)
        self._g.reduce_scatter_v(input, out, counts, displs, op=_OPS.get(op, op))
        return T.finish(output, out)

    # -- checks -------------------------------------------------------------------------

    @staticmethod
    def _check_root_tensor(name, k, n):
        if not 0 <= k < n:
            raise ValueError("dlpg.ray %s: root_tensor=%d but %d tensors were passed"
                             % (name, k, n))

    @staticmethod
    def _single(name, ts):
        if len(ts) != 1:
            raise ValueError("dlpg.ray %s: one tensor per call (got %d); Ray's send/recv "
                             "take one" % (name, len(ts)))
