"""dlpg.jax: dlpg collectives inside jax.jit, as XLA FFI custom calls.

    import jax, dlpg.jax as dj
    dj.init()                                   # jax.distributed's store, else the launcher's
    dj.init("tcp://10.0.0.1:29600", rank=r, world_size=n)   # or over a dlpg store URL

    @jax.jit
    def step(x):
        return dj.allreduce(x, op="sum")        # also reduce, allgather, gather,
                                                # reduce_scatter, broadcast, scatter,
                                                # alltoall, alltoallv, send, recv,
                                                # sendrecv, barrier
Every call takes group=: None for init's group, else a dlpg.jax group (from_group(g) for a
dlpg.Group g, split(color, key) for a child); calls on several groups share the one program
order below. jax.vmap batches every call into one call on the stacked array
(python_shim/dlpg/_jax_batching.py says how each moves the batch axis).
The handlers live in libdlpg_xla.so (plugin/xla), found through DLPG_XLA_LIBRARY, then
beside libdlpg.so, then the repository's build*/ folders. On CUDA they are enqueued on the
stream XLA hands over and write into XLA's output buffer; on the CPU platform they run
dlpg's CPU path (shared memory when every rank runs on one host, else Gloo). One device per
process: inside shard_map, each process must own one device of the mesh. A dlpg error fails the computation with an exception carrying dlpg's
message.

Program order. Collectives must be issued in the same order on every rank; XLA is free to
reorder side-effecting custom calls that no data dependency orders, which for ranks running
different programs (send on one, recv on the other) is a deadlock. dj.init's `ordered`:

- None, the default: chosen per call by where it is traced, so that each computation gets
  the cheapest order that holds. The calls of a jitted function's own body (including what
  jax.grad adds there) are ordered by the hidden chain below and carry no JAX effect: a
  computation holding only such calls takes JAX's C++ dispatch path. A call inside a loop
  (fori_loop, scan, while_loop), a cond, a nested jax.jit, a shard_map or a custom_vjp rule
  carries the ordered effect, as with ordered=True, and so does every later call of the
  same jitted function; the chained calls before it are joined to the effect's token, so
  every call of the computation runs in program order either way. One case is refused at
  compile time with a message: a jitted function first traced on its own (chained), then
  called inside a loop, cond or another jit, where JAX reuses that first trace; pass
  ordered=True for programs that do this.
- True: every call carries an ordered JAX effect, as mpi4jax does. JAX threads a token
  through every dlpg call of a computation, through nested jit, loops, cond, custom_vjp and
  shard_map, and from one dispatched computation to the next. Every call runs in program
  order, wherever it sits. Cost: a computation with any JAX effect is dispatched by JAX's
  Python path, which also moves the effect's runtime token (about 0.3-0.6 ms per dispatch
  on an H200 host; bench/results).
- False: no JAX effect anywhere, so a jitted function dispatches through JAX's C++ fast
  path. Within one computation each custom call consumes the previous one's hidden int32
  result, so XLA keeps them in program order; this holds only for calls directly in the
  body of the jitted function (including what jax.grad adds there): a call inside a nested
  jax.jit, a loop, a cond or a shard_map fails to compile with a message that names
  ordered=True (a nested function that JAX drops because none of its results is used is
  not seen and not run).

Between computations without the effect, the order of dispatch is the order of execution,
per device: XLA's GPU client launches a device's computations one after the other on one
stream, and its CPU client runs the computations of a device one after the other (each
waits for the last enqueued one). This holds for one device per process and dispatch from
one Python thread, which dlpg.jax assumes anyway.

Every mode keeps a call whose results are unused (JAX's dead-code elimination is told not to
drop it; XLA keeps side-effecting custom calls).
"""

import datetime
import glob
import os
import threading

import numpy as np

import jax
import jax.numpy as jnp

from . import _abi
from . import _jax_batching  # noqa: F401 - registers the vmap rules of the primitives
from . import _jax_prims as _prims
from ._jax_group import JaxGroup
from .group import Group, reduce_op
from .store import Store

