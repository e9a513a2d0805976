"""dlpg.torch.Options: the pg_options the "dlpg" backend knows. Anything else is an error
naming the known ones, never silently ignored; every value is checked when the Options is
made, with a message naming the field and the value."""

import datetime
import numbers

# NCCL's communicator configuration (ncclConfig_t) fields the options carry, with their
# valid ranges as NCCL documents them: validated here, kept in Options.nccl_config, and
# handed to libdlpg as the group options' nccl_* fields, which it applies to every NCCL
# communicator of the group (ncclCommInitRankConfig, ncclCommSplit).
_NCCL_INT_RANGES = {
    "cga_cluster_size": (0, 8),
    "min_ctas": (1, 64),
    "max_ctas": (1, 64),
    "traffic_class": (0, 2**31 - 1),
}
_NCCL_STR = ("net_name", "comm_name")


class Options(object):
    """pg_options of init_process_group / new_group for the "dlpg" backend.

    name:    the dlpg group name, i.e. the key prefix in the (already per-group) store;
             default "torch".
    timeout: the group's timeout (a timedelta or seconds > 0); default: the timeout torch
             passes (init_process_group's).
    cga_cluster_size (0..8), min_ctas, max_ctas (1..64, min_ctas <= max_ctas), net_name,
    comm_name (non-empty strings), traffic_class (>= 0): NCCL communicator configuration
             (ncclConfig_t's cgaClusterSize, minCTAs, maxCTAs, netName, commName,
             trafficClass), kept in nccl_config and applied to the group's NCCL
             communicators (subgroups by split inherit them); host memory ignores them.
    """

    FIELDS = ("name", "timeout") + tuple(_NCCL_INT_RANGES) + _NCCL_STR

    def __init__(self, name=None, timeout=None, cga_cluster_size=None, min_ctas=None,
                 max_ctas=None, net_name=None, comm_name=None, traffic_class=None):
        self.name = str(name) if name else "torch"
        self.timeout = _timeout(timeout)
        given = dict(cga_cluster_size=cga_cluster_size, min_ctas=min_ctas, max_ctas=max_ctas,
                     traffic_class=traffic_class, net_name=net_name, comm_name=comm_name)
        self.nccl_config = {}
        for field, (lo, hi) in _NCCL_INT_RANGES.items():
            v = given[field]
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or not lo <= v <= hi:
                raise ValueError("dlpg: Options(%s=%r): must be an integer in %d..%d" % (
                    field, v, lo, hi))
            self.nccl_config[field] = int(v)
        for field in _NCCL_STR:
            v = given[field]
            if v is None:
                continue
            if not isinstance(v, str) or not v or "\0" in v:
                raise ValueError("dlpg: Options(%s=%r): must be a non-empty string" % (field, v))
            self.nccl_config[field] = v
        lo, hi = self.nccl_config.get("min_ctas"), self.nccl_config.get("max_ctas")
        if lo is not None and hi is not None and lo > hi:
            raise ValueError("dlpg: Options(min_ctas=%d, max_ctas=%d): min_ctas must not exceed "
                             "max_ctas" % (lo, hi))

    @classmethod
    def of(cls, pg_options):
        """Options from None, an Options, or a dict of its fields."""
        if pg_options is None:
            return cls()
        if isinstance(pg_options, cls):
            return pg_options
        if isinstance(pg_options, dict):
            unknown = sorted(set(pg_options) - set(cls.FIELDS))
            if unknown:
                raise ValueError("dlpg: unknown pg_options %s; the dlpg backend knows %s" % (
                    ", ".join(map(repr, unknown)), ", ".join(cls.FIELDS)))
            return cls(**pg_options)
        raise TypeError("dlpg: pg_options must be dlpg.torch.Options or a dict with the keys "
                        "%s, got %s" % (", ".join(cls.FIELDS), type(pg_options).__name__))

    def __repr__(self):
        extra = "".join(", %s=%r" % kv for kv in sorted(self.nccl_config.items()))
        if self.timeout is not None:
            extra = ", timeout=%r" % self.timeout + extra
        return "dlpg.torch.Options(name=%r%s)" % (self.name, extra)


def _timeout(t):
    """Seconds (> 0) from a timedelta or a number; None stays None."""
    if t is None:
        return None
    s = t.total_seconds() if isinstance(t, datetime.timedelta) else t
    if isinstance(s, bool) or not isinstance(s, numbers.Real) or not s > 0:
        raise ValueError("dlpg: Options(timeout=%r): must be a timedelta or a number of seconds "
                         "above 0" % (t,))
    return float(s)
