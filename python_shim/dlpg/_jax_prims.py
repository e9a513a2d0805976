"""The JAX primitives behind dlpg.jax and how each keeps the calls of one rank in program
order (see dlpg/jax.py's docstring for the guarantee each mode gives).

Every primitive carries a parameter `mode`:
  "ordered"  the call carries DlpgEffect, an ordered JAX effect. JAX threads an HLO token
             through every such call, through nested jit, loops, cond, custom_vjp and
             shard_map, and across dispatches (its runtime token). The price: a computation
             with an effect never takes JAX's C++ dispatch path.
  "chain"    no JAX effect (so a jitted function dispatches through JAX's C++ fast path).
             The lowering threads a hidden int32 scalar from each custom call's last result
             into the next call's last operand, inside the jitted function's own body; a call
             anywhere else fails to lower, since there no dependency would order it. The
             rules are registered uncacheable, so that each call is lowered in place.
  "unordered-effect"   the chain plus an unordered JAX effect: only for the benchmark, to
             show that any effect, not only an ordered one, keeps JAX off its fast path.
dlpg.jax.init's default picks "chain" or "ordered" per call, by where the call is traced
(auto_mode below): the calls of a jitted function's own body are chained, so a function
with only such calls carries no effect; a call inside a loop, cond, nested jit or
shard_map carries the effect, and so does every later call of the same top-level trace.
The chained calls before the first effectful one are joined to the effect's token by a
"link" custom call (it consumes the chain and the token, does nothing, and yields both),
so the two orders become one.
Custom calls are side-effecting (XLA neither removes nor merges them), and a DCE rule keeps
every call in the jaxpr even when its results are unused.
"""

import functools

import numpy as np

import jax
from jax._src import core as _core
from jax._src import dispatch as _dispatch
from jax._src import effects as _effects
from jax._src.interpreters import ad as _ad
from jax._src.interpreters import mlir as _mlir
from jax._src.interpreters import partial_eval as _pe
from jax._src.lib.mlir import ir as _ir

from . import _abi

MODES = ("ordered", "chain", "unordered-effect")


class DlpgEffect(_effects.Effect):
    """The ordered effect of dlpg calls in mode "ordered": one token chain per program."""

    def __str__(self):
        return "dlpg"


class DlpgUnorderedEffect(_effects.Effect):
    """An unordered effect (benchmark mode "unordered-effect" only)."""

    def __str__(self):
        return "dlpg-unordered"


_effect = DlpgEffect()
_unordered_effect = DlpgUnorderedEffect()
for _set in (_effects.lowerable_effects, _effects.control_flow_allowed_effects,
             _effects.custom_derivatives_allowed_effects,
             getattr(_effects, "remat_allowed_effects", None)):
    if _set is not None:
        _set.add_type(DlpgEffect)
        _set.add_type(DlpgUnorderedEffect)
_effects.ordered_effects.add_type(DlpgEffect)
_effects.shardable_ordered_effects.add_type(DlpgEffect)


def _effects_of(mode):
    if mode == "ordered":
        return {_effect}
    if mode == "unordered-effect":
        return {_unordered_effect}
    return set()


def _ir_type(ctx, aval):
    try:
        return _mlir.aval_to_ir_type(ctx.module_context, aval)
    except TypeError:  # older jax: aval_to_ir_type(aval)
        return _mlir.aval_to_ir_type(aval)


def _layout(aval):
    return tuple(range(len(aval.shape) - 1, -1, -1))


_CHAIN_AVAL = _core.ShapedArray((), np.dtype(np.int32))
_CHAIN_KEY = "dlpg.jax/chain"  # our entry in the module context's per-module dict

NOT_IN_BODY = ("with dlpg.jax.init(..., ordered=False) every dlpg call must sit directly in the "
               "body of the jitted function, not inside a nested jax.jit, a loop (fori_loop, "
               "scan, while_loop), a cond or a shard_map: there nothing keeps it in program "
               "order with the other dlpg calls; use dlpg.jax.init(..., ordered=True) for "
               "such programs (with dlpg.jax.init's default this happens only when a jitted "
               "function first traced on its own is called inside another computation: JAX "
               "reuses that first trace, made without the effect)")


