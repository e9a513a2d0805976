"""What the C++ torch backend (dlpg/torch/csrc) is compiled from and for: its sources, include
folders and flags, and the stamp that ties a build to one torch, one Python and one set of
sources. Standard library only: dlpg._torch_load uses it at import time, before the
extension it describes exists."""

import glob
import hashlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(HERE, "torch", "csrc")
NAME = "_C_dlpg"
STAMP = NAME + ".stamp"
# Warnings on; the C++ standard is torch's own (torch 2.13 compiles extensions as C++20).
CFLAGS = ["-O2", "-Wall", "-Wextra"]
# libstdc++ by its soname, ahead of the compiler's own -lstdc++, so that every libstdc++
# function the extension calls is the process's one: built without it on the GPU machine
# (g++ 13.3, Ubuntu 24.04, torch 2.11), the extension ran its own copy of the iostream code
# (gdb: the crash in basic_ostream::_M_insert<long> inside _C_dlpg.so) and crashed formatting
# its first error message; built with it, the same tests passed there.
LIBRARIES = ["dl", ":libstdc++.so.6"]


def sources():
    return sorted(glob.glob(os.path.join(CSRC, "*.cpp")))


def dlpg_include():
    """The folder holding dlpg/dlpg.h: DLPG_INCLUDE, the checkout's include/, or the
    package's own copy (dlpg/include, which the wheel carries)."""
    repo = os.path.dirname(os.path.dirname(HERE))
    for d in (os.environ.get("DLPG_INCLUDE"), os.path.join(repo, "include"),
              os.path.join(HERE, "include")):
        if d and os.path.exists(os.path.join(d, "dlpg", "dlpg.h")):
            return d
    raise RuntimeError("dlpg: dlpg/dlpg.h not found in %s or the package; set DLPG_INCLUDE to "
                       "the folder that holds dlpg/dlpg.h" % os.path.join(repo, "include"))


def include_dirs(gen_dir, torch_includes):
    """dlpg.h's folder, plus generated stand-ins written into gen_dir for what it includes
    and this machine may lack: dlpg/dlpg_version.h (a CMake build generates it; the checkout's
    include/ has none), and dlpack/dlpack.h where no dlpack is installed (pip's torch ships
    only ATen/dlpack.h, the same header: a one-line header includes it)."""
    inc = dlpg_include()
    out = [inc]
    if not os.path.exists(os.path.join(inc, "dlpg", "dlpg_version.h")):
        from_path = os.path.join(HERE, "_version.py")
        import importlib.util
        spec = importlib.util.spec_from_file_location("_dlpg_ext_version", from_path)
        vm = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(vm)
        _write(os.path.join(gen_dir, "dlpg", "dlpg_version.h"),
               vm.header_text(vm.from_header() or vm.from_cmakelists()))
        out.append(gen_dir)
    if not any(os.path.exists(os.path.join(d, "dlpack", "dlpack.h"))
               for d in ["/usr/include", "/usr/local/include"] + list(torch_includes)):
        _write(os.path.join(gen_dir, "dlpack", "dlpack.h"),
               "#pragma once\n#include <ATen/dlpack.h>\n")
        if gen_dir not in out:
            out.append(gen_dir)
    return out


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    old = None
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
    if old != text:  # unchanged headers keep their time: no needless recompiles
        with open(path, "w") as f:
            f.write(text)


def sources_digest():
    """sha256 (16 hex digits) of the C++ sources, dlpg.h and the compiler flags: a build of
    other sources, or with other flags, is another build (another cache folder)."""
    h = hashlib.sha256()
    h.update(" ".join(CFLAGS + LIBRARIES).encode() + b"\0")
    files = sorted(glob.glob(os.path.join(CSRC, "*.cpp")) + glob.glob(os.path.join(CSRC, "*.h")))
    files.append(os.path.join(dlpg_include(), "dlpg", "dlpg.h"))
    for p in files:
        h.update(os.path.basename(p).encode() + b"\0")
        with open(p, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def stamp(torch_version):
    """One line naming what a build is for: torch version, CPython ABI, sources."""
    return "torch %s; python %s; sources %s" % (
        torch_version, sys.implementation.cache_tag, sources_digest())


def read_stamp(folder):
    try:
        with open(os.path.join(folder, STAMP)) as f:
            return f.read().strip()
    except OSError:
        return None


def write_stamp(folder, text):
    tmp = os.path.join(folder, STAMP + ".tmp%d" % os.getpid())
    with open(tmp, "w") as f:
        f.write(text + "\n")
    os.replace(tmp, os.path.join(folder, STAMP))