__all__ = ["init", "finalize", "group", "rank", "world_size", "ordered", "allreduce",
           "reduce", "allgather", "gather", "reduce_scatter", "broadcast", "scatter",
           "alltoall", "send", "recv", "sendrecv", "barrier", "library_path", "from_group",
           "split", "JaxGroup"]

# The custom-call targets of libdlpg_xla.so; barrier is an allreduce, and gather and scatter
# are composed of send and recv where libdlpg lacks dlpg_gather and dlpg_scatter.
_OPS = ("allreduce", "reduce", "allgather", "reduce_scatter", "broadcast", "alltoall", "send",
        "recv", "sendrecv", "gather", "scatter", "alltoallv", "link")


class _State(object):
    lib = None          # ctypes.CDLL of libdlpg_xla.so, once loaded
    lib_path = None
    jgroup = None       # the JaxGroup of init(): its dlpg.Group, its id in libdlpg_xla's
                        # table (what compiled calls carry), whether init made the group
    mode = "auto"       # "auto" (chosen per call) or one of _jax_prims.MODES


_state = _State()
_lock = threading.Lock()


# ------------------------------------------------------------------ the handler library

def _candidates():
    env = os.environ.get("DLPG_XLA_LIBRARY")
    if env:
        yield env
    try:
        yield os.path.join(os.path.dirname(os.path.realpath(_abi.library_path())),
                           "libdlpg_xla.so")
    except Exception:  # noqa: BLE001 - libdlpg itself missing: reported by its own loader.
        pass
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for p in sorted(glob.glob(os.path.join(repo, "build*", "libdlpg_xla.so"))):
        yield p


def library_path():
    """The libdlpg_xla.so this process uses (loading it if needed)."""
    _load()
    return _state.lib_path


def _load():
    if _state.lib is not None:
        return _state.lib
    import ctypes
    tried = []
    for path in _candidates():
        if not os.path.exists(path):
            tried.append("%s (missing)" % path)
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        lib.dlpg_xla_load.argtypes = [ctypes.c_char_p]
        lib.dlpg_xla_load.restype = ctypes.c_int
        lib.dlpg_xla_group_register.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)]
        lib.dlpg_xla_group_register.restype = ctypes.c_int
        lib.dlpg_xla_group_unregister.argtypes = [ctypes.c_int64]
        lib.dlpg_xla_group_unregister.restype = ctypes.c_int
        lib.dlpg_xla_last_error.restype = ctypes.c_char_p
        lib.dlpg_xla_build_info.restype = ctypes.c_char_p
        _check(lib, lib.dlpg_xla_load(os.path.realpath(_abi.library_path()).encode()))
        _register_targets(lib)
        _state.lib, _state.lib_path = lib, path
        return lib
    raise _abi.DlpgError(_abi.ERR_UNSUPPORTED,
                         "dlpg.jax: libdlpg_xla.so not found (build dlpg where jaxlib's FFI "
                         "headers are, or set DLPG_XLA_LIBRARY); tried: " + "; ".join(tried))


def _check(lib, status):
    if status != _abi.OK:
        raise _abi.DlpgError(status, lib.dlpg_xla_last_error().decode("utf-8", "replace"))


def _register_targets(lib):
    for op in _OPS:
        for platform, suffix in (("cpu", "cpu"), ("CUDA", "cuda")):
            fn = getattr(lib, "dlpg_xla_%s_%s" % (op, suffix))
            jax.ffi.register_ffi_target("dlpg_" + op, jax.ffi.pycapsule(fn), platform=platform)


def build_info():
    """What libdlpg_xla.so was compiled with (FFI header version, device ordinal support)."""
    return _load().dlpg_xla_build_info().decode()


# ------------------------------------------------------------------ rendezvous

