"""jax.vmap rules of dlpg.jax's primitives: a batched call is one custom call on the
stacked array, whose result equals a loop of unbatched calls stacked along the result's
batch axis.

- allreduce, broadcast, reduce: element-wise across ranks, so the batch axis passes through.
- allgather, gather: the batch axis goes first; the result (world, batch, ...) carries it
  as axis 1.
- reduce_scatter, alltoall, alltoallv, scatter (on root): they split axis 0 into blocks per
  rank, so the batch axis goes second: each rank's block then holds that block of every
  example, and the result carries the batch axis as axis 1 (scatter's block: axis 0).
- send, sendrecv: the stacked array travels as one message, batch axis first; a receiving
  recv (which has no batched operand, so JAX never batches it) asks for that shape, and a
  sendrecv's peer batches alike.
"""

from jax._src.interpreters import batching as _batching

from . import _jax_prims as _prims


def _moved(x, d, to):
    return _batching.moveaxis(x, d, to)


def _elementwise(p):
    def rule(args, dims, **params):
        return p.bind(args[0], **params), [dims[0]]
    return rule


def _batch_first(p):
    def rule(args, dims, **params):
        return p.bind(_moved(args[0], dims[0], 0), **params), [1]
    return rule


def _batch_second(p):
    def rule(args, dims, **params):
        return p.bind(_moved(args[0], dims[0], 1), **params), [1]
    return rule


def _send(args, dims, **params):
    return _prims.send_p.bind(_moved(args[0], dims[0], 0), **params), []


def _sendrecv(args, dims, shape, **params):
    x = _moved(args[0], dims[0], 0)
    out = _prims.sendrecv_p.bind(x, shape=(x.shape[0],) + tuple(shape), **params)
    return out, [0]


def _gather(args, dims, here, **params):
    out = _prims.gather_p.bind(_moved(args[0], dims[0], 0), here=here, **params)
    return out, [1 if here else None]  # elsewhere: an empty array nobody reads


def _scatter(args, dims, here, **params):
    # Root: (world, batch, ...) -> a block (batch, ...); elsewhere the block's shape: batch
    # first, as the block root sends.
    x = _moved(args[0], dims[0], 1 if here else 0)
    return _prims.scatter_p.bind(x, here=here, **params), [0]


_RULES = {
    _prims.allreduce_p: _elementwise(_prims.allreduce_p),
    _prims.broadcast_p: _elementwise(_prims.broadcast_p),
    _prims.reduce_p: _elementwise(_prims.reduce_p),
    _prims.allgather_p: _batch_first(_prims.allgather_p),
    _prims.reduce_scatter_p: _batch_second(_prims.reduce_scatter_p),
    _prims.alltoall_p: _batch_second(_prims.alltoall_p),
    _prims.alltoallv_p: _batch_second(_prims.alltoallv_p),
    _prims.send_p: _send,
    _prims.sendrecv_p: _sendrecv,
    _prims.gather_p: _gather,
    _prims.scatter_p: _scatter,
}
for _p, _rule in _RULES.items():
    _batching.primitive_batchers[_p] = _rule