def _in_main_body():
    """Whether ops are being emitted into the jitted function's own body: the entry block of
    the module's "main" function (not a loop or branch region, not another function)."""
    owner = _ir.InsertionPoint.current.block.owner
    op = getattr(owner, "operation", owner)
    return (op.name == "func.func"
            and _ir.StringAttr(op.attributes["sym_name"]).value == "main")


def _chain_in(ctx, target):
    """The chain value the next custom call consumes: the previous call's chain result in
    the jitted function's body, or a fresh constant for the first."""
    try:
        store = ctx.module_context.cached_primitive_lowerings.setdefault(_CHAIN_KEY, {})
        inside = _in_main_body()
    except Exception as e:  # noqa: BLE001 - an MLIR binding without what we read
        raise RuntimeError("%s: cannot tell where this call is lowered (%s: %s); %s"
                           % (target, type(e).__name__, e, NOT_IN_BODY)) from e
    if not inside:
        raise ValueError("%s: %s" % (target, NOT_IN_BODY))
    if store.get("last") is None:
        store["last"] = _mlir.ir_constant(np.zeros((), np.int32))
    return store, store["last"]


# The primitive parameters the handlers read as attributes; the others (world, shape,
# dtype, mode) only shape the results or the lowering.
_ATTRS = ("group", "op", "root", "peer", "tag", "source")
# Tuples of ints the handlers read as int64 array attributes (alltoallv's counts).
_ARRAY_ATTRS = ("send_counts", "send_displs", "recv_counts", "recv_displs")


# ------------------------------------------------------------------ the default mode

class _Top(object):
    """The top-level jit trace the default mode last saw a call in, and what it did there."""
    trace = None      # that DynamicJaxprTrace
    chained = False   # it holds calls ordered by the chain (no effect)
    effectful = False  # a call of it needed the effect: later calls carry it too
    linked = False    # the link from its chain to the effect's token is in it
    pending = False   # an effectful call whose top-level trace was unknown: the next new
                      # top-level trace starts effectful

    def reset(self, trace):
        self.trace, self.chained, self.linked = trace, False, False
        self.effectful, self.pending = self.pending, False


_top = _Top()


def _jaxpr_trace_of(t):
    """The first DynamicJaxprTrace at or below trace t (through JVP, linearize and batching
    traces), or None (eager)."""
    for _ in range(64):
        if t is None or isinstance(t, _pe.DynamicJaxprTrace):
            return t
        t = getattr(t, "parent_trace", None)
    return None


def _traced_for(d):
    info = getattr(getattr(d, "frame", None), "debug_info", None)
    return getattr(info, "traced_for", None)


def auto_mode(group):
    """"chain" or "ordered" for a call on group (its id) bound now (dlpg.jax.init's default).

    Eager: "chain" (JAX runs the call as a one-call computation: its own body). A call in
    the body of a top-level jit trace (a trace made for jit whose parents hold no other
    jaxpr trace): "chain", unless an earlier call of that trace needed the effect. Anything
    else (a loop, cond, nested jit, shard_map, custom_vjp rule, or a trace whose parent is
    unknown): "ordered"; the top-level trace then carries the effect from here on, and its
    chain so far is linked to the token, ahead of the construct being traced."""
    d = _jaxpr_trace_of(_core.trace_ctx.trace)
    if d is None:
        return "chain"
    parent = getattr(d, "parent_trace", None)
    outer = _jaxpr_trace_of(parent)
    if parent is not None and outer is None and _traced_for(d) == "jit":
        if _top.trace is not d:
            _top.reset(d)
        if _top.effectful:
            return "ordered"
        _top.chained = True
        return "chain"
    if parent is None:
        # shard_map's and custom_vjp's inner traces name no parent, so the top-level trace
        # around them is not known: the one seen last gets the link and the effect, and so
        # does the next new one (a later call of a trace not seen yet; at worst a function
        # traced after this one carries the effect without needing it).
        top = _top.trace
        _top.pending = True
    else:
        # The outermost jaxpr trace above is the top-level one; none above: this is eager
        # control flow, a computation of its own that carries the effect by itself.
        top = outer
        while top is not None:
            up = _jaxpr_trace_of(getattr(top, "parent_trace", None))
            if up is None:
                break
            top = up
        if top is None:
            return "ordered"
        if top is not _top.trace:
            _top.reset(top)
    if top is not None:
        if _top.chained and not _top.linked:
            with _core.set_current_trace(top):
                link_p.bind(group=group, mode="ordered")
            _top.linked = True
        _top.effectful = True
    return "ordered"


