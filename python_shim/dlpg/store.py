"""dlpg.Store: the rendezvous key-value store, opened by URL or wrapped around a host store.

from_torch_store (and from_host_store) hand the plugin a dlpg_store_ops_t whose callbacks
call the host object's set/get/add/wait/check/delete_key. The callbacks run on dlpg threads;
ctypes takes the GIL for them, and every dlpg call made through ctypes.CDLL releases it, so
the thread that waits inside dlpg never blocks a callback.
"""

import ctypes
import datetime
import functools
import itertools
import threading
import time

from . import _abi
from ._abi import check, lib

# Host stores by context id. The id (not a Python pointer) is what the C side holds, so a
# late callback after release finds nothing instead of touching freed memory.
_hosts = {}
_hosts_lock = threading.Lock()
_next_id = itertools.count(1)


def _status_of(exc):
    text = str(exc).lower()
    if "timeout" in text or "timed out" in text:
        return _abi.ERR_TIMEOUT
    return _abi.ERR_SYSTEM


def _as_bytes(key):
    return key if isinstance(key, bytes) else key.encode()


class _HostStore(object):
    """Adapts a store with torch's c10d.Store methods to the callback table."""

    def __init__(self, host, timeout_s):
        self.host = host
        self.timeout_s = timeout_s
        # (key, value) of the last get, for dlpg's second, larger call; per thread, since
        # several dlpg threads (a group's worker, its watcher, the caller) call at once.
        self._tls = threading.local()

    @property
    def cached(self):
        return getattr(self._tls, "cached", None)

    @cached.setter
    def cached(self, value):
        self._tls.cached = value

    def set(self, key, value):
        self.host.set(key.decode(), value)

    def get(self, key, timeout_s):
        if self.cached is not None and self.cached[0] == key:
            value = self.cached[1]
            self.cached = None
            return value
        k = key.decode()
        t = timeout_s if timeout_s > 0 else self.timeout_s
        if hasattr(self.host, "wait") and t and t > 0:
            self._wait([k], t)
        value = self.host.get(k)
        value = value if isinstance(value, bytes) else bytes(value)
        self.cached = (key, value)
        return value

    def _wait(self, keys, timeout_s):
        # Polls check(), which never blocks, where the host has it: torch's TCPStore client
        # cannot take a wait() that times out (it then reads the server's late answer as the
        # reply to its next request, and the store is unusable for every thread), and dlpg
        # waits in short slices on keys that may not exist yet.
        check = getattr(self.host, "check", None)
        if check is not None:
            deadline = time.monotonic() + timeout_s
            pause = 0.0002
            while True:
                try:
                    if check(keys):
                        return
                except (NotImplementedError, RuntimeError):
                    break  # a store without check: wait() below
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("timed out after %g s waiting for key %r" %
                                       (timeout_s, keys[0]))
                time.sleep(min(pause, left))
                pause = min(pause * 2, 0.02)
        try:
            self.host.wait(keys, datetime.timedelta(seconds=timeout_s))
        except TypeError:
            self.host.wait(keys)

    def add(self, key, delta):
        return int(self.host.add(key.decode(), int(delta)))


def _host(ctx):
    return _hosts.get(ctx or 0)


def _status_callback(fn):
    """A store callback that returns OK once fn has run, or the status of what fn raised:
    no exception may cross back into C, so every failure becomes a status for dlpg."""
    @functools.wraps(fn)
    def callback(*args):
        try:
            fn(*args)
            return _abi.OK
        except Exception as e:  # noqa: BLE001 - every failure becomes a status for dlpg.
            return _status_of(e)
    return callback


@_status_callback
def _cb_set(ctx, key, value, length):
    _host(ctx).set(key, ctypes.string_at(value, length) if length else b"")


@_status_callback
def _cb_get(ctx, key, timeout_s, buf, capacity, length):
    value = _host(ctx).get(key, timeout_s)
    n = len(value)
    if capacity and buf:
        ctypes.memmove(buf, value, min(n, capacity))
    if n <= capacity:
        _host(ctx).cached = None
    length[0] = n


@_status_callback
def _cb_add(ctx, key, delta, result):
    v = _host(ctx).add(key, delta)
    if result:
        result[0] = v


@_status_callback
def _cb_wait(ctx, keys, nkeys, timeout_s):
    h = _host(ctx)
    names = [keys[i].decode() for i in range(nkeys)]
    h._wait(names, timeout_s if timeout_s > 0 else h.timeout_s)


def _cb_release(ctx):
    with _hosts_lock:
        _hosts.pop(ctx or 0, None)


@_status_callback
def _cb_check(ctx, keys, nkeys, all_exist):
    names = [keys[i].decode() for i in range(nkeys)]
    all_exist[0] = 1 if _host(ctx).host.check(names) else 0


@_status_callback
def _cb_delete(ctx, key, deleted):
    d = _host(ctx).host.delete_key(key.decode())
    if deleted:
        deleted[0] = 1 if d else 0


