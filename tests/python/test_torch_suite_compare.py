"""tests/torch_suite/compare.py, which CI's run of torch's own suite rests on, fails where it
must: a test gloo passes that dlpg fails or skips, a listed exception that passes now, lists
that cover different tests; and passes a run that only differs by listed exceptions."""

import os
import subprocess
import sys

from conftest import REPO

COMPARE = os.path.join(REPO, "tests", "torch_suite", "compare.py")


def _compare(tmp_path, gloo, dlpg, ws=2):
    g, d = tmp_path / "gloo.txt", tmp_path / "dlpg.txt"
    g.write_text("# a comment line\n" + "".join("%s %s\n" % kv for kv in gloo.items()))
    d.write_text("".join("%s %s\n" % kv for kv in dlpg.items()))
    r = subprocess.run([sys.executable, COMPARE, "--world-size", str(ws), str(g), str(d)],
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout


def test_same_outcomes_pass(tmp_path):
    rc, out = _compare(tmp_path, {"test_a": "pass", "test_b": "skip"},
                       {"test_a": "pass", "test_b": "skip"})
    assert rc == 0, out


def test_a_gloo_pass_that_fails_or_skips_on_dlpg_fails(tmp_path):
    for outcome in ("fail", "skip"):
        rc, out = _compare(tmp_path, {"test_a": "pass"}, {"test_a": outcome})
        assert rc == 1 and "test_a: gloo pass, dlpg %s" % outcome in out, out


def test_a_listed_exception_is_allowed_and_must_not_pass(tmp_path):
    # test_get_backend is listed in tests/torch_suite/README.md for every world size.
    rc, out = _compare(tmp_path, {"test_get_backend": "pass"}, {"test_get_backend": "fail"}, 3)
    assert rc == 0 and "differs (allowed)" in out, out
    rc, out = _compare(tmp_path, {"test_get_backend": "pass"}, {"test_get_backend": "pass"})
    assert rc == 1 and "delete its exception" in out, out


def test_lists_of_different_tests_fail(tmp_path):
    rc, out = _compare(tmp_path, {"test_a": "skip"}, {"test_b": "skip"})
    assert rc == 1 and "differ in tests" in out, out