def _link_lowering(ctx, *, group, mode):
    """The chain so far, then the effect's token: one custom call consuming both."""
    store = ctx.module_context.cached_primitive_lowerings.setdefault(_CHAIN_KEY, {})
    if store.get("last") is None:
        store["last"] = _mlir.ir_constant(np.zeros((), np.int32))
    chain_type = _ir_type(ctx, _CHAIN_AVAL)
    op = _mlir.custom_call(
        "dlpg_link", result_types=[chain_type, _mlir.token_type()],
        operands=[store["last"], ctx.tokens_in.get(_effect)],
        backend_config={"group": _mlir.ir_attribute(np.int64(group))}, has_side_effect=True,
        api_version=4, operand_layouts=[(), ()], result_layouts=[(), ()])
    store["last"], token = op.results
    ctx.set_tokens_out(ctx.tokens_in.update_tokens(_mlir.TokenSet({_effect: token})))
    return []


def _lowering(ctx, *args, target, mode, **params):
    config = {k: _mlir.ir_attribute(np.int64(v)) for k, v in params.items() if k in _ATTRS}
    config.update({k: _ir.DenseI64ArrayAttr.get([int(i) for i in v])
                   for k, v in params.items() if k in _ARRAY_ATTRS})
    if mode == "ordered":
        link, link_type, link_layout = ctx.tokens_in.get(_effect), _mlir.token_type(), ()
    else:
        store, link = _chain_in(ctx, target)
        link_type, link_layout = _ir_type(ctx, _CHAIN_AVAL), ()
    op = _mlir.custom_call(
        target, result_types=[_ir_type(ctx, a) for a in ctx.avals_out] + [link_type],
        operands=list(args) + [link], backend_config=config, has_side_effect=True,
        api_version=4, operand_layouts=[_layout(a) for a in ctx.avals_in] + [link_layout],
        result_layouts=[_layout(a) for a in ctx.avals_out] + [link_layout])
    outs = list(op.results)
    if mode == "ordered":
        ctx.set_tokens_out(ctx.tokens_in.update_tokens(_mlir.TokenSet({_effect: outs.pop()})))
    else:
        store["last"] = outs.pop()
    return outs


def _keep_always(used_outputs, eqn):
    """DCE rule: a collective every rank runs must run even where its result is unused."""
    return [True] * len(eqn.invars), eqn


def _primitive(op, out_aval):
    """A primitive dlpg_<op> whose results are out_aval(*in_avals, **params) (a list)."""
    try:
        from jax.extend.core import Primitive
    except ImportError:  # older jax
        Primitive = _core.Primitive
    p = Primitive("dlpg_" + op)
    p.multiple_results = True
    p.def_impl(functools.partial(_dispatch.apply_primitive, p))
    p.def_effectful_abstract_eval(
        lambda *avals, mode, **params: (out_aval(*avals, **params), _effects_of(mode)))
    rule = functools.partial(_lowering, target="dlpg_" + op)
    try:
        # Not cacheable: JAX would lower one call of each signature into a separate
        # function and reuse it, out of the body where the chain runs.
        _mlir.register_lowering(p, rule, cacheable=False)
    except TypeError:  # older jax: every rule is lowered in place
        _mlir.register_lowering(p, rule)
    _pe.dce_rules[p] = _keep_always
    return p


def _same(x, **_):
    return [_core.ShapedArray(x.shape, x.dtype)]


