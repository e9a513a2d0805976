"""dlpg.Group and dlpg.Work: the framework-neutral process group over __dlpack__ objects.

Every operation borrows its tensors: the DLPack capsules (and the objects) are kept by the
Work until the operation has completed. A Work dropped before completion parks them in a
module-level list that later calls reap, so memory never goes away under a running op.
"""

import ctypes

from . import _abi, _dlpack, _work
from ._abi import DlpgError, check, lib

_REDUCE_OPS = {"sum": _abi.SUM, "prod": _abi.PROD, "product": _abi.PROD, "min": _abi.MIN,
               "max": _abi.MAX, "avg": _abi.AVG, "mean": _abi.AVG, "band": _abi.BAND,
               "bor": _abi.BOR, "bxor": _abi.BXOR, "premul_sum": _abi.PREMUL_SUM}

# The operations Group._issuer binds (dlpg_<name>): what the torch backend may issue.
_OPERATIONS = ("allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall",
               "send", "recv", "barrier")


def reduce_op(op):
    """A dlpg_reduce_op_t from a name ("sum", "max", ...) or an int."""
    if isinstance(op, int):
        return op
    try:
        return _REDUCE_OPS[str(op).lower()]
    except KeyError:
        raise DlpgError(_abi.ERR_INVALID_ARGUMENT,
                        "dlpg: unknown reduce op %r (one of %s)" % (op, ", ".join(sorted(_REDUCE_OPS))))


def _reduce_call(name, plain, ex, op, scalar):
    """(function, reduce argument) of a reducing collective: the plain one with the op, or,
    for premul_sum, its _ex form with a dlpg_reduce_desc_t carrying scalar."""
    rop = reduce_op(op)
    if rop != _abi.PREMUL_SUM:
        if scalar is not None:
            raise ValueError("dlpg.Group.%s: scalar=%r is only for op=dlpg.PREMUL_SUM, not op=%r"
                             % (name, scalar, op))
        return plain, rop
    if scalar is None:
        raise ValueError("dlpg.Group.%s: op=dlpg.PREMUL_SUM needs scalar= (the factor this "
                         "rank's input is multiplied by before the sum)" % name)
    try:
        factor = float(scalar)
    except (TypeError, ValueError):
        raise ValueError("dlpg.Group.%s: scalar=%r is not a real number" % (name, scalar))
    # byref keeps the descriptor alive for the call, which only reads it.
    return ex, ctypes.byref(_abi.ReduceDesc(ctypes.sizeof(_abi.ReduceDesc), rop, factor))


class Work(object):
    """One asynchronous operation. wait(timeout) raises DlpgError on failure."""

    __slots__ = ("_h", "_alive", "_error", "_done", "result")

    def __init__(self, handle, alive, result=None):
        self._h = handle
        self._alive = alive
        self._error = None
        self._done = False
        self.result = result

    def _finish(self, timeout):
        self._error = _work.finish(self._h, timeout)
        if self._error is not None and self._error.status == _abi.ERR_TIMEOUT \
                and not _work.test(self._h):
            raise self._error  # Still running: the operation has not failed (yet).
        self._done = True
        self._alive = None

    def wait(self, timeout=None):
        """Block until done (timeout seconds; None: the group's). Returns True."""
        if not self._done:
            self._finish(timeout)
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self):
        if not self._done:
            if not _work.test(self._h):
                return False
            self._finish(0.0)
        return True

    def is_success(self):
        return self.is_completed() and self._error is None

    @property
    def status(self):
        if not self._done:
            return None
        return self._error.status if self._error is not None else _abi.OK

    @property
    def source(self):
        """A completed receive's sender (dlpg_work_source): the peer it named, or the rank
        whose message a receive from any source matched. DlpgError while it runs."""
        if self._h is None:
            raise DlpgError(_abi.ERR_INVALID_ARGUMENT, "dlpg.Work.source: the work is released")
        r = ctypes.c_int()
        check(lib.dlpg_work_source(self._h, ctypes.byref(r)))
        return r.value

    def __del__(self):
        h, self._h = self._h, None
        if h is None:
            return
        try:
            _work.release([h], self._alive)
        except Exception:  # noqa: BLE001 - interpreter shutdown.
            pass


def _ptr_array(ptrs):
    return (ctypes.c_void_p * len(ptrs))(*ptrs)


