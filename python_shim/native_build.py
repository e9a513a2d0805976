"""The native half of the wheel (used by setup.py; not part of the package): libdlpg.so, the
backend modules that were built (libdlpg_nccl.so where CUDA and NCCL are, libdlpg_xla.so
where jaxlib's FFI headers are), the tools dlpg-store and dlpg-info, and the shared libraries
they need that a user's system may lack, copied side by side into dlpg/_native/.

Where they come from, never guessed: DLPG_BUILD_DIR names a build (a CMake build folder of
this project, configured with -DDLPG_ORIGIN_RPATH=ON, or a folder of such files like the GPU
bundle's .gpu/lib); without it, this checkout is configured and built in Release into
build-wheel/ (incremental, so a second wheel costs little). A sanitizer build is refused.

The libraries bundled are what ldd resolves for those files, except the C and C++ runtimes
every Linux system has (glibc, libstdc++, libgcc_s) and the CUDA driver and NCCL (the
driver is the machine's; NCCL comes with torch or the system and is 200 MB). Every file
was linked with an $ORIGIN run path (cmake/dlpg_origin_rpath.cmake), which is what makes the
copies beside it the ones it loads.
"""

import fcntl
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MODULES = ("libdlpg_nccl.so", "libdlpg_xla.so")
TOOLS = ("dlpg-store", "dlpg-info")
# Present on every system (or the machine's own: the CUDA driver), or too big to carry (NCCL).
SYSTEM = re.compile(r"^(libc|libm|libdl|libpthread|librt|libutil|libresolv|ld-linux-x86-64|"
                    r"libstdc\+\+|libgcc_s|libcuda|libnccl)\.so")
SANITIZERS = (b"libasan.so", b"__asan_init", b"libtsan.so", b"__tsan_init", b"libubsan.so")


class NativeError(RuntimeError):
    pass


def log(msg):
    print("dlpg wheel: " + msg, file=sys.stderr, flush=True)


def _jobs():
    return os.environ.get("DLPG_JOBS") or os.environ.get("MAX_JOBS") or str(os.cpu_count() or 2)


def cmake_build():
    """Configure and build this checkout in Release into build-wheel/ (under a file lock: two
    wheel builds of one checkout share the folder); returns the folder."""
    if not os.path.exists(os.path.join(REPO, "CMakeLists.txt")):
        raise NativeError("no DLPG_BUILD_DIR and no dlpg checkout around %s to build one in; "
                          "set DLPG_BUILD_DIR to a build of dlpg" % HERE)
    if shutil.which("cmake") is None:
        raise NativeError("building libdlpg.so needs cmake, which is not on the PATH (or set "
                          "DLPG_BUILD_DIR to a build of dlpg)")
    build = os.path.join(REPO, "build-wheel")
    os.makedirs(build, exist_ok=True)
    config = ["cmake", "-S", REPO, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
              "-DDLPG_BUILD_TESTS=OFF", "-DDLPG_BUILD_BENCH=OFF", "-DDLPG_ORIGIN_RPATH=ON",
              "-DDLPG_XLA_PYTHON=" + sys.executable]
    if shutil.which("ccache") and not os.environ.get("CMAKE_C_COMPILER_LAUNCHER"):
        config += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
    with open(os.path.join(build, ".wheel.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        log("building libdlpg in Release in %s (-j%s)" % (build, _jobs()))
        out = _run(config)
        targets = ["dlpg"] + list(TOOLS)
        if "dlpg: XLA FFI part ON" in out:
            targets.append("dlpg_xla")
        # dlpg depends on dlpg_nccl when the NCCL path is ON: built with it.
        _run(["cmake", "--build", build, "-j", _jobs(), "--target"] + targets)
    for line in out.splitlines():
        if line.startswith("-- dlpg: "):
            log(line[9:])
    return build


def _run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-6000:])
        raise NativeError("%s failed (exit %d)" % (" ".join(cmd[:3]), r.returncode))
    return r.stdout


def _find_tool(build, name):
    for d in (build, os.path.join(build, "tools"), os.path.join(os.path.dirname(build), "bin")):
        p = os.path.join(d, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def _check_release(path):
    with open(path, "rb") as f:
        data = f.read()
    for marker in SANITIZERS:
        if marker in data:
            raise NativeError(
                "%s is a sanitizer build (it carries %s); a wheel takes a build without "
                "-fsanitize: point DLPG_BUILD_DIR at one, or unset it to build in Release"
                % (path, marker.decode()))


def _run_path(path):
    """(tag, value) of the file's RPATH or RUNPATH, from readelf; (None, None) if none."""
    try:
        out = subprocess.run(["readelf", "-d", path], stdout=subprocess.PIPE, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise NativeError("readelf -d %s failed (%s): not an ELF file, or no readelf "
                          "(binutils) here" % (path, e))
    m = re.search(r"\((RPATH|RUNPATH)\)\s+Library r(?:un)?path: \[([^\]]*)\]", out)
    return (m.group(1), m.group(2)) if m else (None, None)


def _dependencies(path):
    """{soname: resolved path} of what path needs and a user's system may lack."""
    r = subprocess.run(["ldd", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    deps, missing = {}, []
    for line in r.stdout.splitlines():
        m = re.match(r"\s*(\S+) => (.*?)\s*(\(0x[0-9a-f]+\))?$", line)
        if not m or SYSTEM.match(m.group(1)) or m.group(1).startswith("libdlpg"):
            continue
        if m.group(2) == "not found":
            missing.append(m.group(1))
        else:
            deps[m.group(1)] = m.group(2)
    if missing:
        raise NativeError("%s needs %s, which the loader does not find here (ldd); install it "
                          "or build where it is" % (path, ", ".join(missing)))
    return deps


def collect():
    """[(file name in dlpg/_native, source path)] of everything the wheel carries natively."""
    build = os.environ.get("DLPG_BUILD_DIR")
    if build:
        build = os.path.abspath(build)
        log("taking the build in DLPG_BUILD_DIR=%s" % build)
    else:
        build = cmake_build()
    lib = os.path.join(build, "libdlpg.so")
    if not os.path.exists(lib):
        raise NativeError("%s has no libdlpg.so" % build)
    files = [("libdlpg.so", os.path.realpath(lib))]
    files += [(m, os.path.join(build, m)) for m in MODULES if os.path.exists(os.path.join(build, m))]
    for t in TOOLS:
        p = _find_tool(build, t)
        if p is None:
            raise NativeError("%s: no %s in it, tools/ or ../bin (build the target %s)"
                              % (build, t, t))
        files.append((t, p))
    deps = {}
    for name, path in files:
        _check_release(path)
        own = _dependencies(path)
        tag, value = _run_path(path)
        if own and ("$ORIGIN" not in (value or "").split(":") or tag != "RPATH"):
            raise NativeError(
                "%s has %s; its copy in the wheel needs an $ORIGIN RPATH to find %s bundled "
                "beside it: configure that build with -DDLPG_ORIGIN_RPATH=ON"
                % (path, "%s %s" % (tag, value) if tag else "no run path",
                   ", ".join(sorted(own))))
        deps.update(own)
    for soname, path in sorted(deps.items()):
        _check_release(path)
        files.append((soname, path))
    log("native files: " + ", ".join(n for n, _ in files))
    return files


def copy_into(folder, files):
    os.makedirs(folder, exist_ok=True)
    for name, path in files:
        target = os.path.join(folder, name)
        shutil.copyfile(path, target)
        os.chmod(target, 0o755)
