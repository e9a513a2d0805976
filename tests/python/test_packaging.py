"""The wheel as a user gets it: built by ci/wheel.sh (pip from pyproject.toml, scikit-build-core
over the project's CMake, with build isolation; then auditwheel repair), installed into a
fresh venv, and used from another folder with no DLPG_* variable, no PYTHONPATH and no
LD_LIBRARY_PATH: a NumPy group on a dlpg-store from the PATH, torch's "dlpg" backend in C++,
a jitted dlpg.jax allreduce on three CPU-platform processes, dlpg_allreduce_perf, a C program
compiled and linked against the installed package; then uninstalled without a trace.

The fresh venv sees the test's own interpreter's packages (torch, jax, NumPy: the project
venv's) through a .pth file, as --system-site-packages would show a system's; dlpg itself
comes only from the wheel."""

import os
import subprocess
import sys
import sysconfig
import zipfile

import pytest

from conftest import REPO

from dlpg import _version

VERSION = "%d.%d.%d" % _version.from_cmakelists(os.path.join(REPO, "CMakeLists.txt"))
# CMake's NCCL path is ON here (cmake/FindNCCL.cmake: NCCL_ROOT, then CUDA's folders).
NCCL = any(os.path.exists(os.path.join(d, "include", "nccl.h"))
           for d in (os.environ.get("NCCL_ROOT", "/nonexistent"), "/usr/local/cuda"))

# Building from source needs Gloo and hiredis (Debian's libgloo-dev and libhiredis-dev, which
# ci/install-deps.sh installs) and auditwheel (the project venv). The GPU machine has no
# Gloo: there ci/gpu-wheel.sh installs the wheel ci/gpu-bundle.sh built here.
pytestmark = [
    pytest.mark.skipif(not (os.path.exists("/usr/include/hiredis/hiredis.h")
                            and os.path.isdir("/usr/include/gloo")),
                       reason="no Gloo or hiredis headers (libgloo-dev, libhiredis-dev) to build "
                              "the wheel from source; ci/gpu-wheel.sh covers the GPU machine"),
    pytest.mark.skipif(subprocess.run([sys.executable, "-m", "auditwheel", "--version"],
                                      capture_output=True).returncode != 0,
                       reason="auditwheel is not installed for this interpreter "
                              "(ci/install-deps.sh puts it in the project venv)"),
]


