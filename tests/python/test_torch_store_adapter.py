"""dlpg on a torch store: a bounded wait that times out leaves the store usable.

torch's TCPStore client reads a server's late answer to a timed-out wait() as the reply to its
next request. dlpg waits in short slices on keys that may not exist yet (where each rank runs,
the shared-memory creation's nonce), so an adapter that used wait() for them broke the store
for every thread of the rank: a 4-rank torch job then hung at its first collective. The C++
extension's adapter is checked directly and through dlpg.Store.from_torch_store (which the
NumPy/JAX side of a mixed job uses)."""
import datetime
import threading
import traceback

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import dlpg  # noqa: E402
from dlpg import _abi  # noqa: E402
from conftest import run_ranks  # noqa: E402


def _native_store(tcp, timeout_s):
    import ctypes
    import dlpg.torch as dt
    dt._native.load_library(_abi.library_path())
    return dlpg.Store(_handle=ctypes.c_void_p(dt._native._wrap_store(tcp, timeout_s)))


def _public_store(tcp, timeout_s):
    return dlpg.Store.from_torch_store(tcp, timeout_s)


def _probe(rank, adapter, queue):
    """In its own process (run_ranks bounds it): a result dict or {"error": ...}."""
    try:
        server = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=30),
                               wait_for_workers=False)
        tcp = lambda: dist.TCPStore("127.0.0.1", server.port, None, False,  # noqa: E731
                                    datetime.timedelta(seconds=30))
        client, other = tcp(), tcp()
        s = {"cpp": _native_store, "from_torch_store": _public_store}[adapter](
            dist.PrefixStore("job", client), 30.0)
        out = {"timeouts": [], "values": []}
        for i in range(3):
            try:
                s.get("late/%d" % i, timeout=0.3)
                out["timeouts"].append("no error")
            except dlpg.DlpgError as e:
                out["timeouts"].append(e.status_name)
            # The key appears after the wait gave up: a wait() would now get its answer late.
            other.set("job/late/%d" % i, b"x")
            s.set("k%d" % i, b"v%d" % i)
            out["values"] += [s.get("k%d" % i, timeout=5.0), s.get("late/%d" % i, timeout=5.0),
                              s.add("n", 1)]
        # A wait that another thread's set ends, while this thread keeps using the store.
        t = threading.Timer(0.5, lambda: other.set("job/later", b"y"))
        t.start()
        out["values"].append(s.get("later", timeout=20.0))
        t.join()
        s.close()
        queue.put((rank, out))
    except Exception:  # noqa: BLE001
        queue.put((rank, {"error": traceback.format_exc()}))


@pytest.mark.parametrize("adapter", ["cpp", "from_torch_store"])
def test_timed_out_wait_leaves_the_store_usable(adapter):
    res = run_ranks(_probe, 1, lambda r: (adapter,), deadline_s=120)[0]
    assert "error" not in res, res.get("error")
    assert res["timeouts"] == ["DLPG_ERR_TIMEOUT"] * 3
    assert res["values"] == [b"v0", b"x", 1, b"v1", b"x", 2, b"v2", b"x", 3, b"y"]


def _raising_store_rank(rank, queue):
    """init_process_group("dlpg") on a torch store whose add() raises: the error names what
    the store raised, not only the status dlpg's callback could return."""
    try:
        import dlpg.torch  # noqa: F401 - registers "dlpg" (the import fails where it cannot)

        class Raising(dist.Store):
            def __init__(self):
                super().__init__()
                self.inner = dist.HashStore()

            def set(self, key, value):
                self.inner.set(key, value)

            def get(self, key):
                return self.inner.get(key)

            def add(self, key, value):
                if "dlpg" not in key:  # torch's own keys work
                    return self.inner.add(key, value)
                raise RuntimeError("add of %s exploded on purpose" % key)

            def check(self, keys):
                return self.inner.check(keys)

            def wait(self, keys, timeout=None):
                self.inner.wait(keys)

            def delete_key(self, key):
                return self.inner.delete_key(key)

            def num_keys(self):
                return self.inner.num_keys()

            def set_timeout(self, timeout):
                pass

        try:
            dist.init_process_group("dlpg", store=Raising(), rank=0, world_size=1,
                                    timeout=datetime.timedelta(seconds=30))
            dist.all_reduce(torch.ones(4))
            queue.put((rank, {"error": "no exception although the store's add raised"}))
        except Exception as e:  # noqa: BLE001 - the point of the test
            queue.put((rank, {"message": str(e)}))
    except Exception:  # noqa: BLE001 - reported to the test
        queue.put((rank, {"error": traceback.format_exc()}))


def test_an_exception_of_the_torch_store_reaches_the_error():
    res = run_ranks(_raising_store_rank, 1, lambda r: (), deadline_s=90)[0]
    assert "error" not in res, res["error"]
    m = res["message"]
    assert "exploded on purpose" in m and "dlpg" in m and "add" in m, m
