"""torch's own DistributedTest (torch.testing._internal.distributed.distributed_test) on one
backend at one world size, as torch's test/distributed/test_distributed_spawn.py runs it, and
the outcome of every test written one per line ("NAME pass|fail|skip").

    python tests/torch_suite/run.py --backend dlpg --world-size 2 --out FILE [--shard I/N]

The suite picks its backend from the environment (BACKEND, WORLD_SIZE, TEMP_DIR) when it is
imported. dlpg runs as the CPU backend gloo: the suite is imported and run with BACKEND=gloo
(many tests are gated on that name: timeouts, monitored_barrier, coalesced all_reduce, object
collectives, get_future, DDP on CPU, and test helpers branch on it at run time), and in each
rank init_process_group(backend="gloo") creates the "dlpg" backend instead (_run below); a
group a test makes with an explicit backend= gets what it names. So dlpg is asked everything
gloo is asked, test for test; the tests that check the backend's name against "gloo" are
listed in tests/torch_suite/README.md. The suite's hooks for an out-of-tree backend are
filled in too (DistTestCases.backend_feature: plugin, ddp, subgroup, gpu, cuda).

Ranks are forked, not spawned: every test starts world-size processes, and re-importing torch
in each would make the suite several times slower on a small machine. The same harness runs
gloo's list (tests/torch_suite/gloo-ws*.txt) so the two compare like for like.
"""

import argparse
import atexit
import os
import shutil
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def _args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", required=True, choices=("gloo", "dlpg"))
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--out", required=True, help="file to write 'NAME OUTCOME' lines to")
    p.add_argument("--shard", default="0/1", help="I/N: run every N-th test from the I-th")
    p.add_argument("--timeout", type=int, default=60,
                   help="seconds one test may take (the suite's own default is 300)")
    p.add_argument("-k", action="append", default=[], help="only tests containing this")
    return p.parse_args(argv)


def _setup_env(a):
    os.environ["BACKEND"] = "gloo"  # dlpg too (see the docstring)
    os.environ["WORLD_SIZE"] = str(a.world_size)
    if "TEMP_DIR" not in os.environ:  # the suite's lock and barrier files; removed at the end
        os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="dlpg-torch-suite-")
        pid, path = os.getpid(), os.environ["TEMP_DIR"]
        # Only here: a forked rank that ran atexit must not remove it under the others.
        atexit.register(lambda: os.getpid() == pid and shutil.rmtree(path, True))
    # Read by common_distributed at import: the bound on one test, so a hang costs minutes,
    # not the whole CI job.
    os.environ["DISTRIBUTED_TESTS_DEFAULT_TIMEOUT"] = str(a.timeout)
    if REPO + "/python_shim" not in sys.path:
        sys.path.insert(0, os.path.join(REPO, "python_shim"))


def _suite_class(backend):
    import torch.testing._internal.common_distributed as cd
    from torch.testing._internal.distributed import distributed_test as dt
    if backend == "dlpg":
        import dlpg.torch  # noqa: F401  registers the backend here (forked ranks inherit it)
        for feature in ("plugin", "ddp", "subgroup", "gpu", "cuda"):
            cd.DistTestCases.backend_feature[feature].add("dlpg")

    class TestDistBackendWithFork(dt.TestDistBackend, dt.DistributedTest._DistTestBase):
        @classmethod
        def _run(cls, *args, **kwargs):
            if backend == "dlpg":
                _gloo_means_dlpg()
            return super()._run(*args, **kwargs)

        def setUp(self):
            super().setUp()
            import torch.multiprocessing as tmp
            self._start_processes(tmp.get_context("fork").Process)

    TestDistBackendWithFork.__module__ = __name__
    return TestDistBackendWithFork


def _gloo_means_dlpg():
    """In a forked rank: init_process_group(backend="gloo") makes the "dlpg" backend."""
    import torch.distributed as dist
    real = dist.init_process_group

    def init_process_group(*args, **kwargs):
        if kwargs.get("backend") == "gloo":
            kwargs["backend"] = "dlpg"
        elif args and args[0] == "gloo":
            args = ("dlpg",) + args[1:]
        return real(*args, **kwargs)

    dist.init_process_group = init_process_group


class _Recorder(unittest.TextTestResult):
    """Keeps every test's outcome, skips included."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.outcomes = {}
        self.started = {}

    def startTest(self, test):
        self.started[test._testMethodName] = time.monotonic()
        super().startTest(test)

    def _put(self, test, outcome):
        name = test._testMethodName
        self.outcomes[name] = (outcome, time.monotonic() - self.started.get(name, time.monotonic()))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._put(test, "pass")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._put(test, "fail")

    def addError(self, test, err):
        super().addError(test, err)
        self._put(test, "fail")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._put(test, "skip")

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._put(test, "pass")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._put(test, "fail")


def main(argv=None):
    a = _args(argv if argv is not None else sys.argv[1:])
    _setup_env(a)
    cls = _suite_class(a.backend)
    globals()[cls.__name__] = cls
    names = sorted(n for n in unittest.TestLoader().getTestCaseNames(cls)
                   if not a.k or any(k in n for k in a.k))
    i, n = (int(x) for x in a.shard.split("/"))
    names = names[i::n]
    suite = unittest.TestSuite(cls(name) for name in names)
    runner = unittest.TextTestRunner(verbosity=2, resultclass=_Recorder, stream=sys.stderr)
    t0 = time.monotonic()
    result = runner.run(suite)
    with open(a.out, "w") as f:
        for name in names:
            f.write("%s %s\n" % (name, result.outcomes.get(name, ("fail", 0.0))[0]))
    slow = sorted(result.outcomes.items(), key=lambda kv: -kv[1][1])[:8]
    print("slowest: " + ", ".join("%s %.0f s" % (k, v[1]) for k, v in slow))
    counts = {}
    for outcome, _ in result.outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    print("torch suite, backend %s, world size %d, shard %s: %d tests in %.0f s: %s"
          % (a.backend, a.world_size, a.shard, len(names), time.monotonic() - t0,
             ", ".join("%d %s" % (v, k) for k, v in sorted(counts.items()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
