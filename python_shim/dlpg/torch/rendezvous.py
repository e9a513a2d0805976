"""init_method="dlpg://HOST:PORT?name=NAME": torch ranks in a dlpg group with ranks of other
frameworks.

    dist.init_process_group("dlpg", init_method="dlpg://HOST:PORT?name=NAME",
                            rank=r, world_size=n)

meets ranks running dlpg.Group(dlpg.Store("tcp://HOST:PORT"), r, n, name=NAME) and
dlpg.jax.init("tcp://HOST:PORT", rank=r, world_size=n, name=NAME): the "dlpg" backend
creates its group on that dlpg store under NAME itself (default "dlpg", dlpg's default
name), not on torch's prefixed store, so nothing torch adds to keys reaches the others.
Groups torch makes later with new_group are torch's own and live under NAME/torch-<group id>.

The query may also carry token=SECRET (the store's shared secret) and serve=0|1. As with
torch's tcp://, rank 0 serves the store at HOST:PORT unless the URL says serve=0 (the store is
served elsewhere: dlpg-store, a test, a rank of another framework); serve=1 makes this rank
serve it whatever its rank. rank= and world_size= come from init_process_group, else from the
environment (RANK, WORLD_SIZE: torchrun's), as env:// takes them.

A restarted worker group (torchrun --max-restarts) rendezvous again on the same store under
the same name: dlpg's group keys are scoped per job (each creation agrees a new generation,
docs/reliability.md, "Rendezvous"), so the keys the failed attempt left are never read as the
new attempt's. torch's keys of an attempt go under NAME/torch/<attempt>/ (TORCHELASTIC's
restart count, 0 outside torchrun), so they never meet either.

pg_options (dlpg.torch.Options or a dict of its fields) are checked and honoured as on every
other path: an unknown field is an error, and a name= places the group under
<its dlpg:// name>/<name>.

torch's own keys go to the same store, among them those of the store-based barrier that
init_process_group and new_group run with TORCH_DIST_INIT_BARRIER=1. That barrier counts
torch ranks only, so it would wait forever for the ranks of other frameworks; the dlpg
group's rendezvous at its first operation waits for every rank, so the barrier is answered as
complete.
"""

import datetime
import os
import urllib.parse

import torch.distributed as dist

SCHEME = "dlpg"
_KNOWN = ("name", "token", "serve", "rank", "world_size")
_BARRIER = "store_based_barrier_key"
# The stores handed to torch: torch keeps only the C++ side of a Python store, whose Python
# methods must stay reachable for as long as torch may call them.
_live = []
# The dlpg stores opened, by URL: a second rendezvous in this process (init_process_group
# after destroy_process_group) uses the same connection, and on the serving rank the same
# server, whose port it could not bind again while the first one lives.
_stores = {}


def _seconds(timeout, default=1800.0):
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    return float(timeout) if timeout else default


class RendezvousStore(dist.Store):
    """The torch Store of a dlpg:// rendezvous: torch's keys under NAME/torch/ in the dlpg
    store, which the "dlpg" backend uses directly for its group."""

    def __init__(self, store, name, world_size, timeout_s, attempt=0):
        super().__init__()
        self.dlpg_store = store
        self.name = name
        self.attempt = attempt
        self.world_size = world_size
        self.timeout_s = timeout_s
        self.default_created = False

    def _k(self, key):
        return "%s/torch/%d/%s" % (self.name, self.attempt, key)

    def set(self, key, value):
        self.dlpg_store.set(self._k(key), value if isinstance(value, bytes) else str(value).encode())

    def get(self, key):
        return self.dlpg_store.get(self._k(key), self.timeout_s)

    def add(self, key, delta):
        if _BARRIER in key:
            return self.world_size  # see the module docstring
        return self.dlpg_store.add(self._k(key), delta)

    def wait(self, keys, timeout=None):
        self.dlpg_store.wait([self._k(k) for k in keys], _seconds(timeout, self.timeout_s))

    def check(self, keys):
        return self.dlpg_store.check([self._k(k) for k in keys])

    def delete_key(self, key):
        return self.dlpg_store.delete_key(self._k(key))

    def set_timeout(self, timeout):
        self.timeout_s = _seconds(timeout, self.timeout_s)


def _error(url, what):
    return ValueError("dlpg:// rendezvous %r: %s (expected dlpg://HOST:PORT?name=NAME"
                      "[&token=SECRET][&serve=0|1])" % (url, what))


