"""The Python package installs offline with a plain `pip install ./python_shim` (build
isolation included: the in-tree backend needs nothing from an index), and its sdist and
editable wheel are complete."""

import os
import subprocess
import sys
import tarfile
import zipfile

import pytest

from conftest import REPO, SHIM

from dlpg import _version

# CMake's project() version, the one place it is written.
VERSION = "%d.%d.%d" % _version.from_cmakelists(os.path.join(REPO, "CMakeLists.txt"))

pytestmark = pytest.mark.skipif(
    subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0,
    reason="pip is not installed for this interpreter")


def test_pip_install_offline_then_import(tmp_path):
    target = tmp_path / "site"
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-cache-dir", "--target",
                        str(target), SHIM], capture_output=True, text=True, env=env, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    # The installed copy, not the source tree, is imported; it finds the library through
    # DLPG_LIBRARY like any other install.
    env = dict(os.environ, PYTHONPATH=str(target))
    code = ("import dlpg, dlpg.torch, os; assert dlpg.__file__.startswith(%r), dlpg.__file__; "
            "print(dlpg.__version__)" % str(target))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == VERSION
    dist = [p for p in os.listdir(target) if p.endswith(".dist-info")]
    assert dist == ["dlpg-%s.dist-info" % VERSION]
    record = (target / dist[0] / "RECORD").read_text()
    # The headers the torch extension builds against, the version one included.
    assert "dlpg/include/dlpg/dlpg.h," in record
    assert _version.from_header(str(target / "dlpg" / "include" / "dlpg" / "dlpg_version.h")) \
        == tuple(int(x) for x in VERSION.split("."))
    for module in ("dlpg/__init__.py", "dlpg/_abi.py", "dlpg/group.py", "dlpg/store.py",
                   "dlpg/torch/process_group.py", "dlpg/torch/work.py"):
        assert module + "," in record, module


def test_sdist_and_editable_wheel(tmp_path):
    sys.path.insert(0, SHIM)
    try:
        import dlpg_build
    finally:
        sys.path.remove(SHIM)
    sdist = dlpg_build.build_sdist(str(tmp_path))
    with tarfile.open(tmp_path / sdist) as tar:
        names = set(tar.getnames())
    for n in ("pyproject.toml", "dlpg_build.py", "PKG-INFO", "dlpg/__init__.py",
              "dlpg/torch/__init__.py"):
        assert "dlpg-%s/%s" % (VERSION, n) in names, n
    assert "dlpg-%s/dlpg/include/dlpg/dlpg_version.h" % VERSION in names
    wheel = dlpg_build.build_editable(str(tmp_path))
    with zipfile.ZipFile(tmp_path / wheel) as z:
        pth = z.read("_dlpg_editable.pth").decode().strip()
        assert "dlpg-%s.dist-info/RECORD" % VERSION in z.namelist()
    assert os.path.samefile(pth, SHIM)


VENV_CHECK = """
import os, sys
import dlpg
assert dlpg.__file__.startswith(sys.prefix), (dlpg.__file__, sys.prefix)
print("LIB", dlpg.library_path())
assert dlpg.version() == int(sys.argv[2]), dlpg.version()
assert dlpg.__version__ == sys.argv[3], dlpg.__version__
import torch, torch.distributed as dist
import dlpg.torch
print("IMPL", dlpg.torch.IMPLEMENTATION)
# The test serves the TCPStore (on a port the kernel picked); this rank joins it.
store = dist.TCPStore("127.0.0.1", int(sys.argv[1]), 1, False)
dist.init_process_group("dlpg", store=store, rank=0, world_size=1)
x = torch.arange(6.0).reshape(2, 3).t()
dist.all_reduce(x)
assert torch.equal(x, torch.arange(6.0).reshape(2, 3).t()), x
dist.destroy_process_group()
print("VENV-OK")
"""


def test_fresh_venv_pip_install_finds_its_library(tmp_path):
    """A plain `pip install ./python_shim` in a fresh venv, with no DLPG_* variable and no
    LD_LIBRARY_PATH: the wheel carries the libdlpg.so of the checkout's CMake build (and the
    C++ torch extension when it was built), so the installed package works as is."""
    from conftest import torch_store
    import glob
    repo = os.path.dirname(os.path.abspath(SHIM))
    if not glob.glob(os.path.join(repo, "build*", "libdlpg.so")) and \
            not os.path.exists("/usr/share/cmake/Gloo/GlooConfig.cmake"):
        # The GPU machine: a bundle under .gpu/, no CMake build and no Gloo to make one, so
        # there is no library for the wheel to carry. CI has both.
        pytest.skip("no build*/libdlpg.so in this checkout and no Gloo to build one with CMake")
    venv = tmp_path / "venv"
    r = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                       capture_output=True, text=True, timeout=180)
    if r.returncode != 0 and "ensurepip" in (r.stdout + r.stderr):
        pytest.fail("python3 -m venv needs python3-venv (ci/install-deps.sh installs it):\n"
                    + r.stderr)
    assert r.returncode == 0, r.stdout + r.stderr
    py = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DLPG_") and k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    r = subprocess.run([py, "-m", "pip", "install", "--no-cache-dir", SHIM], capture_output=True,
                       text=True, env=env, timeout=300, cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    script = tmp_path / "check.py"
    script.write_text(VENV_CHECK)
    code = sum(int(x) * m for x, m in zip(VERSION.split("."), (10000, 100, 1)))
    with torch_store() as (_, port):
        r = subprocess.run([py, str(script), str(port), str(code), VERSION],
                           capture_output=True, text=True,
                           env=env, timeout=180, cwd=str(tmp_path))
    assert r.returncode == 0 and "VENV-OK" in r.stdout, r.stdout + r.stderr
    lib = [l for l in r.stdout.splitlines() if l.startswith("LIB ")][0][4:]
    assert lib.startswith(str(venv)), lib
    built = os.path.exists(os.path.join(SHIM, "dlpg", "torch", "_C_dlpg.so"))
    assert ("IMPL cpp" if built else "IMPL python") in r.stdout, r.stdout
