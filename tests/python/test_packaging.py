"""The Python package installs offline with a plain `pip install ./python_shim` (build
isolation included: the in-tree backend needs nothing from an index), and its sdist and
editable wheel are complete."""

import os
import subprocess
import sys
import tarfile
import zipfile

import pytest

from conftest import SHIM

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
    assert r.stdout.strip() == "0.1.0"
    dist = [p for p in os.listdir(target) if p.endswith(".dist-info")]
    assert dist == ["dlpg-0.1.0.dist-info"]
    record = (target / dist[0] / "RECORD").read_text()
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
        assert "dlpg-0.1.0/" + n in names, n
    wheel = dlpg_build.build_editable(str(tmp_path))
    with zipfile.ZipFile(tmp_path / wheel) as z:
        pth = z.read("_dlpg_editable.pth").decode().strip()
        assert "dlpg-0.1.0.dist-info/RECORD" in z.namelist()
    assert os.path.samefile(pth, SHIM)