# The C function pointers live as long as the module, so they outlive every store.
_OPS = _abi.StoreOps(
    ctypes.sizeof(_abi.StoreOps),
    _abi.STORE_SET_FN(_cb_set), _abi.STORE_GET_FN(_cb_get), _abi.STORE_ADD_FN(_cb_add),
    _abi.STORE_WAIT_FN(_cb_wait), _abi.STORE_RELEASE_FN(_cb_release),
    _abi.STORE_CHECK_FN(_cb_check), _abi.STORE_DELETE_FN(_cb_delete))


def _keys_array(keys):
    ks = [_as_bytes(k) for k in keys]
    return (ctypes.c_char_p * max(1, len(ks)))(*ks), len(ks)


class Store(object):
    """A dlpg store. Store(url, timeout=300) opens tcp://HOST:PORT[?serve=1], file:///PATH
    or env://; Store.from_torch_store(store) wraps a torch.distributed Store."""

    def __init__(self, url=None, timeout=300.0, _handle=None):
        self._h = None
        if _handle is not None:
            self._h = _handle
            return
        if url is None:
            raise ValueError("dlpg.Store: url is required (tcp://HOST:PORT, file:///PATH, env://)")
        h = ctypes.c_void_p()
        check(lib.dlpg_store_open(_as_bytes(url), float(timeout), ctypes.byref(h)))
        self._h = h

    @classmethod
    def from_host_store(cls, host, timeout=300.0):
        """Wrap any object with set(key, value), get(key) -> bytes, add(key, n) -> int and
        optionally wait(keys, timedelta), check(keys), delete_key(key)."""
        ctx = next(_next_id)
        with _hosts_lock:
            _hosts[ctx] = _HostStore(host, float(timeout))
        h = ctypes.c_void_p()
        try:
            check(lib.dlpg_store_from_ops(ctypes.byref(_OPS), ctypes.c_void_p(ctx),
                                          float(timeout), ctypes.byref(h)))
        except Exception:
            with _hosts_lock:
                _hosts.pop(ctx, None)
            raise
        return cls(_handle=h)

    @classmethod
    def from_torch_store(cls, store, timeout=None):
        """Wrap a torch.distributed Store (TCPStore, FileStore, PrefixStore, ...)."""
        if timeout is None:
            t = getattr(store, "timeout", None)
            timeout = t.total_seconds() if isinstance(t, datetime.timedelta) else 300.0
        # The C++ extension's adapter where it loads: it waits by polling the store's C++
        # check() without a round trip through Python, never with a wait() that may time out
        # (one that does breaks a TCPStore client for good, see _HostStore._wait).
        try:
            from .torch import _native
        except ImportError:
            _native = None
        if _native is not None and hasattr(_native, "_wrap_store"):
            _native.load_library(_abi.library_path())
            return cls(_handle=ctypes.c_void_p(_native._wrap_store(store, float(timeout))))
        return cls.from_host_store(store, timeout)

    @property
    def handle(self):
        if self._h is None:
            raise ValueError("dlpg.Store: the store is closed")
        return self._h

    @property
    def port(self):
        p = ctypes.c_int()
        check(lib.dlpg_store_port(self.handle, ctypes.byref(p)))
        return p.value

    def set(self, key, value):
        v = _as_bytes(value)
        check(lib.dlpg_store_set(self.handle, _as_bytes(key), v, len(v)))

    def get(self, key, timeout=0.0):
        n = ctypes.c_size_t()
        k = _as_bytes(key)
        check(lib.dlpg_store_get(self.handle, k, float(timeout), None, 0, ctypes.byref(n)))
        while True:
            buf = ctypes.create_string_buffer(max(1, n.value))
            cap = n.value
            check(lib.dlpg_store_get(self.handle, k, float(timeout), buf, cap, ctypes.byref(n)))
            if n.value <= cap:
                return buf.raw[:n.value]

    def add(self, key, delta):
        r = ctypes.c_int64()
        check(lib.dlpg_store_add(self.handle, _as_bytes(key), int(delta), ctypes.byref(r)))
        return r.value

    def wait(self, keys, timeout=0.0):
        arr, n = _keys_array(keys)
        check(lib.dlpg_store_wait(self.handle, arr, n, float(timeout)))

    def check(self, keys):
        arr, n = _keys_array(keys)
        r = ctypes.c_int()
        check(lib.dlpg_store_check(self.handle, arr, n, ctypes.byref(r)))
        return bool(r.value)

    def delete_key(self, key):
        r = ctypes.c_int()
        check(lib.dlpg_store_delete_key(self.handle, _as_bytes(key), ctypes.byref(r)))
        return bool(r.value)

    def close(self):
        h, self._h = self._h, None
        if h is not None:
            check(lib.dlpg_store_close(h))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown; nothing to report to.
            pass
