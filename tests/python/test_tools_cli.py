"""dlpg-info and dlpg-store on their command lines: --help prints usage (not the whole report),
a bad argument is named, and a store whose port is taken says how to pick another.

The tools are found beside DLPG_LIBRARY's build tree (tools/) or on the PATH."""
import os
import shutil
import subprocess

import pytest

TIMEOUT = 60 * float(os.environ.get("DLPG_TEST_TIME_SCALE", "1"))


def tool(name):
    lib = os.environ.get("DLPG_LIBRARY")
    if lib:
        p = os.path.join(os.path.dirname(os.path.abspath(lib)), "tools", name)
        if os.access(p, os.X_OK):
            return p
    return shutil.which(name)


INFO, STORE = tool("dlpg-info"), tool("dlpg-store")


def run(argv):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=TIMEOUT)


@pytest.mark.skipif(INFO is None, reason="no dlpg-info")
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_info_help_prints_usage_only(flag):
    r = run([INFO, flag])
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: dlpg-info"), r.stdout
    assert "parameters (by owner" not in r.stdout, r.stdout


@pytest.mark.skipif(INFO is None, reason="no dlpg-info")
def test_info_bad_argument_is_named():
    r = run([INFO, "--verbose"])
    assert r.returncode == 2, r.stdout + r.stderr
    assert "'--verbose'" in r.stderr and "usage: dlpg-info" in r.stderr, r.stderr
    assert r.stdout == "", r.stdout


@pytest.mark.skipif(STORE is None, reason="no dlpg-store")
def test_store_default_port_is_not_torchruns():
    """torchrun's default MASTER_PORT is 29500 and env:// serves on MASTER_PORT + 1: a
    dlpg-store beside such a job must not take either by default."""
    r = run([STORE, "--help"])
    assert r.returncode == 0, r.stderr
    assert "(default: 29700)" in r.stdout, r.stdout
    assert "29501" not in r.stdout and "29500" not in r.stdout, r.stdout


@pytest.mark.skipif(STORE is None, reason="no dlpg-store")
def test_store_port_in_use_says_how_to_pick_another():
    first = subprocess.Popen([STORE, "--host", "127.0.0.1", "--port", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = first.stdout.readline()
        assert line.startswith("dlpg-store listening on 127.0.0.1:"), line
        port = line.split()[3].rsplit(":", 1)[1]
        r = run([STORE, "--host", "127.0.0.1", "--port", port])
        assert r.returncode == 1, r.stdout + r.stderr
        assert "in use" in r.stderr, r.stderr
        assert "--port PORT" in r.stderr and "--port 0" in r.stderr, r.stderr
    finally:
        first.terminate()
        first.wait(timeout=TIMEOUT)
