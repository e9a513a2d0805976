"""The wheel as a user gets it: built by setuptools from the checkout (offline, pip's
--no-build-isolation, the C library built in Release by setup.py's CMake step) from another
folder with no DLPG_* variable, no PYTHONPATH and no LD_LIBRARY_PATH; installed into a fresh
venv (--system-site-packages: Debian's torch and NumPy); used there (a NumPy group of 2 ranks
on a dlpg-store from the PATH, torch's "dlpg" backend in C++); then uninstalled without a
trace.

The build reuses build-wheel/ and python_shim/build/ of the checkout (incremental), so only a
first run pays for the whole C build and the torch extension."""

import os
import shutil
import subprocess
import sys
import time
import zipfile

import pytest

from conftest import REPO, SHIM

from dlpg import _version

VERSION = "%d.%d.%d" % _version.from_cmakelists(os.path.join(REPO, "CMakeLists.txt"))
NCCL = os.path.exists("/usr/local/cuda/include/nccl.h")  # CMake's NCCL path is ON here
TAG = "cp%d%d" % sys.version_info[:2]

# Building from source needs Gloo and hiredis (Debian's libgloo-dev and libhiredis-dev, which
# ci/install-deps.sh installs). The GPU machine has neither: there ci/gpu-wheel.sh builds the
# wheel from the bundle of ci/gpu-bundle.sh instead. Only the tests that build need them.
_HIREDIS = os.path.exists("/usr/include/hiredis/hiredis.h")
needs_source_build = pytest.mark.skipif(
    not (_HIREDIS and os.path.isdir("/usr/include/gloo")),
    reason="no Gloo or hiredis headers (libgloo-dev, libhiredis-dev) to build the wheel from "
           "source; ci/gpu-wheel.sh covers the GPU machine")

pytestmark = pytest.mark.skipif(
    subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0,
    reason="pip is not installed for this interpreter")


