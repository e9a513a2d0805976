"""`import dlpg.torch` where the package carries no extension built for this torch (an
installed copy of the package without one): it builds one once into the per-torch cache,
under a file lock while two ranks import at once, saying so on one line, and later imports
reuse it silently; where a tool is missing it raises ImportError naming it. There is no
other backend to fall back to."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, SHIM

torch = pytest.importorskip("torch")

from dlpg import _version  # noqa: E402


def _package_copy(tmp_path):
    """The package as a wheel lays it out, minus any torch extension: the modules, the C++
    sources and the ABI headers (with the version header CMake would generate)."""
    root = tmp_path / "site"
    shutil.copytree(os.path.join(SHIM, "dlpg"), str(root / "dlpg"),
                    ignore=shutil.ignore_patterns("__pycache__", "_C_dlpg*", "_native"))
    inc = root / "dlpg" / "include" / "dlpg"
    inc.mkdir(parents=True)
    shutil.copy(os.path.join(REPO, "include", "dlpg", "dlpg.h"), str(inc))
    (inc / "dlpg_version.h").write_text(_version.header_text(_version.from_cmakelists()))
    return root


IMPORT = ("import sys, dlpg.torch; assert dlpg.torch.IMPLEMENTATION == 'cpp'; "
          "assert dlpg.torch._native.__file__.startswith(sys.argv[1]), dlpg.torch._native.__file__; "
          "print('IMPORTED')")


def _env(root, cache, **extra):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DLPG_TORCH_EXT_CACHE")}
    env.update(PYTHONPATH=str(root), DLPG_TORCH_EXT_CACHE=str(cache), **extra)
    return env


def test_two_ranks_build_once_into_the_cache_then_reuse(tmp_path):
    root, cache = _package_copy(tmp_path), tmp_path / "cache"
    env = _env(root, cache, MAX_JOBS="2")
    procs = [subprocess.Popen([sys.executable, "-c", IMPORT, str(cache)], env=env,
                              cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=1800) + (p.returncode,))
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    for out, err, rc in outs:
        assert rc == 0 and "IMPORTED" in out, out + err
    lines = [l for _, err, _ in outs for l in err.splitlines() if "building the C++ backend" in l]
    assert len(lines) == 1, [err for _, err, _ in outs]  # one builds, the other waits
    assert "for torch %s into %s" % (torch.__version__, cache) in lines[0], lines[0]
    folders = [d for d in os.listdir(str(cache))]
    assert len(folders) == 1 and folders[0].startswith("torch"), folders
    stamp = (cache / folders[0] / "_C_dlpg.stamp").read_text()
    assert stamp.startswith("torch %s; python %s; sources " % (
        torch.__version__, sys.implementation.cache_tag)), stamp
    # A later import reuses the cached build and says nothing.
    r = subprocess.run([sys.executable, "-c", IMPORT, str(cache)], env=env, cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "IMPORTED" in r.stdout, r.stdout + r.stderr
    assert "building" not in r.stderr, r.stderr


def test_missing_compiler_is_named(tmp_path):
    root, cache = _package_copy(tmp_path), tmp_path / "cache"
    env = _env(root, cache, CXX=str(tmp_path / "no-such-c++"))
    r = subprocess.run([sys.executable, "-c", IMPORT, str(cache)], env=env, cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0, r.stdout
    assert "ImportError: dlpg.torch: the C++ backend is not built for torch %s" % \
        torch.__version__ in r.stderr, r.stderr
    assert "a C++ compiler (%s is not on the PATH" % (tmp_path / "no-such-c++") in r.stderr, \
        r.stderr
