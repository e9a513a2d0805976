"""In-tree PEP 517 build backend of the dlpg Python package.

It needs nothing but the standard library, so `pip install ./python_shim` works offline even
with pip's build isolation (a backend that must first be downloaded, such as setuptools,
cannot be installed into the isolated environment without an index). It builds a wheel of
the `dlpg` package (plus `dlpg/libdlpg.so*` when one was copied beside the package, which
makes the wheel platform-specific; from a checkout without one, the newest ../build*/libdlpg.so
or one built now with the project's CMake), an sdist, and an editable wheel (a .pth file pointing
at this directory). Name and the other metadata come from pyproject.toml; the version from
CMake's project() line in ../CMakeLists.txt (in an sdist, from the dlpg_version.h generated
from it), read by dlpg/_version.py.
"""
import base64
import glob
import hashlib
import importlib.util
import io
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile

_ROOT = os.path.dirname(os.path.abspath(__file__))
_PACKAGE = "dlpg"


def _version_module():
    """dlpg/_version.py, loaded by path (importing the package would run its __init__)."""
    spec = importlib.util.spec_from_file_location(
        "_dlpg_build_version", os.path.join(_ROOT, _PACKAGE, "_version.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _version():
    """(major, minor, patch): the checkout's CMakeLists.txt, else (an sdist) the package's
    generated dlpg_version.h."""
    vm = _version_module()
    v = vm.from_cmakelists() or vm.from_header()
    if v is None:
        raise RuntimeError("dlpg_build: no version: neither %s nor %s" % (vm.CMAKELISTS, vm.HEADER))
    return v


def _project():
    """The [project] table of pyproject.toml (tomllib, or a small reader before 3.11), with
    its dynamic version filled in."""
    project = _project_table()
    project["version"] = "%d.%d.%d" % _version()
    return project


def _project_table():
    with open(os.path.join(_ROOT, "pyproject.toml"), "rb") as f:
        raw = f.read()
    try:
        import tomllib
        return tomllib.loads(raw.decode("utf-8"))["project"]
    except ImportError:
        pass
    # Python < 3.11: the keys this backend uses are plain `key = "string"` lines of
    # [project], and `name = [...]` lines of [project.optional-dependencies].
    project, section = {"optional-dependencies": {}}, None
    for line in raw.decode("utf-8").splitlines():
        m = re.match(r"\s*\[([^\]]+)\]", line)
        if m:
            section = m.group(1).strip()
            continue
        m = re.match(r'\s*([\w-]+)\s*=\s*(.+?)\s*$', line)
        if not m:
            continue
        key, value = m.group(1), m.group(2)
        if section == "project" and value.startswith('"'):
            project[key] = value.strip('"')
        elif section == "project.optional-dependencies":
            project["optional-dependencies"][key] = re.findall(r'"([^"]+)"', value)
    return project


def _metadata(project):
    lines = [
        "Metadata-Version: 2.1",
        "Name: %s" % project["name"],
        "Version: %s" % project["version"],
        "Summary: %s" % project.get("description", ""),
        "Requires-Python: %s" % project.get("requires-python", ">=3.8"),
    ]
    for extra, reqs in sorted(project.get("optional-dependencies", {}).items()):
        lines.append("Provides-Extra: %s" % extra)
        lines += ['Requires-Dist: %s; extra == "%s"' % (r, extra) for r in reqs]
    readme = os.path.join(_ROOT, project.get("readme", "README.md"))
    body = ""
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            body = f.read()
    return "\n".join(lines) + "\n\n" + body


def _is_package_file(name):
    """Modules, the C++ torch backend's sources, and native files built beside the package
    (libdlpg.so*, the torch extension _C_dlpg*.so)."""
    return (name.endswith((".py", ".cpp", ".h")) or name.startswith("libdlpg.so") or
            (name.startswith("_C_dlpg") and name.endswith(".so")))


def _package_files():
    """(path in the wheel, path on disk or the file's bytes) of every package file, and
    whether any is native. The ABI header comes from the checkout's include/ (as
    dlpg/include/dlpg/dlpg.h) with the version header it includes (generated here as CMake
    generates it), so an installed package can still build its torch extension."""
    out, native = [], False
    for dirpath, dirnames, filenames in os.walk(os.path.join(_ROOT, _PACKAGE)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if _is_package_file(name):
                native |= name.endswith(".so") or ".so." in name
                disk = os.path.join(dirpath, name)
                out.append((os.path.relpath(disk, _ROOT).replace(os.sep, "/"), disk))
    header = os.path.join(os.path.dirname(_ROOT), "include", "dlpg", "dlpg.h")
    if os.path.exists(header) and not any(a.endswith("include/dlpg/dlpg.h") for a, _ in out):
        out.append((_PACKAGE + "/include/dlpg/dlpg.h", header))
        vm = _version_module()
        out.append((_PACKAGE + "/include/dlpg/dlpg_version.h",
                    vm.header_text(_version()).encode("utf-8")))
    return out, native


def _read(disk):
    """A _package_files entry's bytes."""
    if isinstance(disk, bytes):
        return disk
    with open(disk, "rb") as f:
        return f.read()


def _checkout_library(log):
    """(arcname, disk) of the libdlpg.so a wheel built from a checkout carries: the newest
    ../build*/libdlpg.so, else one built now with the project's CMake (offline: its
    dependencies are system packages). None outside a checkout or when CMake fails."""
    repo = os.path.dirname(_ROOT)
    if not os.path.exists(os.path.join(repo, "CMakeLists.txt")):
        return None
    builds = sorted(glob.glob(os.path.join(repo, "build*", "libdlpg.so")), key=os.path.getmtime)
    if builds:
        log("dlpg_build: bundling %s" % builds[-1])
        return (_PACKAGE + "/libdlpg.so", os.path.realpath(builds[-1]))
    build = os.path.join(repo, "build-wheel")
    log("dlpg_build: no built libdlpg.so in %s/build*; building it with CMake in %s" % (repo, build))
    try:
        subprocess.run(["cmake", "-S", repo, "-B", build, "-DCMAKE_BUILD_TYPE=Release"],
                       check=True, stdout=sys.stderr)
        subprocess.run(["cmake", "--build", build, "--target", "dlpg", "-j",
                        str(os.cpu_count() or 2)], check=True, stdout=sys.stderr)
    except (OSError, subprocess.CalledProcessError) as e:
        log("dlpg_build: CMake could not build libdlpg.so (%s); the wheel carries no library "
            "and dlpg will look for an installed one (pkg-config, the system loader)" % e)
        return None
    lib = os.path.join(build, "libdlpg.so")
    return (_PACKAGE + "/libdlpg.so", os.path.realpath(lib)) if os.path.exists(lib) else None


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arcname, digest, len(data))


def _write_wheel(directory, entries, tag):
    """entries: (arcname, bytes). Adds the dist-info and returns the wheel's file name."""
    project = _project()
    name, version = project["name"], project["version"]
    dist_info = "%s-%s.dist-info" % (name, version)
    entries = list(entries) + [
        (dist_info + "/METADATA", _metadata(project).encode("utf-8")),
        (dist_info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: dlpg_build\n"
                                "Root-Is-Purelib: %s\nTag: %s\n"
                                % ("true" if tag == "py3-none-any" else "false", tag)).encode()),
    ]
    record = "\n".join(_record_line(a, d) for a, d in entries) + "\n%s/RECORD,,\n" % dist_info
    entries.append((dist_info + "/RECORD", record.encode("utf-8")))
    wheel = "%s-%s-%s.whl" % (name, version, tag)
    with zipfile.ZipFile(os.path.join(directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, data in entries:
            z.writestr(arcname, data)
    return wheel


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files, native = _package_files()
    if not any(a.startswith(_PACKAGE + "/libdlpg.so") for a, _ in files):
        lib = _checkout_library(lambda m: print(m, file=sys.stderr))
        if lib is not None:
            files.append(lib)
            native = True
    entries = [(arcname, _read(disk)) for arcname, disk in files]
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return _write_wheel(wheel_directory, entries,
                        "py3-none-%s" % platform if native else "py3-none-any")


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # The package stays where it is: a .pth file puts this directory on sys.path.
    return _write_wheel(wheel_directory, [("_dlpg_editable.pth", (_ROOT + "\n").encode())],
                        "py3-none-any")


def build_sdist(sdist_directory, config_settings=None):
    project = _project()
    base = "%s-%s" % (project["name"], project["version"])
    name = base + ".tar.gz"
    files, _ = _package_files()
    extra = [n for n in ("pyproject.toml", "README.md", "dlpg_build.py")
             if os.path.exists(os.path.join(_ROOT, n))]
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tar:
        def add_bytes(arcname, data):
            info = tarfile.TarInfo("%s/%s" % (base, arcname))
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for arcname, disk in [(n, os.path.join(_ROOT, n)) for n in extra] + files:
            if isinstance(disk, bytes):
                add_bytes(arcname, disk)
            else:
                tar.add(disk, arcname="%s/%s" % (base, arcname))
        add_bytes("PKG-INFO", _metadata(project).encode("utf-8"))
    return name