class Group(object):
    """A process group. Group(store, rank, world_size, timeout=None, name=None, nccl=None).

    nccl: the NCCL communicator configuration of the group's CUDA communicators, a dict of
    any of cga_cluster_size, min_ctas, max_ctas, traffic_class (ints), net_name, comm_name
    (strings); unset keys are NCCL's defaults (dlpg_group_options_t's nccl_* fields).

    Operations accept one object with __dlpack__ (torch, NumPy, CuPy, JAX as inputs) or a
    list of them (one per local CUDA device). stream: a CUDA stream handle (int) the
    operation is ordered on; default: torch's / CuPy's current stream for their tensors,
    else the default stream. async_op=True returns a Work; else the call returns when a CPU
    operation has completed or a CUDA operation has been enqueued.
    """

    def __init__(self, store, rank, world_size, timeout=None, name=None, nccl=None,
                 _handle=None):
        self._h = None
        if _handle is not None:
            self._h = _handle
            return
        if isinstance(store, str):
            store = Store(store, timeout or 300.0)
        opts = self._options(timeout, name, nccl)
        h = ctypes.c_void_p()
        check(lib.dlpg_group_create(store.handle, int(rank), int(world_size),
                                    ctypes.byref(opts), ctypes.byref(h)))
        self._h = h

    _NCCL_INTS = ("cga_cluster_size", "min_ctas", "max_ctas", "traffic_class")
    _NCCL_STRS = ("net_name", "comm_name")

    @classmethod
    def _options(cls, timeout, name, nccl=None):
        opts = _abi.GroupOptions(ctypes.sizeof(_abi.GroupOptions), float(timeout or 0.0), None,
                                 *([_abi.NCCL_DEFAULT] * len(cls._NCCL_INTS)), None, None)
        if name:
            opts.name = name.encode() if isinstance(name, str) else name
        unknown = sorted(set(nccl or ()) - set(cls._NCCL_INTS + cls._NCCL_STRS))
        if unknown:
            raise DlpgError(_abi.ERR_INVALID_ARGUMENT,
                            "dlpg.Group: nccl has no setting %s (it takes %s)"
                            % (", ".join(map(repr, unknown)),
                               ", ".join(cls._NCCL_INTS + cls._NCCL_STRS)))
        for k, v in (nccl or {}).items():
            if v is None:
                continue
            if k in cls._NCCL_INTS:
                setattr(opts, "nccl_" + k, int(v))
            else:
                setattr(opts, "nccl_" + k, v.encode() if isinstance(v, str) else v)
        return opts

    @classmethod
    def from_env(cls, timeout=None, name=None, nccl=None):
        """A group of the launcher's job (dlpg_group_create_from_env): torchrun (RANK,
        WORLD_SIZE, MASTER_ADDR, MASTER_PORT), Open MPI's mpirun (OMPI_COMM_WORLD_*), MPICH's
        mpiexec (PMI_RANK, PMI_SIZE) or Slurm's srun (SLURM_PROCID, SLURM_NTASKS); the store
        is DLPG_STORE_URL, else MASTER_ADDR, else 127.0.0.1 when every rank is on this host,
        else Slurm's first node of the step (libdlpg decides, dlpg.h)."""
        opts = cls._options(timeout, name, nccl)
        h = ctypes.c_void_p()
        check(lib.dlpg_group_create_from_env(ctypes.byref(opts), ctypes.byref(h)))
        return cls(None, 0, 0, _handle=h)

    @property
    def handle(self):
        if self._h is None:
            raise DlpgError(_abi.ERR_INVALID_ARGUMENT, "dlpg.Group: the group is destroyed")
        return self._h

    @property
    def rank(self):
        r = ctypes.c_int()
        check(lib.dlpg_group_rank(self.handle, ctypes.byref(r)))
        return r.value

    @property
    def size(self):
        r = ctypes.c_int()
        check(lib.dlpg_group_size(self.handle, ctypes.byref(r)))
        return r.value

    # -- plumbing ---------------------------------------------------------------------

    def _borrow(self, objs, stream, alive, written=None):
        """DLTensor addresses and streams for objs (a list); keep-alives go to alive.
        written: the objects' name ("dlpg.Group.recv: tensor") when the operation writes into
        them on this rank, so that read-only memory is refused before the call."""
        ptrs, streams, any_cuda = [], [], False
        for i, o in enumerate(objs):
            s = stream if stream is not None else _dlpack.default_stream(o)
            if s is not None:
                any_cuda = True
            name = written if not written or len(objs) == 1 else "%s[%d]" % (written, i)
            p, keep = _dlpack.borrow(o, s, name)
            alive.append(keep)
            ptrs.append(p)
            streams.append(s or 0)
        return ptrs, streams, any_cuda

    def _run(self, fn, args, alive, async_op, any_cuda, result, stream=None):
        _work.reap()
        if not async_op and (not any_cuda or stream is None):
            # Synchronous CPU: no handle; the call returns the operation's status. CUDA on
            # the producers' current streams: no handle either. The operation is ordered on
            # the stream that owns the memory, as any kernel of the producer's would be, and
            # no event is recorded or queried, so it is capturable into a CUDA graph.
            check(fn(self.handle, *args, None))
            return None
        w = ctypes.c_void_p()
        check(fn(self.handle, *args, ctypes.byref(w)))
        work = Work(w, alive, result)
        if not async_op:
            # CUDA on a stream the caller chose: the producer's allocator does not know that
            # stream, so the Work parks the capsules until the operation completes.
            return None
        return work

    def _issuer(self, name):
        """issue(*args, handle=True) for operation name ("allreduce", "send", ...): the
        raw form the torch backend calls with DLTensor address arrays and streams."""
        if name not in _OPERATIONS:
            raise ValueError("dlpg.Group: no operation %r (one of %s)" % (name, ", ".join(_OPERATIONS)))
        fn = getattr(lib, "dlpg_" + name)
        g = self.handle
        out = ctypes.c_void_p
        ref = ctypes.byref

        def issue(*args, handle=True):
            if not handle:
                check(fn(g, *args, None))
                return None
            w = out()
            check(fn(g, *args, ref(w)))
            return w
        return issue

    @staticmethod
    def _listify(x):
        return list(x) if isinstance(x, (list, tuple)) else [x]

    def _collective(self, fn, inputs, outputs, extra, stream, async_op, writes=True):
        """writes: whether this rank's outputs (its inputs, in place) are written (reduce's
        are on its root only, an in-place broadcast's on the other ranks only)."""
        alive = []
        op = "dlpg.Group." + fn.__name__[len("dlpg_"):]
        if op.endswith("_ex"):
            op = op[:-len("_ex")]
        ins = self._listify(inputs)
        in_place = outputs is None and writes
        ip, st, cuda = self._borrow(ins, stream, alive, op + ": tensor" if in_place else None)
        if outputs is None:
            op_out = None
            result = ins
        else:
            outs = self._listify(outputs)
            op_out, _, _ = self._borrow(outs, stream, alive, op + ": output" if writes else None)
            op_out = _ptr_array(op_out)
            result = outs
        streams = _ptr_array(st) if cuda else None
        args = (_ptr_array(ip), op_out, len(ip)) + extra + (streams,)
        return self._run(fn, args, alive, async_op, cuda, result, stream)

    # -- operations -------------------------------------------------------------------

    def allreduce(self, tensor, output=None, op="sum", async_op=False, stream=None, scalar=None):
        """op "premul_sum" (dlpg.PREMUL_SUM) multiplies each rank's input by its scalar
        before the sum (floating and complex dtypes)."""
        fn, rop = _reduce_call("allreduce", lib.dlpg_allreduce, lib.dlpg_allreduce_ex, op, scalar)
        return self._collective(fn, tensor, output, (rop,), stream, async_op)

    def broadcast(self, tensor, root=0, output=None, async_op=False, stream=None):
        # In place, the root's tensor is only read.
        writes = output is not None or self.rank != int(root)
        return self._collective(lib.dlpg_broadcast, tensor, output, (int(root),), stream, async_op,
                                writes)

    def reduce(self, tensor, root=0, output=None, op="sum", async_op=False, stream=None,
               scalar=None):
        # Only the root's output (its tensor, in place) is written.
        fn, rop = _reduce_call("reduce", lib.dlpg_reduce, lib.dlpg_reduce_ex, op, scalar)
        return self._collective(fn, tensor, output, (rop, int(root)), stream, async_op,
                                self.rank == int(root))

    def allgather(self, tensor, output, async_op=False, stream=None):
        return self._collective(lib.dlpg_allgather, tensor, output, (), stream, async_op)

    def reduce_scatter(self, tensor, output, op="sum", async_op=False, stream=None,
                       scalar=None):
        fn, rop = _reduce_call("reduce_scatter", lib.dlpg_reduce_scatter,
                               lib.dlpg_reduce_scatter_ex, op, scalar)
        return self._collective(fn, tensor, output, (rop,), stream, async_op)

    def alltoall(self, tensor, output, async_op=False, stream=None):
        alive = []
        (ip,), (s,), cuda = self._borrow([tensor], stream, alive)
        (op,), _, _ = self._borrow([output], stream, alive, "dlpg.Group.alltoall: output")
        return self._run(lib.dlpg_alltoall, (ip, op, s or None), alive, async_op, cuda, [output],
                         stream)

    def send(self, tensor, peer, tag=0, async_op=False, stream=None):
        alive = []
        (p,), (s,), cuda = self._borrow([tensor], stream, alive)
        return self._run(lib.dlpg_send, (p, int(peer), int(tag), s or None), alive, async_op,
                         cuda, [tensor], stream)

    def recv(self, tensor, peer=None, tag=0, async_op=False, stream=None, src=None):
        """Receive from peer (src is another name for it, as torch spells it); None (or
        dlpg.ANY_SOURCE) receives the next message with tag from any rank (host memory).
        Returns the sender's rank, or with async_op=True a Work whose .source tells it."""
        if src is not None:
            if peer is not None and int(peer) != int(src):
                raise ValueError("dlpg.Group.recv: peer=%r and src=%r disagree; pass one" %
                                 (peer, src))
            peer = src
        peer = _abi.ANY_SOURCE if peer is None else int(peer)
        alive = []
        (p,), (s,), cuda = self._borrow([tensor], stream, alive, "dlpg.Group.recv: tensor")
        if peer == _abi.ANY_SOURCE and not async_op:
            # Blocking: dlpg_recv_any tells the sender (a batch refuses it: use async_op).
            _work.reap()
            r = ctypes.c_int()
            check(lib.dlpg_recv_any(self.handle, p, int(tag), ctypes.byref(r), s or None))
            return r.value
        w = self._run(lib.dlpg_recv, (p, peer, int(tag), s or None), alive, async_op, cuda,
                      [tensor], stream)
        return w if async_op else peer

    def barrier(self, async_op=False):
        return self._run(lib.dlpg_barrier, (), None, async_op, False, None)

    def group_start(self):
        check(lib.dlpg_group_start(self.handle))

    def group_end(self):
        check(lib.dlpg_group_end(self.handle))

    def batch(self):
        """Context manager: operations issued inside go out together (dlpg_group_start/end);
        use async_op=True inside and wait on the Works afterwards."""
        return _Batch(self)

    def abort(self):
        """Abort the group (and its live subgroups of split()) from any thread."""
        check(lib.dlpg_group_abort(self.handle))

    def split(self, color, key=None, name=None, timeout=None, nccl=None):
        """Split into disjoint subgroups, as MPI_Comm_split (dlpg_group_split): the ranks
        passing the same color >= 0 form one Group, ranked by key (default: this rank), then
        by rank here. Every rank calls it, in the same order; a negative color (or None)
        takes part but gets None. timeout: the subgroup's (default: this group's); name:
        shown in messages and the flight recorder (default "<name>/<color>"); nccl: as
        Group's (default: this group's settings). The subgroup shares this group's store and
        job: no new rendezvous."""
        color = -1 if color is None else int(color)
        key = self.rank if key is None else int(key)
        opts = self._options(timeout, name, nccl)
        h = ctypes.c_void_p()
        check(lib.dlpg_group_split(self.handle, color, key, ctypes.byref(opts), ctypes.byref(h)))
        if not h.value:
            return None
        return Group(None, 0, 0, _handle=h)

    def subset(self, ranks, name=None, timeout=None, nccl=None):
        """The subgroup of the ranks listed (this group's ranks, in the subgroup's rank order),
        as MPI_Comm_create_group (dlpg_group_create_subset): only those ranks call it, with the
        same list, each list in the same order on its members; no exchange and no new
        rendezvous. A member that never calls is named by the others' first operation on it.
        name, timeout, nccl: as split's (default name "<name>/<ranks>")."""
        ranks = [int(r) for r in ranks]
        arr = (ctypes.c_int * max(len(ranks), 1))(*ranks)
        opts = self._options(timeout, name, nccl)
        h = ctypes.c_void_p()
        check(lib.dlpg_group_create_subset(self.handle, len(ranks), arr, ctypes.byref(opts),
                                           ctypes.byref(h)))
        return Group(None, 0, 0, _handle=h)

    def flight_record(self):
        """The group's last operations, oldest first, one line each (dlpg_group_flight_record:
        sequence number, op, dtype, count, devices, peer, backend, state, times)."""
        n = ctypes.c_size_t(0)
        check(lib.dlpg_group_flight_record(self.handle, None, 0, ctypes.byref(n)))
        buf = ctypes.create_string_buffer(n.value + 1)
        check(lib.dlpg_group_flight_record(self.handle, buf, len(buf), ctypes.byref(n)))
        return buf.value.decode("utf-8", "replace").splitlines()

    def destroy(self):
        h, self._h = self._h, None
        if h is not None:
            check(lib.dlpg_group_destroy(h))

    close = destroy

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def __del__(self):
        try:
            self.destroy()
        except Exception:  # noqa: BLE001 - interpreter shutdown.
            pass

    # -- rooted and uneven collectives (one tensor per rank; counts and displacements in
    # elements, world_size entries each, copied by the library at the call) ----------------

    def _counts(self, name, values):
        """A ctypes int64 array of world_size entries from a sequence (None stays None)."""
        if values is None:
            return None
        vals = [int(v) for v in values]
        if len(vals) != self.size:
            raise DlpgError(_abi.ERR_INVALID_ARGUMENT,
                            "dlpg.Group: %s has %d entries but world_size is %d"
                            % (name, len(vals), self.size))
        return (ctypes.c_int64 * len(vals))(*vals)

    def _pair(self, name, tensor, output, stream, async_op, fn, extra, reads_in=True,
              writes_out=True, result=None):
        """One input and one output (either may be None where the library ignores it)."""
        alive = []
        ip = op = None
        s, cuda = None, False
        if tensor is not None and reads_in:
            (ip,), (s,), cuda = self._borrow([tensor], stream, alive)
        if output is not None and writes_out:
            (op,), (s2,), c2 = self._borrow([output], stream, alive,
                                           "dlpg.Group.%s: output" % name)
            s, cuda = s or s2, cuda or c2
        return self._run(fn, extra(ip, op) + (s or None,), alive, async_op, cuda,
                         result if result is not None else [output], stream)

    def gather(self, input, output=None, root=0, async_op=False, stream=None):
        """root's output (world_size * numel(input) elements) gets every rank's input,
        rank-major; other ranks' output is ignored (None allowed)."""
        root = int(root)
        mine = self.rank == root
        return self._pair("gather", input, output, stream, async_op, lib.dlpg_gather,
                          lambda ip, op: (ip, op, root), writes_out=mine)

    def scatter(self, input=None, output=None, root=0, async_op=False, stream=None):
        """root's input holds world_size blocks of numel(output) elements; block r lands in
        rank r's output. Other ranks' input is ignored (None allowed)."""
        root = int(root)
        if output is None:
            raise DlpgError(_abi.ERR_INVALID_ARGUMENT, "dlpg.Group.scatter: output is None")
        return self._pair("scatter", input, output, stream, async_op, lib.dlpg_scatter,
                          lambda ip, op: (ip, op, root), reads_in=self.rank == root)

    def allgatherv(self, input, output, counts, displs=None, async_op=False, stream=None):
        """Rank r's input (counts[r] elements) lands at displs[r] of every rank's output
        (displs None: packed in rank order)."""
        c, d = self._counts("counts", counts), self._counts("displs", displs)
        return self._pair("allgatherv", input, output, stream, async_op, lib.dlpg_allgatherv,
                          lambda ip, op: (ip, op, c, d))

    def alltoallv(self, input, send_counts, output, recv_counts, send_displs=None,
                  recv_displs=None, async_op=False, stream=None):
        """send_counts[j] elements at send_displs[j] of input go to rank j, which receives
        them at its recv_displs[i] (i this rank); displacements None: packed."""
        sc, sd = self._counts("send_counts", send_counts), self._counts("send_displs", send_displs)
        rc, rd = self._counts("recv_counts", recv_counts), self._counts("recv_displs", recv_displs)
        return self._pair("alltoallv", input, output, stream, async_op, lib.dlpg_alltoallv,
                          lambda ip, op: (ip, sc, sd, op, rc, rd))

    def reduce_scatter_v(self, input, output, counts, displs=None, op="sum", scalar=None,
                         async_op=False, stream=None):
        """Block r of input (counts[r] elements at displs[r]; None: packed) of every rank,
        reduced with op, lands in rank r's output. scalar: premul_sum's factor (op
        "premul_sum" or DLPG_PREMUL_SUM = 8)."""
        c, d = self._counts("counts", counts), self._counts("displs", displs)
        rop = 8 if str(op).lower() == "premul_sum" else reduce_op(op)
        desc = _abi.ReduceDesc(ctypes.sizeof(_abi.ReduceDesc), rop,
                               float(scalar) if scalar is not None else 0.0)
        return self._pair("reduce_scatter_v", input, output, stream, async_op,
                          lib.dlpg_reduce_scatter_v,
                          lambda ip, o: (ip, o, c, d, ctypes.byref(desc)))


class _Batch(object):
    def __init__(self, group):
        self.group = group

    def __enter__(self):
        self.group.group_start()
        return self.group

    def __exit__(self, *exc):
        self.group.group_end()


from .store import Store  # noqa: E402 - Store is only needed at call time; avoids a cycle.
