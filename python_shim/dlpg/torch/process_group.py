"""ProcessGroupDlpg: a torch.distributed process group whose collectives run in libdlpg.

Each torch operation becomes one dlpg call (or a dlpg_group_start/end batch of them) on
tensors exported with to_dlpack; the capsules stay referenced by the Work until the
operation has completed. CUDA tensors run on torch.cuda.current_stream(), so, as with
torch's NCCL backend, Work.wait() orders the caller's current stream and does not block
the host. Forms dlpg has no single call for are built from dlpg calls:
  allgather / reduce_scatter (list forms)  one flat buffer + copies
  gather / scatter / alltoall (list) / alltoall_base with uneven splits
                                           a batch of send/recv (dlpg_group_start/end)
  allreduce_coalesced and *_coalesced       a batch of the single-tensor calls
"""

import ctypes
import types

import torch
from torch.utils.dlpack import to_dlpack

import dlpg
from dlpg import _abi, _dlpack
from dlpg import _work as _dlpg_work
from dlpg import group as _group_mod
from dlpg._abi import DlpgError

from . import _compat
from . import contiguous as _contiguous
from .work import DlpgWork

_c_void_p = ctypes.c_void_p
_get_pointer = _dlpack._get_pointer
_NAME = b"dltensor"

# Internal point-to-point traffic (gather, scatter, alltoall) uses its own tag so it never
# matches a user's send/recv; operations are issued in the same order on every rank.
_INTERNAL_TAG = 0x7FFF0000

def _ptr(t, alive):
    cap = to_dlpack(t.detach() if t.requires_grad else t)
    alive.append(cap)
    return _get_pointer(cap, _NAME)


def _arr(ptrs):
    return (_c_void_p * len(ptrs))(*ptrs)


_arr1 = _c_void_p * 1


def _streams(tensors):
    return _arr([torch.cuda.current_stream(t.device).cuda_stream for t in tensors])


# The current stream of a device as a raw cudaStream_t, without building a Stream object
# (the hot path of a CUDA all_reduce); torch builds without the private getter fall back.
_raw_stream_fn = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _raw_stream(device_index):
    if _raw_stream_fn is not None:
        return _raw_stream_fn(device_index)
    return torch.cuda.current_stream(device_index).cuda_stream


def _red_ops():
    # RedOpType member -> dlpg op, so the common lookup is one dict access.
    table = {}
    for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"):
        m = getattr(getattr(torch.distributed.ReduceOp, "RedOpType", torch.distributed.ReduceOp), name, None)
        if m is not None:
            try:
                table[m] = _compat.dlpg_reduce_op(m)
            except Exception:  # noqa: BLE001 - leave it to the slow path.
                pass
    return table


_RED_OPS = _red_ops()