def _gathered(x, world, **_):
    return [_core.ShapedArray((world,) + tuple(x.shape), x.dtype)]


def _scattered(x, world, **_):
    return [_core.ShapedArray((x.shape[0] // world,) + tuple(x.shape[1:]), x.dtype)]


def _gathered_at_root(x, world, here, **_):
    # Ranks other than root get their input back from dlpg.jax.gather: their output is an
    # empty array that the handler does not hand to dlpg.
    shape = (world,) + tuple(x.shape) if here else (0,)
    return [_core.ShapedArray(shape, x.dtype)]


def _scattered_from_root(x, world, here, **_):
    # Root's x holds world blocks on axis 0; the others pass the block's shape as x.
    return [_core.ShapedArray(tuple(x.shape[1:]) if here else tuple(x.shape), x.dtype)]


def _rows(x, rows, **_):
    return [_core.ShapedArray((rows,) + tuple(x.shape[1:]), x.dtype)]


def _nothing(x, **_):
    return []


def _received(*_x, shape, dtype, **_):
    return [_core.ShapedArray(shape, dtype)]


allreduce_p = _primitive("allreduce", _same)
reduce_p = _primitive("reduce", _same)
allgather_p = _primitive("allgather", _gathered)
reduce_scatter_p = _primitive("reduce_scatter", _scattered)
broadcast_p = _primitive("broadcast", _same)
alltoall_p = _primitive("alltoall", _same)
send_p = _primitive("send", _nothing)
recv_p = _primitive("recv", _received)
sendrecv_p = _primitive("sendrecv", _received)
gather_p = _primitive("gather", _gathered_at_root)
scatter_p = _primitive("scatter", _scattered_from_root)
alltoallv_p = _primitive("alltoallv", _rows)
link_p = _primitive("link", lambda **_: [])
try:
    _mlir.register_lowering(link_p, _link_lowering, cacheable=False)
except TypeError:  # older jax
    _mlir.register_lowering(link_p, _link_lowering)


# ------------------------------------------------------------------ differentiation

# Mode "ordered": a custom_vjp around the primitive (JAX differentiates effectful calls
# through custom_vjp). Its DCE drops the whole call when the result is unused, which the
# ordered effect prevents; without an effect it would not, so the other modes give the
# primitive itself linear JVP and transpose rules instead.

@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def allreduce_sum_ordered(x, gid):
    return allreduce_p.bind(x, group=gid, op=int(_abi.SUM), mode="ordered")[0]


def _sum_fwd(x, gid):
    return allreduce_sum_ordered(x, gid), None


def _sum_bwd(gid, _res, ct):
    # d(sum_r x_r)/dx_s = 1 for every rank's output: the cotangent of rank s's input is
    # the sum of every rank's output cotangent, an allreduce of the cotangents.
    return (allreduce_p.bind(ct, group=gid, op=int(_abi.SUM), mode="ordered")[0],)


allreduce_sum_ordered.defvjp(_sum_fwd, _sum_bwd)


def _allreduce_jvp(primals, tangents, **params):
    if params["op"] != int(_abi.SUM):
        raise NotImplementedError("dlpg.jax.allreduce: only op=\"sum\" is differentiable")
    return _ad.linear_jvp(allreduce_p, primals, tangents, **params)


AUTO = [False]  # dlpg.jax.init's default mode is on: the transpose decides its own mode


def _allreduce_transpose(cts, x, **params):
    # Zeros are instantiated: every rank must run the same collectives. In the default mode
    # the backward call is placed where it is bound now (the forward call's place may have
    # been the chain of a trace that has since become effectful).
    if AUTO[0] and params["mode"] != "ordered":
        params = dict(params, mode=auto_mode(params["group"]))
    return [allreduce_p.bind(_ad.instantiate_zeros(cts[0]), **params)[0]]


_ad.primitive_jvps[allreduce_p] = _allreduce_jvp
_ad.primitive_transposes[allreduce_p] = functools.partial(_ad.linear_transpose2,
                                                          _allreduce_transpose)