class _JaxKeyValueStore(object):
    """jax.distributed's key-value client as a dlpg host store (Store.from_host_store)."""

    def __init__(self, client, prefix):
        self.client = client
        self.prefix = prefix

    def _k(self, key):
        return self.prefix + key

    def set(self, key, value):
        value = value if isinstance(value, bytes) else bytes(value, "utf-8")
        try:
            self.client.key_value_set_bytes(self._k(key), value, allow_overwrite=True)
        except TypeError:  # older jaxlib without allow_overwrite
            self.client.key_value_set_bytes(self._k(key), value)

    def get(self, key):
        return bytes(self.client.key_value_try_get_bytes(self._k(key)))

    def wait(self, keys, timeout=None):
        seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else 300.0
        for k in keys:
            try:
                self.client.blocking_key_value_get_bytes(self._k(k), max(1, int(seconds * 1000)))
            except Exception as e:  # noqa: BLE001 - the dlpg callback maps "timed out"
                raise TimeoutError("dlpg.jax: key %r timed out after %gs in jax.distributed's "
                                   "key-value store (%s)" % (k, seconds, e))

    def add(self, key, delta):
        return int(self.client.key_value_increment(self._k(key), int(delta)))

    def check(self, keys):
        for k in keys:
            try:
                self.client.key_value_try_get_bytes(self._k(k))
            except Exception:  # noqa: BLE001 - absent key
                return False
        return True

    def delete_key(self, key):
        self.client.key_value_delete(self._k(key))
        return True


def _distributed_client():
    try:
        from jax._src import distributed
        return distributed.global_state.client
    except Exception:  # noqa: BLE001 - a jax without jax.distributed
        return None


def init(store=None, rank=None, world_size=None, name=None, timeout=300.0, group=None,
         ordered=None):
    """Create (or adopt) the dlpg group the jitted functions use; returns the dlpg.Group.

    store: None (jax.distributed's key-value store when jax.distributed is initialised;
    rank and world_size default to jax.process_index() and jax.process_count(); else, with
    no rank and world_size either, the job of the launcher that started this process:
    torchrun, Open MPI's mpirun, MPICH's mpiexec or Slurm's srun, as dlpg.Group.from_env),
    a dlpg
    store URL ("tcp://HOST:PORT", "tcp://HOST:PORT?serve=1" on one rank, "file:///PATH",
    "env://") or a dlpg.Store. name: the dlpg group name (every rank passes the same; ranks
    of other frameworks join by using the same store and name). group: an existing
    dlpg.Group to use instead of creating one. ordered: None (the default) chooses per call:
    no JAX effect for the calls of a jitted function's own body (JAX's C++ dispatch path),
    the ordered effect for calls inside loops, cond, nested jit or shard_map; True orders
    every call through an ordered JAX effect; False drops the effect everywhere, with the
    narrower guarantee of the module docstring ("Program order").
    """
    if ordered is not None and not isinstance(ordered, bool):
        raise TypeError("dlpg.jax.init: ordered must be None, True or False (got %r)"
                        % (ordered,))
    lib = _load()
    with _lock:
        if _state.jgroup is not None:
            raise _abi.DlpgError(_abi.ERR_INVALID_ARGUMENT,
                                 "dlpg.jax.init: already initialised (call dlpg.jax.finalize() "
                                 "first)")
        owns = group is None
        if group is None:
            client = _distributed_client() if store is None else None
            if store is None and client is None and rank is None and world_size is None:
                # The launcher's job (torchrun, mpirun, mpiexec, srun): dlpg finds it.
                try:
                    group = Group.from_env(timeout=timeout, name=name)
                except _abi.DlpgError as e:
                    raise _abi.DlpgError(e.status,
                                         "dlpg.jax.init: no store given, jax.distributed is "
                                         "not initialised, and no launcher's job was found "
                                         "(pass a dlpg store URL such as tcp://HOST:PORT with "
                                         "rank and world_size): " + e.message)
            elif store is None:
                if client is None:
                    raise _abi.DlpgError(_abi.ERR_INVALID_ARGUMENT,
                                         "dlpg.jax.init: no store given and jax.distributed is "
                                         "not initialised; pass a dlpg store URL such as "
                                         "tcp://HOST:PORT with rank and world_size")
                rank = jax.process_index() if rank is None else rank
                world_size = jax.process_count() if world_size is None else world_size
                store = Store.from_host_store(
                    _JaxKeyValueStore(client, "dlpg/%s/" % (name or "dlpg")), timeout)
            elif isinstance(store, str):
                store = Store(store, timeout)
            if group is None and (rank is None or world_size is None):
                raise _abi.DlpgError(_abi.ERR_INVALID_ARGUMENT,
                                     "dlpg.jax.init: rank and world_size are required with a "
                                     "store (got rank=%r, world_size=%r)" % (rank, world_size))
            if group is None:
                group = Group(store, int(rank), int(world_size), timeout=timeout, name=name)
        _state.jgroup = JaxGroup(lib, group, owns)
        _state.mode = "auto" if ordered is None else "ordered" if ordered else "chain"
        _prims.AUTO[0] = _state.mode == "auto"
        return group