def _user_env():
    """The environment of a user who has just installed the wheel: nothing of ours."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("DLPG_") and k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}


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

    def env(self):
        env = _user_env()
        env["PATH"] = self.bin + os.pathsep + env.get("PATH", "")
        return env


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("wheel")
    v = Venv(root)
    _run([sys.executable, "-m", "venv", str(root / "venv")], root, timeout=180)
    v.site = _run([v.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                  root, 60).stdout.strip()
    with open(os.path.join(v.site, "base-packages.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    # CMAKE_BUILD_PARALLEL_LEVEL: the shared CI machine's 2 cores.
    env = dict(_user_env(), CMAKE_BUILD_PARALLEL_LEVEL=os.environ.get("MAX_JOBS", "2"))
    _run(["bash", os.path.join(REPO, "ci", "wheel.sh"), str(root / "dist"), sys.executable],
         REPO, timeout=1800, env=env)
    wheels = sorted(os.listdir(str(root / "dist")))
    assert len(wheels) == 1, wheels
    v.wheel = str(root / "dist" / wheels[0])
    _run([v.python, "-m", "pip", "install", "--no-deps", v.wheel], root, timeout=300)
    return v


def test_wheel_files_and_tags(venv):
    with zipfile.ZipFile(venv.wheel) as z:
        infos = z.infolist()
        names = [i.filename for i in infos]
        wheel_meta = z.read("dlpg-%s.dist-info/WHEEL" % VERSION).decode()
        record = z.read("dlpg-%s.dist-info/RECORD" % VERSION).decode()
        script = z.read("dlpg/_native/libdlpg.so").decode()
        lib = z.read("dlpg/_native/libdlpg.so.0")
    print("\n".join("%10d  %s" % (i.file_size, i.filename) for i in infos))
    print(wheel_meta)
    tags = [l.split(": ", 1)[1] for l in wheel_meta.splitlines() if l.startswith("Tag: ")]
    # No Python extension module (ctypes, and the torch extension compiled at first import):
    # any CPython 3; auditwheel's manylinux tag for the glibc it needs.
    assert len(tags) == 1 and tags[0].startswith("py3-none-manylinux_2_"), tags
    assert tags[0].endswith("_x86_64"), tags
    assert "Root-Is-Purelib: false" in wheel_meta
    native = {n.split("/")[-1] for n in names if n.startswith("dlpg/_native/")}
    for need in ("libdlpg.so.0", "libdlpg.so", "libdlpg_xla.so", "dlpg-store", "dlpg-info",
                 "dlpg-bench", "dlpg.pc"):
        assert need in native, (need, sorted(native))
    # The link-time name is a linker script naming the one real file (a wheel has no links).
    assert "INPUT(libdlpg.so.0)" in script, script
    assert lib[:4] == b"\x7fELF", "libdlpg.so.0 is not an ELF file"
    assert b"libasan.so" not in lib and b"__asan_init" not in lib, "a sanitizer build"
    bundled = [n.split("/")[-1] for n in names if n.startswith("dlpg.libs/")]
    for need in ("libgloo-", "libhiredis-", "libcrypto-", "libibverbs-"):
        assert [b for b in bundled if b.startswith(need)], (need, bundled)
    if NCCL:
        assert "libdlpg_nccl.so" in native and [b for b in bundled if b.startswith("libcudart")]
    # Neither the CUDA driver, nor NCCL, nor a C/C++ runtime.
    assert not [n for n in bundled + list(native)
                if n.startswith(("libcuda.", "libcuda-", "libnccl", "libc.", "libc-", "libstdc++"))]
    # The torch extension is compiled at first import, never shipped; its sources are.
    assert not [n for n in names if n.startswith("dlpg/torch/_C_dlpg")], names
    for need in ("dlpg/include/dlpg/dlpg.h", "dlpg/include/dlpg/dlpg_version.h",
                 "dlpg/include/dlpack/dlpack.h", "dlpg/torch/csrc/backend.cpp",
                 "dlpg/__main__.py", "dlpg-%s.dist-info/entry_points.txt" % VERSION):
        assert need in names, need
    # Every file is in the RECORD (what pip uninstall removes).
    recorded = {l.split(",")[0] for l in record.splitlines() if l}
    assert {n for n in names if not n.endswith("/")} == recorded, set(names) ^ recorded
    for i in infos:
        if i.filename.startswith("dlpg/_native/dlpg-"):
            assert (i.external_attr >> 16) & 0o111, "%s is not executable" % i.filename


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


def _ranks(venv, script, n, args_of_rank, timeout=300, env=None):
    path = venv.root / ("rank_%d.py" % abs(hash(script)))
    path.write_text(script)
    procs = [subprocess.Popen([venv.python, str(path)] + args_of_rank(r), cwd=str(venv.root),
                              env=env or venv.env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(n)]
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


def _store(venv):
    """A dlpg-store started from the venv's PATH (the console script runs the wheel's tool);
    (process, tcp URL)."""
    server = subprocess.Popen(["dlpg-store", "--host", "127.0.0.1", "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=venv.env(), cwd=str(venv.root))
    line = server.stdout.readline()
    if not line.startswith("dlpg-store listening on 127.0.0.1:"):
        server.kill()
        pytest.fail("dlpg-store: %r %s" % (line, server.stderr.read()))
    return server, "tcp://" + line.split()[3]


def test_numpy_group_on_dlpg_store_from_path(venv):
    server, url = _store(venv)
    try:
        outs = _ranks(venv, NUMPY_RANK, 2, lambda r: [url, str(r), VERSION])
    finally:
        server.terminate()
        server.wait(30)
    for _, out, _ in outs:
        lib = out.split("NUMPY-OK ", 1)[1].strip()
        assert lib == os.path.join(venv.site, "dlpg", "_native", "libdlpg.so.0"), lib
    info = _run(["dlpg-info"], venv.root, 60, venv.env())
    assert VERSION in info.stdout, info.stdout
    r = _run([venv.python, "-m", "dlpg", "info"], venv.root, 60, venv.env())
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


def test_torch_dlpg_backend_is_the_cpp_one(venv, tmp_path):
    pytest.importorskip("torch")
    # The extension is compiled from the installed package's sources by the first import (here
    # `python -m dlpg.build_torch_ext`, as a job's setup step would) into the per-torch cache;
    # then the two ranks load it. The cache is keyed by torch, Python and the sources' digest,
    # so the suite's own cache (DLPG_TORCH_EXT_CACHE, which ci/test.sh filled from the same
    # sources) serves where it is set; else a fresh one here, compiled now.
    cache = os.environ.get("DLPG_TORCH_EXT_CACHE") or str(tmp_path / "torch-ext")
    env = dict(venv.env(), DLPG_TORCH_EXT_CACHE=cache, MAX_JOBS=os.environ.get("MAX_JOBS", "2"))
    first = _run([venv.python, "-m", "dlpg.build_torch_ext"], venv.root, 900, env)
    assert cache in first.stdout, first.stdout
    init = "file://" + str(venv.root / "torch-rendezvous")
    outs = _ranks(venv, TORCH_RANK, 2, lambda r: [str(r), init], env=env)
    for _, out, err in outs:
        ext = out.split("TORCH-OK cpp ", 1)[1].strip()
        assert ext.startswith(cache), ext
        assert "building" not in err, err  # built once, above


JAX_RANK = """
import sys
import numpy as np
import jax, jax.numpy as jnp
import dlpg.jax as dj
url, rank, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
dj.init(url, rank=rank, world_size=n)
data = lambda r: np.random.default_rng(50 + r).standard_normal(4097).astype(np.float32)
out = jax.jit(lambda v: dj.allreduce(v * 2.0, op="sum"))(jnp.asarray(data(rank)))
ref = sum(2.0 * data(r) for r in range(n))
assert np.allclose(np.asarray(out), ref, rtol=1e-5, atol=1e-5), np.asarray(out)[:4]
dj.finalize()
print("JAX-OK", dj.library_path())
"""


def test_jitted_jax_allreduce_on_three_processes(venv):
    pytest.importorskip("jax")
    server, url = _store(venv)
    env = dict(venv.env(), JAX_PLATFORMS="cpu")
    try:
        outs = _ranks(venv, JAX_RANK, 3, lambda r: [url, str(r), "3"], env=env)
    finally:
        server.terminate()
        server.wait(30)
    for _, out, _ in outs:
        assert out.split("JAX-OK ", 1)[1].strip() == os.path.join(
            venv.site, "dlpg", "_native", "libdlpg_xla.so"), out


def test_bench_commands(venv):
    """dlpg-bench and nccl-tests' names for it are commands of the wheel."""
    r = _run(["dlpg_allreduce_perf", "--nranks", "2", "-b", "8", "-e", "64K"], venv.root, 300,
             venv.env())
    assert "Out of bounds values : 0 OK" in r.stdout, r.stdout
    r = _run(["dlpg-bench", "broadcast", "--nranks", "2", "-b", "8", "-e", "1K"], venv.root,
             300, venv.env())
    assert "Out of bounds values : 0 OK" in r.stdout, r.stdout