def _handler(url, **kwargs):
    from dlpg import Store
    u = urllib.parse.urlparse(url)
    if not u.hostname or u.port is None:
        raise _error(url, "the store's HOST:PORT is missing")
    if u.path not in ("", "/"):
        raise _error(url, "unexpected path %r" % u.path)
    q = dict(urllib.parse.parse_qsl(u.query, keep_blank_values=True))
    unknown = sorted(set(q) - set(_KNOWN))
    if unknown:
        raise _error(url, "unknown parameter %s" % ", ".join(unknown))
    env = {"rank": "RANK", "world_size": "WORLD_SIZE"}
    for k in ("rank", "world_size"):
        if k not in q and os.environ.get(env[k]):
            q[k] = os.environ[env[k]]
        if k not in q or not q[k].lstrip("-").isdigit() or int(q[k]) < 0:
            raise _error(url, "%s is %s; pass rank= and world_size= to init_process_group "
                         "(or set %s)" % (k, "missing" if k not in q else repr(q[k]), env[k]))
    if q.get("serve", "0") not in ("0", "1"):
        raise _error(url, "serve is %r; it is 0 (the store is served elsewhere) or 1 (this "
                     "rank serves it); without serve=, rank 0 serves it" % q["serve"])
    rank, world_size = int(q["rank"]), int(q["world_size"])
    if rank >= world_size:
        raise _error(url, "rank %d is not below world_size %d" % (rank, world_size))
    timeout_s = _seconds(kwargs.get("timeout"))
    host = "[%s]" % u.hostname if ":" in u.hostname else u.hostname
    tcp = "tcp://%s:%d" % (host, u.port)
    # As tcp://: rank 0 serves unless told otherwise.
    serve = q.get("serve", "1" if rank == 0 else "0")
    extra = [("serve", "1")] if serve == "1" else []
    extra += [("token", q["token"])] if "token" in q else []
    if extra:
        tcp += "?" + urllib.parse.urlencode(extra)
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    if tcp not in _stores:
        _stores[tcp] = Store(tcp, timeout_s)
    store = RendezvousStore(_stores[tcp], q.get("name") or "dlpg", world_size,
                            timeout_s, int(attempt) if attempt.isdigit() else 0)
    _live.append(store)
    yield store, rank, world_size
    raise RuntimeError("dlpg:// rendezvous %r: torch asked to rendezvous again, which a "
                       "dlpg group cannot (create a new process group instead)" % url)


def register():
    """Register the dlpg:// handler with torch.distributed (idempotent)."""
    import importlib
    rdzv = importlib.import_module("torch.distributed.rendezvous")  # the module, not the function
    if SCHEME not in getattr(rdzv, "_rendezvous_handlers", {}):
        rdzv.register_rendezvous_handler(SCHEME, _handler)


def _rendezvous_store_of(store):
    """The RendezvousStore under torch's PrefixStores, or None."""
    seen = 0
    while isinstance(store, dist.PrefixStore) and seen < 16:
        store = getattr(store, "underlying_store", None)
        seen += 1
    return store if isinstance(store, RendezvousStore) else None


def create_backend(backend_options, pg_options, native):
    """The "dlpg" backend of a group whose store came from a dlpg:// rendezvous (created on
    the dlpg store itself, under the rendezvous' name), or None for any other store."""
    rs = _rendezvous_store_of(backend_options.store)
    if rs is None:
        return None
    from .options import Options
    opts = Options.of(pg_options)  # refuses what it does not know, as on the env:// path
    if native is None:
        raise RuntimeError("dlpg:// rendezvous needs dlpg's C++ torch backend, which does not "
                           "import here")
    o = backend_options
    # The default group, which init_process_group creates first on the rendezvous' store, is
    # the one ranks of other frameworks meet; torch's later groups are among torch ranks only.
    if not rs.default_created:
        rs.default_created = True
        name = rs.name
    else:
        name = "%s/torch-%s" % (rs.name, o.group_id)
    if pg_options is not None:
        name = "%s/%s" % (name, opts.name)
    from dlpg import _abi
    native.load_library(_abi.library_path())
    return native.create_on_store(rs.dlpg_store.handle.value, int(o.group_rank),
                                  int(o.group_size), _seconds(o.timeout), name, o.store,
                                  opts.nccl_config)