def finalize():
    """Unregister the group (computations compiled for it then fail with a message) and
    destroy it if init created it. JAX's caches are cleared too, so that a jitted function
    called after a later init is traced again for the new group and its ordering mode."""
    with _lock:
        jg, _state.jgroup = _state.jgroup, None
    if jg is None:
        return
    # A trace holds the group id and the ordering mode as constants, and JAX reuses it for
    # the same function and argument types (jax.jit(dj.allreduce) after a new init too):
    # without this, such a call would run on the finalized group, or without the effect
    # that the new init's ordered=True asks for.
    jax.clear_caches()
    jg.free()  # destroys the group if init made it


def _default():
    jg = _state.jgroup
    if jg is None:
        raise _abi.DlpgError(_abi.ERR_INVALID_ARGUMENT,
                             "dlpg.jax: not initialised (call dlpg.jax.init first)")
    return jg


def group():
    """The dlpg.Group of init (the group of calls made with group=None)."""
    return _default().group


def from_group(g):
    """A dlpg.jax group for an existing dlpg.Group g, for the group= argument of every call.
    g stays the caller's: keep it alive, and destroy it only after freeing what this returns
    (its free() or `with`); a computation compiled for a freed group fails with a message.
    dlpg.jax.init must have been called (it fixes the ordering mode every group shares)."""
    if not isinstance(g, Group):
        raise TypeError("dlpg.jax.from_group: g must be a dlpg.Group (got %s)"
                        % type(g).__name__)
    _default()
    return JaxGroup(_load(), g, owns=False)


def split(color, key=None, group=None, name=None, timeout=None):
    """Split group (None: init's) as dlpg.Group.split / MPI_Comm_split: ranks passing the same
    color >= 0 form one child, ordered by key (default: the rank), then by rank; returns a
    dlpg.jax group on the child (it owns the child: its free() destroys it), or None for a
    negative color. Collective over the parent: every rank of it calls split, in the same
    order, outside jit."""
    parent = _resolve(group, "split")
    if not hasattr(parent.group, "split"):
        raise _abi.DlpgError(_abi.ERR_UNSUPPORTED,
                             "dlpg.jax.split: this dlpg's Group has no split (dlpg_group_split "
                             "is not available)")
    kw = {k: v for k, v in (("key", key), ("name", name), ("timeout", timeout))
          if v is not None}
    child = parent.group.split(int(color), **kw)
    if child is None:
        return None
    try:
        return JaxGroup(_load(), child, owns=True)
    except BaseException:
        child.destroy()
        raise


def _resolve(group, what):
    """The JaxGroup a call named what runs on (group=None: init's)."""
    if group is None:
        return _default()
    if isinstance(group, JaxGroup):
        group.check_live(what)
        return group
    jg = _state.jgroup
    if isinstance(group, Group) and jg is not None and group is jg.group:
        return jg
    raise TypeError("dlpg.jax.%s: group must be None (dlpg.jax.init's group) or a dlpg.jax "
                    "group (dlpg.jax.from_group(g) for a dlpg.Group g, or dlpg.jax.split); "
                    "got %s" % (what, type(group).__name__))


def ordered():
    """dlpg.jax.init's ordered: None (chosen per call, the default), True or False."""
    _default()
    return None if _state.mode == "auto" else _state.mode == "ordered"