def test_c_program_builds_against_the_package(venv, tmp_path):
    """examples/demo.c compiled and linked against the installed package, through
    `python -m dlpg --cflags --libs` and through its pkg-config file, runs with no
    LD_LIBRARY_PATH."""
    env = venv.env()
    flags = _run([venv.python, "-m", "dlpg", "--cflags", "--libs"], tmp_path, 60, env).stdout.split()
    src = os.path.join(REPO, "examples", "demo.c")
    _run(["cc", "-Wall", "-Wextra", "-Werror", src, "-o", str(tmp_path / "demo")] + flags,
         tmp_path, 120, env)
    pc = _run([venv.python, "-m", "dlpg", "--pkgconfigdir"], tmp_path, 60, env).stdout.strip()
    pc_flags = _run(["pkg-config", "--cflags", "--libs", "dlpg"], tmp_path, 60,
                    dict(env, PKG_CONFIG_PATH=pc)).stdout.split()
    _run(["cc", src, "-o", str(tmp_path / "demo-pc")] + pc_flags, tmp_path, 120, env)
    for exe in ("demo", "demo-pc"):
        r = _run([str(tmp_path / exe), "2"], tmp_path, 120, env)
        assert "every rank checked its results: OK" in r.stdout, r.stdout
        ldd = _run(["ldd", str(tmp_path / exe)], tmp_path, 60, env).stdout
        found = [l.split(" => ")[1].split(" (")[0] for l in ldd.splitlines()
                 if l.strip().startswith("libdlpg.so.0 => ")]
        assert [os.path.realpath(p) for p in found] == [os.path.realpath(os.path.join(
            venv.site, "dlpg", "_native", "libdlpg.so.0"))], ldd


def test_uninstall_removes_every_file(venv):
    files = _run([venv.python, "-m", "pip", "show", "-f", "dlpg"], venv.root, 60).stdout
    assert "_native/libdlpg.so.0" in files and "dlpg.libs/" in files, files
    _run([venv.python, "-m", "pip", "uninstall", "-y", "dlpg"], venv.root, 120)
    left = [p for p in os.listdir(venv.site) if p.startswith("dlpg")]
    assert not left, left
    assert not [p for p in os.listdir(venv.bin) if p.startswith("dlpg")]
    r = subprocess.run([venv.python, "-c", "import dlpg"], capture_output=True, text=True,
                       env=_user_env(), cwd=str(venv.root), timeout=60)
    assert r.returncode != 0 and "No module named 'dlpg'" in r.stderr, r.stderr
