"""The rendezvous store of a dlpg group between Ray actors: Ray's own internal key-value
store (the GCS), which every driver, actor and task of the cluster reaches and which outlives
any one of them, so no address has to be published and no extra actor is started.

dlpg.Store.from_host_store wraps it (dlpg_store_from_ops). The GCS store has set, get, exists,
delete and put-if-absent but no atomic add, which dlpg's rendezvous needs (claims, counters
of ranks out, job numbers): a counter is kept as an append-only log of slots
<key>#0, <key>#1, ..., each claimed with put-if-absent and never changed, so an add is one
claim and its value is the sum of the slots up to the claimed one. Slots are immutable, so
each process caches the ones it has read and a probe (add 0) costs one read of the next slot.

Keys of a group live under "ray/<quoted group name>/" in the "dlpg" namespace: the name
scopes them, and quoting keeps one group's prefix from being another's ("a" and "a/v").
"""

import threading
import time
import urllib.parse

import ray.experimental.internal_kv as _kv

NAMESPACE = "dlpg"


def group_prefix(group_name):
    return "ray/%s/" % urllib.parse.quote(str(group_name), safe="")


def clear(group_name):
    """Delete every key the groups named group_name wrote. Only for when no process uses a
    group of that name any more (a group's keys are otherwise kept: dlpg scopes each group
    of a name by a job number kept in them, so a new group never reads an old one's)."""
    _kv._internal_kv_del(group_prefix(group_name), del_by_prefix=True, namespace=NAMESPACE)


class RayKVStore(object):
    """set/get/add/check/delete_key over Ray's internal KV, for dlpg.Store.from_host_store."""

    def __init__(self, group_name):
        self._prefix = group_prefix(group_name)
        self._slots = {}  # counter key -> the values of its slots read so far
        self._lock = threading.Lock()

    def _value_key(self, key):
        return self._prefix + "v/" + key

    def _slot_key(self, key, i):
        # "#" ends the key: a prefix deletion of key's slots spares those of key/...
        return "%sc/%s#%d" % (self._prefix, key, i)

    def set(self, key, value):
        v = value if isinstance(value, bytes) else str(value).encode()
        _kv._internal_kv_put(self._value_key(key), v, overwrite=True, namespace=NAMESPACE)

    def get(self, key):
        v = _kv._internal_kv_get(self._value_key(key), namespace=NAMESPACE)
        if v is not None:
            return v
        if _kv._internal_kv_exists(self._slot_key(key, 0), namespace=NAMESPACE):
            return str(self.add(key, 0)).encode()
        raise KeyError("dlpg.ray store: key %r is not set" % key)

    def _read_slot(self, key, i):
        v = _kv._internal_kv_get(self._slot_key(key, i), namespace=NAMESPACE)
        return None if v is None else int(v)

    def add(self, key, delta):
        delta = int(delta)
        with self._lock:
            slots = self._slots.setdefault(key, [])
            while True:
                i = len(slots)
                if delta == 0:
                    v = self._read_slot(key, i)
                    if v is None:
                        if i and self._read_slot(key, i - 1) is None:
                            # The counter was deleted (and maybe started again) since this
                            # process read it: read it afresh.
                            del slots[:]
                            continue
                        return sum(slots)
                    slots.append(v)
                    continue
                existed = _kv._internal_kv_put(self._slot_key(key, i), str(delta).encode(),
                                               overwrite=False, namespace=NAMESPACE)
                if not existed:
                    if i and self._read_slot(key, i - 1) is None:
                        # Deleted meanwhile: this claim started a new counter at slot i, which
                        # nobody reads; drop it and claim from slot 0.
                        _kv._internal_kv_del(self._slot_key(key, i), namespace=NAMESPACE)
                        del slots[:]
                        continue
                    slots.append(delta)
                    return sum(slots)
                v = self._read_slot(key, i)
                if v is not None:
                    slots.append(v)

    def _exists(self, key):
        return (_kv._internal_kv_exists(self._value_key(key), namespace=NAMESPACE) or
                _kv._internal_kv_exists(self._slot_key(key, 0), namespace=NAMESPACE))

    def check(self, keys):
        return all(self._exists(k) for k in keys)

    def wait(self, keys, timeout=None):
        """Until every key exists (timeout: a timedelta or seconds; None: 300 s). Its
        presence also makes dlpg.store's adapter wait before a get, which dlpg's get
        promises (it polls check(), this store's cheap call, and never reaches here)."""
        t = timeout.total_seconds() if hasattr(timeout, "total_seconds") else timeout
        deadline = time.monotonic() + (300.0 if t is None else float(t))
        pause = 0.0005
        while not self.check(keys):
            if time.monotonic() >= deadline:
                raise TimeoutError("dlpg.ray store: timed out waiting for %r" % (list(keys),))
            time.sleep(pause)
            pause = min(pause * 2, 0.02)

    def delete_key(self, key):
        existed = self._exists(key)
        _kv._internal_kv_del(self._value_key(key), namespace=NAMESPACE)
        _kv._internal_kv_del("%sc/%s#" % (self._prefix, key), del_by_prefix=True,
                             namespace=NAMESPACE)
        with self._lock:
            self._slots.pop(key, None)
        return existed
