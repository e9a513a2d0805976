"""dlpg.torch.Options: the pg_options the "dlpg" backend knows. Anything else is an error
naming the known ones, never silently ignored."""


class Options(object):
    """pg_options of init_process_group / new_group for the "dlpg" backend.

    name: the dlpg group name, i.e. the key prefix in the (already per-group) store;
          default "torch".
    """

    FIELDS = ("name",)

    def __init__(self, name=None):
        self.name = str(name) if name else "torch"

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
        return "dlpg.torch.Options(name=%r)" % self.name