def _user_env():
    """The environment of a user who has just installed the wheel: nothing of ours."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DLPG_") and k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def _run(cmd, cwd, timeout, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env or _user_env(), cwd=str(cwd),
                       timeout=timeout)
    assert r.returncode == 0, "%s failed (%d):\n%s\n%s" % (cmd, r.returncode, r.stdout[-4000:],
                                                          r.stderr[-8000:])
    return r


class Venv(object):
    def __init__(self, root):
        self.root = root
        self.python = str(root / "venv" / "bin" / "python")
        self.bin = str(root / "venv" / "bin")
        self.wheel = None
        self.site = None


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("wheel")
    v = Venv(root)
    r = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages",
                        str(root / "venv")], capture_output=True, text=True, timeout=180)
    if r.returncode != 0 and "ensurepip" in (r.stdout + r.stderr):
        pytest.fail("python3 -m venv needs python3-venv (ci/install-deps.sh installs it):\n"
                    + r.stderr)
    assert r.returncode == 0, r.stdout + r.stderr
    # Built by this interpreter (the venv's would add its own, new, include folder to every
    # compile command, and the torch extension would be compiled anew each run), installed
    # into the venv.
    t0 = time.monotonic()
    env = _user_env()
    env.setdefault("MAX_JOBS", "2")  # the shared CI machine's 2 cores (C build and extension)
    _run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w",
          str(root / "dist"), SHIM], root, timeout=1800, env=env)
    built = time.monotonic() - t0
    wheels = sorted(os.listdir(str(root / "dist")))
    assert len(wheels) == 1, wheels
    v.wheel = str(root / "dist" / wheels[0])
    _run([v.python, "-m", "pip", "install", "--no-deps", v.wheel], root, timeout=300)
    print("wheel %s built in %.0f s, installed in %.0f s" % (
        wheels[0], built, time.monotonic() - t0 - built))
    v.site = _run([v.python, "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"],
                  root, 60).stdout.strip()
    return v


@needs_source_build
def test_wheel_files_and_tags(venv):
    with zipfile.ZipFile(venv.wheel) as z:
        infos = z.infolist()
        names = [i.filename for i in infos]
        wheel_meta = z.read("dlpg-%s.dist-info/WHEEL" % VERSION).decode()
        record = z.read("dlpg-%s.dist-info/RECORD" % VERSION).decode()
    print("\n".join("%10d  %s" % (i.file_size, i.filename) for i in infos))
    print(wheel_meta)
    tags = [l.split(": ", 1)[1] for l in wheel_meta.splitlines() if l.startswith("Tag: ")]
    # It holds a CPython- and torch-specific extension: CPython's tag, not py3-none.
    assert tags == ["%s-%s-linux_x86_64" % (TAG, TAG)], tags
    assert os.path.basename(venv.wheel) == "dlpg-%s-%s-%s-linux_x86_64.whl" % (VERSION, TAG, TAG)
    assert "Root-Is-Purelib: false" in wheel_meta
    native = {n.split("/")[-1] for n in names if n.startswith("dlpg/_native/")}
    for need in ("libdlpg.so", "dlpg-store", "dlpg-info", "libgloo.so.0", "libhiredis.so.0.14",
                 "libibverbs.so.1", "libcrypto.so.3"):
        assert need in native, (need, sorted(native))
    if NCCL:
        assert "libdlpg_nccl.so" in native and "libcudart.so.13" in native, sorted(native)
    # Neither the CUDA driver, nor NCCL (the machine's or torch's), nor a C/C++ runtime.
    assert not [n for n in native if n.startswith(("libcuda.", "libnccl", "libc.", "libstdc++"))]
    assert any(n.startswith("dlpg/torch/_C_dlpg.") and n.endswith(".so") for n in names), names
    for need in ("dlpg/torch/_C_dlpg.stamp", "dlpg/include/dlpg/dlpg.h",
                 "dlpg/include/dlpg/dlpg_version.h", "dlpg/torch/csrc/backend.cpp",
                 "dlpg/__main__.py", "dlpg-%s.dist-info/entry_points.txt" % VERSION):
        assert need in names, need
    # Every file is in the RECORD (what pip uninstall removes).
    recorded = {l.split(",")[0] for l in record.splitlines() if l}
    assert set(names) == recorded, set(names) ^ recorded
    for i in infos:
        if i.filename.startswith("dlpg/_native/dlpg-"):
            assert (i.external_attr >> 16) & 0o111, "%s is not executable" % i.filename
    with zipfile.ZipFile(venv.wheel) as z:
        lib = z.read("dlpg/_native/libdlpg.so")
    assert b"libasan.so" not in lib and b"__asan_init" not in lib, "a sanitizer build"


NUMPY_RANK = """
import sys
import numpy as np
import dlpg
assert dlpg.__file__.startswith(sys.prefix), (dlpg.__file__, sys.prefix)
assert dlpg.__version__ == sys.argv[3], dlpg.__version__
url, rank = sys.argv[1], int(sys.argv[2])
g = dlpg.Group(dlpg.Store(url), rank, 2, timeout=60)
data = lambda r: np.random.default_rng(100 + r).standard_normal(1000).astype(np.float32)
x = data(rank)
g.allreduce(x)
assert np.allclose(x, data(0) + data(1), rtol=1e-5, atol=1e-5), x[:4]
print("NUMPY-OK", dlpg.library_path())
"""


def _pair(venv, script, args_of_rank, timeout=180):
    path = venv.root / ("rank_%d.py" % abs(hash(script)))
    path.write_text(script)
    procs = [subprocess.Popen([venv.python, str(path)] + args_of_rank(r), cwd=str(venv.root),
                              env=_user_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for r in range(2)]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            outs.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for rank, (rc, out, err) in enumerate(outs):
        assert rc == 0, "rank %d exited %d:\n%s\n%s" % (rank, rc, out, err)
    return outs


@needs_source_build
def test_numpy_group_on_dlpg_store_from_path(venv):
    """dlpg-store is a command on the venv's PATH (the console script runs the tool the wheel
    carries); two NumPy ranks meet on it."""
    env = _user_env()
    env["PATH"] = venv.bin + os.pathsep + env.get("PATH", "")
    server = subprocess.Popen(["dlpg-store", "--host", "127.0.0.1", "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env, cwd=str(venv.root))
    try:
        line = server.stdout.readline()
        assert line.startswith("dlpg-store listening on 127.0.0.1:"), (line, server.stderr.read()
                                                                     if server.poll() else "")
        url = "tcp://" + line.split()[3]
        outs = _pair(venv, NUMPY_RANK, lambda r: [url, str(r), VERSION])
    finally:
        server.terminate()
        server.wait(30)
    for _, out, _ in outs:
        lib = out.split("NUMPY-OK ", 1)[1].strip()
        assert lib == os.path.join(venv.site, "dlpg", "_native", "libdlpg.so"), lib
    info = _run([os.path.join(venv.bin, "dlpg-info")], venv.root, 60, env)
    assert VERSION in info.stdout, info.stdout
    r = _run([venv.python, "-m", "dlpg", "info"], venv.root, 60, env)
    assert r.stdout == info.stdout


TORCH_RANK = """
import sys
import torch, torch.distributed as dist
import dlpg.torch
assert dlpg.torch.IMPLEMENTATION == "cpp", dlpg.torch.IMPLEMENTATION
rank, init = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("dlpg", init_method=init, rank=rank, world_size=2)
data = lambda r: torch.randn(333, generator=torch.Generator().manual_seed(7 + r))
x = data(rank)
dist.all_reduce(x)
assert torch.allclose(x, data(0) + data(1)), x[:4]
dist.destroy_process_group()
print("TORCH-OK", dlpg.torch.IMPLEMENTATION, dlpg.torch._native.__file__)
"""


@needs_source_build
def test_torch_dlpg_backend_is_the_cpp_one(venv):
    pytest.importorskip("torch")
    init = "file://" + str(venv.root / "torch-rendezvous")
    outs = _pair(venv, TORCH_RANK, lambda r: [str(r), init])
    for _, out, err in outs:
        ext = out.split("TORCH-OK cpp ", 1)[1].strip()
        assert ext.startswith(os.path.join(venv.site, "dlpg", "torch", "_C_dlpg.")), ext
        assert "building" not in err, err  # the wheel's own extension, no rebuild


@needs_source_build
def test_uninstall_removes_every_file(venv):
    files = _run([venv.python, "-m", "pip", "show", "-f", "dlpg"], venv.root, 60).stdout
    assert "_native/libdlpg.so" in files and "_C_dlpg." in files, files
    _run([venv.python, "-m", "pip", "uninstall", "-y", "dlpg"], venv.root, 120)
    left = [p for p in os.listdir(venv.site) if p.startswith("dlpg")]
    assert not left, left
    assert not [p for p in os.listdir(venv.bin) if p.startswith("dlpg")]
    r = subprocess.run([venv.python, "-c", "import dlpg"], capture_output=True, text=True,
                       env=_user_env(), cwd=str(venv.root), timeout=60)
    assert r.returncode != 0 and "No module named 'dlpg'" in r.stderr, r.stderr


def _fake_build(folder, *cc_flags):
    """A folder that looks like a dlpg build to setup.py: a libdlpg.so compiled with cc_flags
    and the two tools (copies of true(1): setup.py stops before using them)."""
    folder.mkdir()
    (folder / "f.c").write_text("int dlpg_fake(void) { return 1; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", str(folder / "f.c"), "-o", str(folder / "libdlpg.so")]
                   + list(cc_flags), check=True, timeout=120)
    for t in ("dlpg-store", "dlpg-info"):
        shutil.copy(shutil.which("true"), str(folder / t))
    return folder


def _wheel_from(tmp_path, build):
    env = dict(_user_env(), DLPG_BUILD_DIR=str(build))
    return subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation",
                           "--no-deps", "-w", str(tmp_path / "dist"), SHIM], capture_output=True,
                          text=True, env=env, cwd=str(tmp_path), timeout=600)


def test_sanitizer_build_is_refused(tmp_path):
    build = _fake_build(tmp_path / "build-asan", "-fsanitize=address")
    r = _wheel_from(tmp_path, build)
    assert r.returncode != 0, r.stdout
    assert "%s is a sanitizer build" % (build / "libdlpg.so") in r.stdout + r.stderr, r.stderr
    assert not (tmp_path / "dist").exists() or not os.listdir(str(tmp_path / "dist"))


@pytest.mark.skipif(not _HIREDIS, reason="the fake build links libhiredis (libhiredis-dev)")
def test_build_without_origin_run_path_is_refused(tmp_path):
    """Its bundled dependencies would not be found beside it: refused, naming the option."""
    build = _fake_build(tmp_path / "build-plain", "-Wl,--no-as-needed", "-lhiredis")
    r = _wheel_from(tmp_path, build)
    assert r.returncode != 0, r.stdout
    out = r.stdout + r.stderr
    assert "needs an $ORIGIN RPATH to find libhiredis" in out and "-DDLPG_ORIGIN_RPATH=ON" in out, \
        out[-3000:]
