"""Non-contiguous tensors for the Python backend, as Gloo accepts them: each operation gets
contiguous copies of its non-contiguous tensor arguments, and the copies are written back
into the caller's tensors once the operation has completed (CUDA: right after it, on the
same stream). libdlpg itself only takes compact row-major tensors."""

import functools

import torch

_Tensor = torch.Tensor


def _swap(x, pairs):
    if isinstance(x, _Tensor):
        if x.is_contiguous():
            return x
        c = x.contiguous()
        pairs.append((x, c))
        return c
    if isinstance(x, list):
        return [_swap(e, pairs) for e in x]
    return x


def _after(work, fn, batched):
    """Run fn once work's operation is done: now for enqueued CUDA work, else as the last
    post step (DlpgWork runs it at completion; for deferred send/recv after the flush, and
    inside a coalescing block at its end, when the batch is issued)."""
    if work._cuda and work._pending is None and work._post is None and not batched:
        fn()
        return
    prev = work._post

    def post():
        if prev is not None:
            prev()
        fn()
    work._post = post


def contiguous_io(method):
    """Wrap a ProcessGroupDlpg operation so that it accepts non-contiguous tensors."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        pairs = []
        args = [_swap(a, pairs) for a in args]
        work = method(self, *args, **kwargs)
        if not pairs:
            return work
        originals = {id(c): o for o, c in pairs}
        if isinstance(work._result, list):
            work._result = [originals.get(id(t), t) if not isinstance(t, list) else
                            [originals.get(id(e), e) for e in t] for t in work._result]

        def copy_back():
            for o, c in pairs:
                o.copy_(c)
        _after(work, copy_back, self._coalesced is not None)
        return work
    return wrapper


def apply(cls, names):
    for name in names:
        setattr(cls, name, contiguous_io(getattr(cls, name)))