def _set_mode(mode):
    """Benchmark use only: one of _jax_prims.MODES for the calls traced from now on."""
    if mode not in _prims.MODES + ("auto",):
        raise ValueError("dlpg.jax._set_mode: mode must be one of %s (got %r)"
                         % (_prims.MODES + ("auto",), mode))
    _state.mode = mode
    _prims.AUTO[0] = mode == "auto"


def rank(group=None):
    return _resolve(group, "rank").rank


def world_size(group=None):
    return _resolve(group, "world_size").size


# ------------------------------------------------------------------ primitives

def _common(jg):
    """The parameters every call on JaxGroup jg carries: its id and the ordering mode (the
    default mode decides here, where the call is traced; one mode for every group)."""
    _default()  # raises when not initialised
    mode = _prims.auto_mode(jg.gid) if _state.mode == "auto" else _state.mode
    return {"group": jg.gid, "mode": mode}


def _world_params(jg):
    return dict(_common(jg), world=jg.size)


# ------------------------------------------------------------------ public functions
#
# Every call takes group=: None for dlpg.jax.init's group, else a dlpg.jax group (from_group,
# split). Sizes, ranks and roots are checked against that group; the call carries its id.

def _arr(x, what):
    return jnp.asarray(x)


def _reduction(x, op, scalar, what):
    """(array, op code) for a reducing call. premul_sum is x * scalar in x's dtype, then a
    sum: written in JAX, the multiply fuses with what produced x under jit."""
    code = int(reduce_op(op))
    if code == _abi.PREMUL_SUM:
        if scalar is None:
            raise ValueError("dlpg.jax.%s: op premul_sum needs scalar= (the factor each rank's "
                             "x is multiplied by before the sum)" % what)
        return x * jnp.asarray(scalar, dtype=x.dtype), int(_abi.SUM)
    if scalar is not None:
        raise ValueError("dlpg.jax.%s: scalar= is only for op premul_sum (got op %r)" % (what, op))
    return x, code


def allreduce(x, op="sum", group=None, scalar=None):
    """Element-wise reduction over every rank ("sum", "prod", "min", "max", "avg",
    "premul_sum" with scalar=; bitwise on CPU; complex arrays with sum, avg and premul_sum).
    Differentiable for "sum" (the transpose is itself)."""
    jg = _resolve(group, "allreduce")
    x, code = _reduction(_arr(x, "allreduce"), op, scalar, "allreduce")
    params = _common(jg)
    if code == _abi.SUM and params["mode"] == "ordered":
        return _prims.allreduce_sum_ordered(x, params["group"])
    return _prims.allreduce_p.bind(x, op=code, **params)[0]


def allgather(x, group=None):
    """Every rank's x stacked rank-major: shape (world_size,) + x.shape."""
    jg = _resolve(group, "allgather")
    return _prims.allgather_p.bind(_arr(x, "allgather"), **_world_params(jg))[0]


def _blocks(x, what, jg):
    if x.ndim == 0 or x.shape[0] % jg.size != 0:
        raise ValueError("dlpg.jax.%s: the first dimension of x (shape %s) must be a multiple "
                         "of world_size %d" % (what, tuple(x.shape), jg.size))


def reduce_scatter(x, op="sum", group=None, scalar=None):
    """x holds world_size blocks along axis 0; rank r gets the reduction of block r (ops as
    for allreduce)."""
    jg = _resolve(group, "reduce_scatter")
    x, code = _reduction(_arr(x, "reduce_scatter"), op, scalar, "reduce_scatter")
    _blocks(x, "reduce_scatter", jg)
    return _prims.reduce_scatter_p.bind(x, op=code, **_world_params(jg))[0]


def broadcast(x, root=0, group=None):
    """Rank root's x on every rank."""
    jg = _resolve(group, "broadcast")
    x = _arr(x, "broadcast")
    _peer(root, "broadcast", "root", jg)
    return _prims.broadcast_p.bind(x, root=int(root), **_common(jg))[0]


def alltoall(x, group=None):
    """x holds world_size blocks along axis 0; block j goes to rank j, block i of the result
    came from rank i."""
    jg = _resolve(group, "alltoall")
    x = _arr(x, "alltoall")
    _blocks(x, "alltoall", jg)
    return _prims.alltoall_p.bind(x, **_world_params(jg))[0]


