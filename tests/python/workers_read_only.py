"""Rank body of test_read_only: read-only memory where dlpg.Group would write (an in-place
tensor, an output, a receive buffer, a non-root's broadcast tensor) is refused before the
call; read-only memory that is only read (an input, the root's broadcast tensor) serves."""

import traceback


class VersionedOnly(object):
    """A DLPack 1.0 producer with no NumPy flags to look at: only its export says whether
    the memory is read-only."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def _outcome(fn):
    import dlpg
    try:
        fn()
        return "no error"
    except dlpg.DlpgError as e:
        return (e.status, e.status_name, e.message)
    except Exception as e:  # noqa: BLE001 - reported to the test as it is
        return "%s: %s" % (type(e).__name__, e)


def read_only(rank, url, queue):
    try:
        import numpy as np
        import dlpg
        res = {}
        g = dlpg.Group(dlpg.Store(url, 30), rank, 2, timeout=30)

        def ro(values):
            a = np.array(values, dtype=np.float64)
            a.flags.writeable = False
            return a

        peer = 1 - rank
        res["allreduce_in_place"] = _outcome(lambda: g.allreduce(ro([1, 2, 3])))
        res["allreduce_output"] = _outcome(lambda: g.allreduce(np.ones(3), output=ro([0, 0, 0])))
        res["recv"] = _outcome(lambda: g.recv(ro([0, 0, 0]), peer=peer))
        res["alltoall_output"] = _outcome(lambda: g.alltoall(np.ones(2), ro([0, 0])))
        res["versioned_in_place"] = _outcome(lambda: g.allreduce(VersionedOnly(ro([1, 2, 3]))))
        # Read-only inputs are read only: rank r contributes (r + 1) * [1, 2, 3].
        x = ro([(rank + 1) * v for v in (1, 2, 3)])
        out, out_v1 = np.zeros(3), np.zeros(3)
        res["input_ok"] = _outcome(lambda: g.allreduce(x, output=out))
        res["input_ok_v1"] = _outcome(lambda: g.allreduce(VersionedOnly(x), output=out_v1))
        res["sums"] = (out.tolist(), out_v1.tolist())
        # Broadcast in place: the root's read-only tensor is only read; a non-root's is
        # refused, and it then takes part with a writeable one.
        if rank == 0:
            res["broadcast"] = _outcome(lambda: g.broadcast(ro([7, 8, 9]), root=0))
        else:
            res["broadcast_non_root"] = _outcome(lambda: g.broadcast(ro([0, 0, 0]), root=0))
            buf = np.zeros(3)
            res["broadcast"] = _outcome(lambda: g.broadcast(buf, root=0))
            res["broadcast_got"] = buf.tolist()
        g.barrier()
        g.destroy()
        queue.put((rank, res))
    except Exception:  # noqa: BLE001
        queue.put((rank, {"setup": traceback.format_exc()}))
