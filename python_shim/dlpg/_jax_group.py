"""dlpg.jax groups: a dlpg.Group registered in libdlpg_xla's table of groups.

A compiled JAX computation names its group by the id of that table (the custom call's
"group" attribute), never by a pointer: a computation that outlives its group fails with a
message naming the id instead of touching a destroyed group. Every call of a computation,
whatever its group, is ordered on the one chain or effect token of dlpg.jax (_jax_prims),
so calls on several groups in one jitted function run in program order.
"""

import ctypes

from . import _abi


class JaxGroup(object):
    """A dlpg.Group usable by dlpg.jax calls (their group= argument).

    Made by dlpg.jax.from_group(g) (g stays the caller's: keep it alive and undestroyed
    until this object is freed), by dlpg.jax.split (the child is this object's: freed with
    it) or by dlpg.jax.init (the default group). free() unregisters it: computations
    compiled for it then fail with a message; it is freed too when garbage collected."""

    def __init__(self, lib, group, owns):
        self._lib = lib
        gid = ctypes.c_int64()
        status = lib.dlpg_xla_group_register(group.handle, ctypes.byref(gid))
        if status != _abi.OK:
            raise _abi.DlpgError(status, lib.dlpg_xla_last_error().decode("utf-8", "replace"))
        self.group = group        # the dlpg.Group
        self.gid = gid.value      # what compiled calls carry
        self.owns = owns          # destroy group when freed
        # Constant for a group's life; read once so that tracing asks no ctypes questions.
        self.rank = group.rank
        self.size = group.size

    @property
    def live(self):
        return self.gid != 0

    def check_live(self, what):
        """Raise unless this group can still be traced into a call named what."""
        if self.gid == 0:
            raise _abi.DlpgError(_abi.ERR_INVALID_ARGUMENT,
                                 "dlpg.jax.%s: group= is a dlpg.jax group that was freed "
                                 "(rank %d of %d)" % (what, self.rank, self.size))
        if getattr(self.group, "_h", True) is None:
            raise _abi.DlpgError(_abi.ERR_INVALID_ARGUMENT,
                                 "dlpg.jax.%s: group='s dlpg.Group (rank %d of %d) was "
                                 "destroyed while still registered with dlpg.jax; free the "
                                 "dlpg.jax group first" % (what, self.rank, self.size))

    def free(self):
        """Unregister (compiled computations on this group then fail with a message) and
        destroy the dlpg.Group if this object made it (split). Idempotent."""
        gid, self.gid = self.gid, 0
        if gid == 0:
            return
        status = self._lib.dlpg_xla_group_unregister(gid)
        if self.owns:
            self.group.destroy()
        if status != _abi.OK:
            raise _abi.DlpgError(status,
                                 self._lib.dlpg_xla_last_error().decode("utf-8", "replace"))

    close = free

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def __del__(self):
        try:
            self.free()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __repr__(self):
        return "<dlpg.jax group id %d: rank %d of %d%s>" % (
            self.gid, self.rank, self.size, "" if self.gid else ", freed")


def implemented(name):
    """Whether libdlpg implements dlpg_<name> (a function the header declares but a build may
    still refuse with DLPG_ERR_UNSUPPORTED whatever its arguments): asked with NULL
    arguments, an implementation refuses them as invalid instead."""
    fn = getattr(_abi.lib, "dlpg_" + name)
    args = [0 if t is ctypes.c_int else None for t in _abi.PROTOTYPES["dlpg_" + name][1]]
    return fn(*args) != _abi.ERR_UNSUPPORTED