def _peer(peer, what, arg, jg):
    if not 0 <= int(peer) < jg.size:
        raise ValueError("dlpg.jax.%s: %s is %d but world_size is %d" % (what, arg, peer,
                                                                          jg.size))


def send(x, dest, tag=0, group=None):
    """Send x to rank dest (returns nothing; ordered with every other dlpg call). Under
    jax.vmap the stacked array goes as one message, batch axis first."""
    jg = _resolve(group, "send")
    x = _arr(x, "send")
    _peer(dest, "send", "dest", jg)
    _prims.send_p.bind(x, peer=int(dest), tag=int(tag), **_common(jg))


def recv(like, source, tag=0, group=None):
    """Receive from rank source an array shaped like `like` (an array or a
    jax.ShapeDtypeStruct)."""
    jg = _resolve(group, "recv")
    _peer(source, "recv", "source", jg)
    shape = tuple(int(d) for d in like.shape)
    return _prims.recv_p.bind(shape=shape, dtype=np.dtype(like.dtype), peer=int(source),
                              tag=int(tag), **_common(jg))[0]


def reduce(x, op="sum", root=0, group=None, scalar=None):
    """The reduction of every rank's x on rank root (ops as for allreduce); every other rank
    gets its x back unchanged (as mpi4jax's reduce)."""
    jg = _resolve(group, "reduce")
    x = _arr(x, "reduce")
    xr, code = _reduction(x, op, scalar, "reduce")
    _peer(root, "reduce", "root", jg)
    y = _prims.reduce_p.bind(xr, op=code, root=int(root), **_common(jg))[0]
    # The call runs on every rank (it is kept even where its result is unused); only root's
    # output is written.
    return y if jg.rank == int(root) else x


def gather(x, root=0, group=None):
    """Every rank's x stacked rank-major on rank root (shape (world_size,) + x.shape); every
    other rank gets its x back unchanged. One dlpg_gather call where libdlpg implements it,
    else composed of send and recv (root receives from each rank in rank order, each other
    rank sends once; that form is not batched by jax.vmap)."""
    jg = _resolve(group, "gather")
    x = _arr(x, "gather")
    _peer(root, "gather", "root", jg)
    root, me = int(root), jg.rank
    if _has("gather"):
        y = _prims.gather_p.bind(x, root=root, here=me == root, **_world_params(jg))[0]
        return y if me == root else x
    if me != root:
        send(x, root, group=jg)
        return x
    like = jax.ShapeDtypeStruct(x.shape, x.dtype)
    parts = [x if r == root else recv(like, r, group=jg) for r in range(jg.size)]
    return jnp.stack(parts)


def scatter(x, root=0, group=None):
    """Block r of root's x (shape (world_size,) + s) on rank r. On root, x holds the blocks;
    on every other rank x is only the shape and dtype of the block it receives (an array or
    a jax.ShapeDtypeStruct of shape s), as mpi4jax's scatter. One dlpg_scatter call where
    libdlpg implements it (under jax.vmap, pass every rank an array batched alike), else
    composed of send and recv."""
    jg = _resolve(group, "scatter")
    _peer(root, "scatter", "root", jg)
    root, me, world = int(root), jg.rank, jg.size
    if me == root:
        x = _arr(x, "scatter")
        if x.ndim == 0 or x.shape[0] != world:
            raise ValueError("dlpg.jax.scatter: on root (rank %d) x must have shape "
                             "(world_size,) + the block's shape, with world_size %d (got "
                             "shape %s)" % (root, world, tuple(x.shape)))
    if _has("scatter"):
        if me != root:
            # The block's shape travels as this operand (batched under vmap like root's);
            # its values are not read.
            if isinstance(x, jax.ShapeDtypeStruct):
                x = jnp.zeros(x.shape, x.dtype)
            x = _arr(x, "scatter")
        return _prims.scatter_p.bind(x, root=root, here=me == root, **_world_params(jg))[0]
    if me != root:
        return recv(x, root, group=jg)
    for r in range(world):
        if r != root:
            send(x[r], r, group=jg)
    return x[root]


