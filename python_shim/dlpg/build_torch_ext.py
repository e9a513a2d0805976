"""Build the C++ torch backend: `python3 -m dlpg.build_torch_ext [-v]`.

(It lives outside dlpg.torch so that building does not import the backend being built.)

Compiles dlpg/torch/csrc/*.cpp against the torch that is installed (its headers, its
pybind11 and its ABI flags, through torch.utils.cpp_extension; no download) into
dlpg/torch/_C_dlpg.so beside this file. `import dlpg.torch` uses it when it imports, else
the Python backend. The extension does not link libdlpg: it dlopens the library that
dlpg._abi finds and reaches it through dlpg_get_api.
"""

import glob
import os
import shutil
import sys
import tempfile

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch")
NAME = "_C_dlpg"


def _dlpg_include():
    """The folder holding dlpg/dlpg.h: DLPG_INCLUDE, the repository's include/, or the
    package's own copy (dlpg/include, put there by the wheel build)."""
    shim = os.path.dirname(os.path.dirname(HERE))
    for d in (os.environ.get("DLPG_INCLUDE"), os.path.join(os.path.dirname(shim), "include"),
              os.path.join(os.path.dirname(HERE), "include")):
        if d and os.path.exists(os.path.join(d, "dlpg", "dlpg.h")):
            return d
    raise RuntimeError("dlpg.build_torch_ext: dlpg/dlpg.h not found; set DLPG_INCLUDE to the "
                       "folder that holds dlpg/dlpg.h")


def _version_include(build_dir, dlpg_include):
    """dlpg.h includes dlpg/dlpg_version.h, which a CMake build generates (and an install and
    the package's own copy carry beside dlpg.h). The repository's include/ has none: generate
    it as CMake does."""
    if os.path.exists(os.path.join(dlpg_include, "dlpg", "dlpg_version.h")):
        return []
    from . import _version
    d = os.path.join(build_dir, "dlpg-version-include")
    os.makedirs(os.path.join(d, "dlpg"), exist_ok=True)
    with open(os.path.join(d, "dlpg", "dlpg_version.h"), "w") as f:
        f.write(_version.header_text(_version.version_tuple()))
    return [d]


def _dlpack_include(build_dir, torch_includes):
    """dlpg.h includes <dlpack/dlpack.h>. Where no dlpack.h is installed (pip's torch ships
    only ATen/dlpack.h), a one-line header that includes torch's copy stands in."""
    for d in ["/usr/include", "/usr/local/include"] + list(torch_includes):
        if os.path.exists(os.path.join(d, "dlpack", "dlpack.h")):
            return []
    d = os.path.join(build_dir, "dlpack-include")
    os.makedirs(os.path.join(d, "dlpack"), exist_ok=True)
    with open(os.path.join(d, "dlpack", "dlpack.h"), "w") as f:
        f.write("#pragma once\n#include <ATen/dlpack.h>\n")
    return [d]


def build(verbose=False, build_dir=None):
    """Compile the extension and copy it beside this file; returns its path."""
    import torch  # noqa: F401 - cpp_extension needs the loaded torch
    from torch.utils import cpp_extension
    sources = sorted(glob.glob(os.path.join(HERE, "csrc", "*.cpp")))
    build_dir = build_dir or os.environ.get("DLPG_TORCH_BUILD_DIR") or os.path.join(
        tempfile.gettempdir(), "dlpg-torch-ext-%d" % os.getuid())
    os.makedirs(build_dir, exist_ok=True)
    dlpg_include = _dlpg_include()
    includes = ([dlpg_include] + _version_include(build_dir, dlpg_include) +
                _dlpack_include(build_dir, cpp_extension.include_paths()))
    cpp_extension.load(name=NAME, sources=sources, extra_include_paths=includes,
                       extra_cflags=["-O2", "-std=c++17", "-Wno-unused-parameter"],
                       extra_ldflags=["-ldl"], build_directory=build_dir, with_cuda=False,
                       verbose=verbose, is_python_module=False)
    built = os.path.join(build_dir, NAME + ".so")
    target = os.path.join(HERE, NAME + ".so")
    tmp = target + ".tmp%d" % os.getpid()
    shutil.copyfile(built, tmp)
    os.replace(tmp, target)  # atomic: a concurrent import sees the old or the new file
    return target


def main(argv):
    path = build(verbose="-v" in argv)
    print("dlpg.build_torch_ext: built %s" % path)


if __name__ == "__main__":
    main(sys.argv[1:])
