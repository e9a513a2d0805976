"""Finding, or building once, the C++ torch backend dlpg.torch._C_dlpg for the torch this
process runs.

One way, wheel and checkout alike: the extension is compiled by torch's own
torch.utils.cpp_extension at the first `import dlpg.torch` (or ahead of it, by
`python -m dlpg.build_torch_ext`) into a per-build cache folder (DLPG_TORCH_EXT_CACHE, else
$XDG_CACHE_HOME/dlpg/torch-ext, else ~/.cache/dlpg/torch-ext; one folder per torch version,
Python ABI and sources), under a file lock (every rank of a job imports at once: one builds,
the others wait and then load its result), saying so on one line. The wheel ships no compiled
extension, so it serves whatever torch it meets. When it cannot be built, ImportError names
what is missing (a compiler, ninja, headers). There is no other torch backend to fall back to.

It lives outside dlpg.torch so that building does not import the backend being built.
"""

import fcntl
import importlib.util
import os
import re
import shutil
import sys
import sysconfig

from . import _torch_ext as spec

MODULE = "dlpg.torch." + spec.NAME


def cache_root():
    env = os.environ.get("DLPG_TORCH_EXT_CACHE")
    if env:
        return env
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dlpg", "torch-ext")


def wanted():
    import torch
    return spec.stamp(torch.__version__)


def cache_folder(stamp):
    torch_version, py, digest = re.match(r"torch (.*); python (.*); sources (.*)$", stamp).groups()
    name = "torch%s-%s-%s" % (re.sub(r"[^\w.]", "_", torch_version), py, digest)
    return os.path.join(cache_root(), name)


def missing_tools():
    """What building the extension needs and this machine lacks, in words ([] if nothing)."""
    from torch.utils import cpp_extension
    out = []
    cxx = os.environ.get("CXX", "c++").split()[0]
    if shutil.which(cxx) is None:
        out.append("a C++ compiler (%s is not on the PATH: install g++, or set CXX)" % cxx)
    if not cpp_extension.is_ninja_available():
        out.append("ninja (install ninja-build, or pip install ninja)")
    if not any(os.path.exists(os.path.join(d, "torch", "extension.h"))
               for d in cpp_extension.include_paths()):
        out.append("torch's C++ headers (no torch/extension.h in %s; Debian: libtorch-dev)"
                   % cpp_extension.include_paths()[0])
    py_inc = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(py_inc, "Python.h")):
        out.append("Python's headers (no %s/Python.h; Debian: python3-dev)" % py_inc)
    try:
        spec.dlpg_include()
    except RuntimeError as e:
        out.append(str(e))
    return out


def build(folder, stamp, verbose=False):
    """Compile the extension into folder (its build files stay there: a rebuild is
    incremental) and write its stamp; returns the .so's path."""
    import torch
    missing = missing_tools()
    if missing:
        raise ImportError("dlpg.torch: the C++ backend is not built for torch %s and cannot be "
                          "built here; missing: %s" % (torch.__version__, "; ".join(missing)))
    from torch.utils import cpp_extension
    os.makedirs(folder, exist_ok=True)
    includes = spec.include_dirs(os.path.join(folder, "include"), cpp_extension.include_paths())
    try:
        cpp_extension.load(name=spec.NAME, sources=[spec.unity_source(folder)],
                           extra_include_paths=includes,
                           extra_cflags=spec.CFLAGS,
                           extra_ldflags=["-l" + lib for lib in spec.LIBRARIES],
                           build_directory=folder, with_cuda=False, verbose=verbose,
                           is_python_module=False)
    except Exception as e:  # noqa: BLE001 - the compiler's output is in the message
        raise ImportError("dlpg.torch: building the C++ backend in %s failed: %s" % (folder, e))
    spec.write_stamp(folder, stamp)
    return os.path.join(folder, spec.NAME + ".so")


def cached_build(stamp, verbose=False):
    """The cache's extension for stamp, built now (once, under the folder's lock) if needed;
    verbose shows the compiler's commands."""
    folder = cache_folder(stamp)
    so = os.path.join(folder, spec.NAME + ".so")
    if spec.read_stamp(folder) == stamp and os.path.exists(so):
        return so
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        if spec.read_stamp(folder) != stamp or not os.path.exists(so):
            print("dlpg.torch: building the C++ backend for %s into %s (once per torch; "
                  "about 30 s on 2 cores)" % (stamp.split(";")[0], folder), file=sys.stderr, flush=True)
            build(folder, stamp, verbose=verbose)
    return so


def import_file(path):
    s = importlib.util.spec_from_file_location(MODULE, path)
    module = importlib.util.module_from_spec(s)
    try:
        s.loader.exec_module(module)
    except ImportError as e:
        raise ImportError("dlpg.torch: %s does not import (%s); delete it to have it rebuilt"
                          % (path, str(e).splitlines()[0]))
    sys.modules[MODULE] = module
    return module


def load():
    """The extension module for this torch, from the cache (built there first if needed)."""
    return import_file(cached_build(wanted()))