class ProcessGroupDlpg(_compat.ProcessGroupBase):
    """torch.distributed backend "dlpg" (see dlpg.torch)."""

    def __init__(self, store, rank, size, timeout=None, name="torch"):
        _compat.pg_init(self, rank, size)
        timeout_s = _compat.timeout_seconds(timeout) or 300.0
        self._timeout_s = timeout_s
        self._dstore = dlpg.Store.from_torch_store(store, timeout_s)
        self._group = dlpg.Group(self._dstore, rank, size, timeout=timeout_s, name=name)
        # The group's raw operations: fn(args..., handle=True) -> work handle or None.
        self._fn = types.SimpleNamespace(**{n: self._group._issuer(n)
                                            for n in _group_mod._OPERATIONS})
        self._rank = rank
        self._size = size
        self._coalesced = None  # Works issued since _start_coalescing, else None.
        # send/recv outside a batch are deferred and issued together as one dlpg batch at
        # the next wait/test on any of them or the next other operation, in issue order.
        # dlpg runs a group's operations in order, so an isend followed by an irecv on both
        # ranks (batch_isend_irecv without coalescing, torch 2.x) must not reach it as two
        # separate blocking sends.
        self._pending_p2p = []

    # -- identity ---------------------------------------------------------------------

    def getBackendName(self):
        return "dlpg"

    def _get_backend_name(self):
        return "dlpg"

    @property
    def dlpg_group(self):
        """The underlying dlpg.Group (for direct dlpg calls on the same ranks)."""
        return self._group

    # -- plumbing ---------------------------------------------------------------------

    def _flush_p2p(self):
        pending, self._pending_p2p = self._pending_p2p, []
        if not pending:
            return
        errors = []

        def issue():
            for fn, t, peer, tag, work in pending:
                work._pending = None
                try:
                    work._handles = [self._p2p_now(fn, t, peer, tag, work._alive)]
                except DlpgError as e:
                    work._exc, work._done, work._alive = e, True, None
                    errors.append(e)

        self._batch(issue)
        for _, _, _, _, work in pending:
            if work._cuda and work._exc is None:
                work._stream = torch.cuda.current_stream()
                work._run_post()  # stream-ordered after the send/recv just issued

    def _call(self, fn, *args):
        if self._pending_p2p:
            self._flush_p2p()
        return fn(*args)

    def _work(self, handles, alive, result, post=None, cuda=False, children=None, stream=None):
        _dlpg_work.reap()
        w = DlpgWork(handles, alive, result, post, cuda, children, stream)
        if self._coalesced is not None:
            self._coalesced.append(w)
        return w

    def _coll(self, fn, tensors, outputs, extra, result=None):
        alive = []
        ins = _arr([_ptr(t, alive) for t in tensors])
        outs = _arr([_ptr(t, alive) for t in outputs]) if outputs is not None else None
        if not tensors[0].is_cuda:
            h = self._call(fn, ins, outs, len(tensors), *extra, None)
            return self._work([h], alive, result if result is not None else tensors)
        # CUDA: enqueued on each device's current stream without a dlpg work handle (the
        # torch Work orders streams, it never blocks the host), which saves the handle's
        # event. Memory stays valid as for any torch kernel on that stream. Inside a
        # coalescing batch a handle is still asked for, as dlpg requires there.
        cur = [torch.cuda.current_stream(t.device) for t in tensors]
        streams = _arr([c.cuda_stream for c in cur])
        if self._coalesced is not None:
            h = self._call(fn, ins, outs, len(tensors), *extra, streams)
            handles = [h]
        else:
            if self._pending_p2p:
                self._flush_p2p()
            fn(ins, outs, len(tensors), *extra, streams, handle=False)
            handles = []
        return self._work(handles, alive, result if result is not None else tensors, None,
                          True, stream=cur[0])

    @staticmethod
    def _op(opts):
        if opts is None:
            return _abi.SUM
        red = getattr(opts, "reduceOp", opts)
        op = _RED_OPS.get(getattr(red, "op", red))
        if op is not None:
            return op
        op = _compat.dlpg_reduce_op(red)
        if op is None:
            raise DlpgError(_abi.ERR_UNSUPPORTED, "dlpg: reduce op %r is not supported" % (red,))
        return op

    def _batch(self, issue):
        """Run issue() between dlpg_group_start/end; returns what issue returned."""
        if self._pending_p2p:
            self._flush_p2p()
        self._group.group_start()
        try:
            return issue()
        finally:
            self._group.group_end()

    def _p2p_now(self, fn, t, peer, tag, alive):
        s = torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else None
        return fn(_ptr(t, alive), int(peer), int(tag), s)

    def _p2p(self, fn, t, peer, tag, alive):
        if self._pending_p2p:
            self._flush_p2p()
        return self._p2p_now(fn, t, peer, tag, alive)

    # -- collectives ------------------------------------------------------------------

    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        return self._coll(self._fn.broadcast, tensors, None, (int(root),))

    def allreduce(self, tensors, opts=None):
        # The hot path of DDP and of small all_reduce calls, kept short on purpose.
        if not isinstance(tensors, (list, tuple)):
            tensors = [tensors]
        if self._pending_p2p or len(tensors) != 1:
            return self._coll(self._fn.allreduce, tensors, None, (self._op(opts),))
        t = tensors[0]
        cap = to_dlpack(t.detach() if t.requires_grad else t)
        if t.is_cuda and self._coalesced is None:
            # One CUDA tensor outside a coalescing block: enqueued on the current stream
            # with no dlpg work handle (see _coll), the stream passed raw.
            dev = t.get_device()
            raw = _raw_stream(dev)
            self._fn.allreduce(_arr1(_get_pointer(cap, _NAME)), None, 1, self._op(opts),
                               _arr1(raw), handle=False)
            return DlpgWork([], [cap], tensors, None, True, stream=(raw, dev))
        if t.is_cuda:
            return self._coll(self._fn.allreduce, tensors, None, (self._op(opts),))
        if self._coalesced is None:
            # CPU and not coalescing: run it now with no dlpg work handle. dlpg then runs it
            # on this thread when the group's worker is idle (in order otherwise), which
            # saves two thread hand-offs per call; the returned Work is already complete.
            self._fn.allreduce(_arr1(_get_pointer(cap, _NAME)), None, 1, self._op(opts),
                               None, handle=False)
            return DlpgWork([], [cap], tensors)
        w = self._fn.allreduce(_arr1(_get_pointer(cap, _NAME)), None, 1, self._op(opts), None)
        _dlpg_work.reap()
        work = DlpgWork([w], [cap], tensors)
        if self._coalesced is not None:
            self._coalesced.append(work)
        return work

    def allreduce_coalesced(self, tensors, opts=None):
        op = self._op(opts)
        return self._batch_of(lambda t, alive: self._single(self._fn.allreduce, t, None, (op,), alive),
                              tensors, tensors)

    def _single(self, fn, t, out, extra, alive):
        ins = _arr([_ptr(t, alive)])
        outs = _arr([_ptr(out, alive)]) if out is not None else None
        streams = _streams([t]) if t.is_cuda else None
        return self._call(fn, ins, outs, 1, *extra, streams)

    def _batch_of(self, issue_one, tensors, result, post=None, pairs=None):
        """One Work for a dlpg batch of issue_one(tensor, alive) calls."""
        alive, handles = [], []

        def issue():
            for t in (pairs if pairs is not None else tensors):
                handles.append(issue_one(t, alive))

        self._batch(issue)
        cuda = bool(tensors) and tensors[0].is_cuda
        return self._work(handles, alive, result, post, cuda)

    def reduce(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        return self._coll(self._fn.reduce, tensors, None, (self._op(opts), int(root)))

    def allgather(self, output_tensors, input_tensors, opts=None):
        t = input_tensors[0]
        outs = output_tensors[0]
        flat = torch.empty((self._size * t.numel(),), dtype=t.dtype, device=t.device)
        n = t.numel()

        def post():
            for r, o in enumerate(outs):
                o.copy_(flat[r * n:(r + 1) * n].view_as(o))

        w = self._coll(self._fn.allgather, [t.contiguous()], [flat], (), output_tensors)
        return self._with_post(w, post)

    def _with_post(self, w, post):
        if post is None:
            return w
        if w._cuda:
            post()
        else:
            w._post = post
        return w

    def _allgather_base(self, output, input, opts=None):
        return self._coll(self._fn.allgather, [input], [output], (), [output])

    all_gather_single = _allgather_base

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        flats, alive, handles = [], [], []
        for t in input_list:
            flats.append(torch.empty((self._size * t.numel(),), dtype=t.dtype, device=t.device))

        def issue():
            for t, f in zip(input_list, flats):
                handles.append(self._single(self._fn.allgather, t, f, (), alive))

        def post():
            # output_lists[r][i] receives input i of rank r (Gloo's layout).
            for i, (t, f) in enumerate(zip(input_list, flats)):
                n = t.numel()
                for r, outs in enumerate(output_lists):
                    outs[i].copy_(f[r * n:(r + 1) * n].view_as(outs[i]))

        self._batch(issue)
        w = self._work(handles, alive, output_lists, None, input_list[0].is_cuda)
        return self._with_post(w, post)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return self._batch_of(lambda p, alive: self._single(self._fn.allgather, p[1], p[0], (), alive),
                              inputs, outputs, pairs=list(zip(outputs, inputs)))

    all_gather_single_coalesced = allgather_into_tensor_coalesced

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        out = output_tensors[0]
        flat = torch.cat([x.reshape(-1) for x in input_tensors[0]])
        return self._coll(self._fn.reduce_scatter, [flat], [out], (self._op(opts),),
                          output_tensors)

    def _reduce_scatter_base(self, output, input, opts=None):
        return self._coll(self._fn.reduce_scatter, [input], [output], (self._op(opts),), [output])

    reduce_scatter_single = _reduce_scatter_base

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        op = self._op(opts)
        return self._batch_of(
            lambda p, alive: self._single(self._fn.reduce_scatter, p[1], p[0], (op,), alive),
            inputs, outputs, pairs=list(zip(outputs, inputs)))

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    def gather(self, output_tensors, input_tensors, opts=None):
        root = int(opts.rootRank if opts is not None else 0)
        t = input_tensors[0]
        alive, handles = [], []
        if self._rank != root:
            handles.append(self._p2p(self._fn.send, t.contiguous(), root, _INTERNAL_TAG, alive))
            return self._work(handles, alive, [], None, t.is_cuda)
        outs = output_tensors[0]
        temps = [o if o.is_contiguous() else torch.empty_like(o, memory_format=torch.contiguous_format)
                 for o in outs]

        def issue():
            for r in range(self._size):
                if r != root:
                    handles.append(self._p2p(self._fn.recv, temps[r], r, _INTERNAL_TAG, alive))

        self._batch(issue)
        outs[root].copy_(t)

        def post():
            for o, tmp in zip(outs, temps):
                if o is not tmp:
                    o.copy_(tmp)

        w = self._work(handles, alive, output_tensors, None, t.is_cuda)
        return self._with_post(w, post)

    def scatter(self, output_tensors, input_tensors, opts=None):
        root = int(opts.rootRank if opts is not None else 0)
        out = output_tensors[0]
        alive, handles = [], []
        if self._rank != root:
            tmp = out if out.is_contiguous() else torch.empty_like(out, memory_format=torch.contiguous_format)
            handles.append(self._p2p(self._fn.recv, tmp, root, _INTERNAL_TAG, alive))
            w = self._work(handles, alive, output_tensors, None, out.is_cuda)
            return self._with_post(w, (lambda: out.copy_(tmp)) if tmp is not out else None)
        ins = input_tensors[0]

        def issue():
            for r in range(self._size):
                if r != root:
                    handles.append(self._p2p(self._fn.send, ins[r].contiguous(), r,
                                             _INTERNAL_TAG, alive))

        self._batch(issue)
        out.copy_(ins[root])
        return self._work(handles, alive, output_tensors, None, out.is_cuda)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        osz, isz = list(output_split_sizes or []), list(input_split_sizes or [])
        if not osz and not isz:
            alive = []
            s = torch.cuda.current_stream(input.device).cuda_stream if input.is_cuda else None
            h = self._call(self._fn.alltoall, _ptr(input, alive), _ptr(output, alive), s)
            return self._work([h], alive, [output], None, input.is_cuda)
        if not isz:
            isz = [input.size(0) // self._size] * self._size
        if not osz:
            osz = [output.size(0) // self._size] * self._size
        ins = list(torch.split(input, isz, dim=0))
        outs = list(torch.split(output, osz, dim=0))
        return self._exchange(outs, ins, [output])

    all_to_all_single = alltoall_base

    def alltoall(self, output_tensors, input_tensors, opts=None):
        return self._exchange(list(output_tensors), list(input_tensors), output_tensors)

    def _exchange(self, outs, ins, result):
        """Block j of ins goes to rank j, block i of outs comes from rank i: one batch of
        send/recv; empty pairs are skipped on both sides (the sizes agree by contract)."""
        alive, handles = [], []
        temps = [o if o.is_contiguous() else torch.empty_like(o, memory_format=torch.contiguous_format)
                 for o in outs]
        me = self._rank

        def issue():
            for k in range(1, self._size):
                dst = (me + k) % self._size
                src = (me - k) % self._size
                if ins[dst].numel():
                    handles.append(self._p2p(self._fn.send, ins[dst].contiguous(), dst,
                                             _INTERNAL_TAG, alive))
                if temps[src].numel():
                    handles.append(self._p2p(self._fn.recv, temps[src], src, _INTERNAL_TAG, alive))

        self._batch(issue)
        if outs[me].numel():
            outs[me].copy_(ins[me])

        def post():
            for o, tmp in zip(outs, temps):
                if o is not tmp:
                    o.copy_(tmp)

        cuda = bool(outs) and outs[0].is_cuda
        w = self._work(handles, alive, result, None, cuda)
        return self._with_post(w, post)

    # -- point to point and barrier ---------------------------------------------------

    def _deferred_p2p(self, fn, tensors, peer, tag):
        t = tensors[0]
        if self._coalesced is not None:
            alive = []
            h = self._p2p(fn, t, peer, tag, alive)
            return self._work([h], alive, tensors, None, t.is_cuda)
        _dlpg_work.reap()
        w = DlpgWork([], [], tensors, None, t.is_cuda)
        w._pending = self
        self._pending_p2p.append((fn, t, int(peer), int(tag), w))
        return w

    def send(self, tensors, dst, tag=0):
        return self._deferred_p2p(self._fn.send, tensors, dst, tag)

    def recv(self, tensors, src, tag=0):
        return self._deferred_p2p(self._fn.recv, tensors, src, tag)

    def recv_anysource(self, tensors, tag=0):
        raise DlpgError(_abi.ERR_UNSUPPORTED,
                        "dlpg: recv without a source rank (recv_anysource) is not supported")

    def barrier(self, opts=None):
        h = self._call(self._fn.barrier)
        return self._work([h], None, [], None, False)

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        self.barrier().wait(timeout)

    # -- coalescing (batch_isend_irecv, _coalescing_manager) --------------------------

    def _start_coalescing(self, *args):
        self._group.group_start()
        self._coalesced = []

    def _end_coalescing(self, *args):
        works, self._coalesced = self._coalesced or [], None
        self._group.group_end()
        for w in works:
            if w._cuda:
                w._run_post()  # copies that had to wait for the batch to be issued
        cuda = any(w._cuda for w in works)
        return DlpgWork((), None, [], None, cuda and all(w._cuda for w in works), children=works)

    start_coalescing = _start_coalescing
    end_coalescing = _end_coalescing

    # -- lifetime ---------------------------------------------------------------------

    def abort(self):
        self._group.abort()

    def shutdown(self):
        g, self._group = self._group, None
        if g is not None:
            g.destroy()

    def _set_sequence_number_for_group(self):
        pass


# Every operation (and its aliases) accepts non-contiguous tensors (see contiguous.py).
_contiguous.apply(ProcessGroupDlpg, (
    "broadcast", "allreduce", "allreduce_coalesced", "reduce", "allgather", "_allgather_base",
    "all_gather_single", "allgather_coalesced", "allgather_into_tensor_coalesced",
    "all_gather_single_coalesced", "reduce_scatter", "_reduce_scatter_base",
    "reduce_scatter_single", "reduce_scatter_tensor_coalesced",
    "reduce_scatter_single_coalesced", "gather", "scatter", "alltoall_base", "all_to_all_single",
    "alltoall", "send", "recv"))