def sendrecv(x, like, source, dest, tag=0, group=None):
    """Send x to rank dest and receive from rank source an array shaped like `like` (an
    array or a jax.ShapeDtypeStruct), in one call: both transfers are issued together, so a
    ring (every rank sending to rank+1 and receiving from rank-1) cannot deadlock. The
    message's tag is `tag` both ways; source and dest may be this rank. Under jax.vmap both
    directions carry the stacked arrays (batch axis first): the peers batch alike."""
    jg = _resolve(group, "sendrecv")
    x = _arr(x, "sendrecv")
    _peer(source, "sendrecv", "source", jg)
    _peer(dest, "sendrecv", "dest", jg)
    shape = tuple(int(d) for d in like.shape)
    return _prims.sendrecv_p.bind(x, shape=shape, dtype=np.dtype(like.dtype), peer=int(dest),
                                  source=int(source), tag=int(tag), **_common(jg))[0]


def alltoallv(x, send_counts, recv_counts, send_displs=None, recv_displs=None, group=None):
    """Uneven all-to-all along axis 0 with static counts (Python sequences of world_size
    ints, in rows of axis 0): x[send_displs[j]:send_displs[j] + send_counts[j]] goes to rank
    j, which places it at recv_displs[i] of its result, for this rank i. Displacements None:
    packed in rank order. The result has shape (max(recv_displs[i] + recv_counts[i]),) +
    x.shape[1:]; rows no rank writes are undefined. Rank j's recv_counts[i] must equal rank
    i's send_counts[j]."""
    jg = _resolve(group, "alltoallv")
    x = _arr(x, "alltoallv")
    if x.ndim == 0:
        raise ValueError("dlpg.jax.alltoallv: x must have at least one dimension (got a "
                         "scalar)")
    sc = _counts(send_counts, "send_counts", jg)
    rc = _counts(recv_counts, "recv_counts", jg)
    sd = _displs(send_displs, sc, "send_displs", jg)
    rd = _displs(recv_displs, rc, "recv_displs", jg)
    for j in range(jg.size):
        if sd[j] + sc[j] > x.shape[0]:
            raise ValueError("dlpg.jax.alltoallv: send_displs[%d] + send_counts[%d] = %d "
                             "overruns x's %d rows" % (j, j, sd[j] + sc[j], x.shape[0]))
    rows = max([d + c for d, c in zip(rd, rc)] + [0])
    return _prims.alltoallv_p.bind(x, send_counts=sc, send_displs=sd, recv_counts=rc,
                                   recv_displs=rd, rows=rows, **_common(jg))[0]


def _counts(counts, what, jg):
    c = tuple(int(v) for v in counts)
    if len(c) != jg.size or any(v < 0 for v in c):
        raise ValueError("dlpg.jax.alltoallv: %s must be %d counts >= 0, one per rank (got "
                         "%r)" % (what, jg.size, tuple(counts)))
    return c


def _displs(displs, counts, what, jg):
    if displs is None:
        return tuple(int(v) for v in np.concatenate([[0], np.cumsum(counts)[:-1]]))
    d = tuple(int(v) for v in displs)
    if len(d) != jg.size or any(v < 0 for v in d):
        raise ValueError("dlpg.jax.alltoallv: %s must be %d displacements >= 0, one per rank "
                         "(got %r)" % (what, jg.size, tuple(displs)))
    return d


_HAS = {}


def _has(name):
    """Whether libdlpg implements dlpg_<name> (asked once per process)."""
    if name not in _HAS:
        from ._jax_group import implemented
        _HAS[name] = implemented(name)
    return _HAS[name]


def barrier(group=None):
    """Returns once every rank has reached it, in program order with every other dlpg call
    (an allreduce of one int32: on CUDA it is ordered on XLA's stream like the others).
    Returns nothing; under jit the call is kept although nothing uses a result."""
    jg = _resolve(group, "barrier")
    _prims.allreduce_p.bind(jnp.zeros((), jnp.int32), op=int(_abi.SUM), **_common(jg))
