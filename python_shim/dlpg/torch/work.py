"""DlpgWork: the torch Work of the "dlpg" backend, over dlpg work handles.

CPU work waits on its dlpg handles (then runs its post step, e.g. the copies out of a flat
buffer); CUDA work was enqueued on the caller's current stream, so wait() only orders the
caller's current stream after it, as ProcessGroupNCCL does, and never blocks the host.
"""

import collections
import threading

import torch

from dlpg import _abi
from dlpg import _work as _dlpg_work
from dlpg._abi import DlpgError

from . import _compat

# torch 1.13 hands Work objects to C++ callers (DDP, _broadcast_coalesced) as bare
# intrusive pointers; if the Python object died, the trampoline would fall back to the
# base Work, whose wait() never returns. Recent Works are therefore kept referenced here.
_recent = collections.deque(maxlen=1024)


_WorkInit = _compat.WorkBase.__init__


class DlpgWork(_compat.WorkBase):
    """A torch Work over one or more dlpg work handles (or over child Works)."""

    def __init__(self, handles, alive, result, post=None, cuda=False, children=None,
                 stream=None):
        _WorkInit(self)
        self._handles = handles
        self._alive = alive
        self._result = result
        self._post = post
        self._cuda = cuda
        self._children = children
        self._exc = None
        self._done = False
        # A torch Stream, or (raw cudaStream_t, device index) from the all_reduce hot path.
        self._stream = (stream or torch.cuda.current_stream()) if cuda else None
        self._pending = None  # The group whose deferred send/recv this Work is, until flushed.
        if cuda:
            self._run_post()  # Stream-ordered: the copies follow the operation.
        _recent.append(self)

    def _run_post(self):
        post, self._post = self._post, None
        if post is not None:
            post()

    def _flush(self):
        pg = self._pending
        if pg is not None:
            pg._flush_p2p()

    def _finish(self, timeout_s):
        """Wait for every handle; record the first failure. Returns the exception or None."""
        self._flush()
        # No lock: a future's waiter thread and the caller may both get here; waiting twice
        # on a dlpg work is harmless and the post step is taken atomically (under the GIL).
        if self._done:
            return self._exc
        if self._children is not None:
            for c in self._children:
                e = c._finish(timeout_s)
                if e is not None and self._exc is None:
                    self._exc = e
        for h in self._handles:
            e = _dlpg_work.finish(h, timeout_s)
            if e is not None and self._exc is None:
                self._exc = e
        if self._exc is None and not self._cuda:
            try:
                self._run_post()
            except Exception as e:  # noqa: BLE001 - reported through wait().
                self._exc = e
        self._done = True
        self._alive = None
        return self._exc

    def wait(self, timeout=None):
        self._flush()
        if self._cuda and self._exc is None:
            # Order the caller's current stream after the operation, like ProcessGroupNCCL.
            cur = torch.cuda.current_stream()
            s = self._stream
            if isinstance(s, tuple):  # (raw cudaStream_t, device index) from the hot path
                if cur.cuda_stream == s[0]:
                    return True
                s = torch.cuda.ExternalStream(s[0], device=s[1])
            if cur != s:
                ev = torch.cuda.Event()
                ev.record(s)
                cur.wait_event(ev)
            return True
        e = self._finish(_compat.timeout_seconds(timeout))
        if e is not None:
            raise e
        return True

    def synchronize(self):
        self.wait()

    def is_completed(self):
        self._flush()
        if self._done or self._cuda:
            return True
        if not all(_dlpg_work.test(h) for h in self._handles):
            return False
        if self._children is not None and not all(c.is_completed() for c in self._children):
            return False
        self._finish(0.0)
        return True

    def is_success(self):
        return self.is_completed() and self._exc is None

    def exception(self):
        return self._exc

    def result(self):
        return self._result if self._result is not None else []

    def source_rank(self):
        raise DlpgError(_abi.ERR_UNSUPPORTED, "dlpg: recv from any source is not supported")

    def get_future(self):
        self._flush()
        devices = None
        if self._cuda:
            devices = sorted({t.device for t in (self._result or []) if t.is_cuda},
                             key=lambda d: d.index or 0) or [torch.cuda.current_device()]
        fut = _compat.make_future(devices)
        if self._cuda or self._done or self.is_completed():
            self._complete_future(fut)
            return fut

        def waiter():
            self._finish(0.0)
            self._complete_future(fut)

        threading.Thread(target=waiter, name="dlpg-future", daemon=True).start()
        return fut

    def _complete_future(self, fut):
        if self._exc is not None:
            fut.set_exception(self._exc)
        else:
            fut.set_result(self.result())

    def __del__(self):
        handles, self._handles = self._handles, ()
        try:
            # CUDA work is stream-ordered: its memory lives as long as any kernel's would.
            done = self._done or self._cuda
            _dlpg_work.release(handles, None if done else self._alive)
        except Exception:  # noqa: BLE001 - interpreter shutdown.
            pass
