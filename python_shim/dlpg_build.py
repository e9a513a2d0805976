"""In-tree PEP 517 build backend of the dlpg Python package.

It needs nothing but the standard library, so `pip install ./python_shim` works offline even
with pip's build isolation (a backend that must first be downloaded, such as setuptools,
cannot be installed into the isolated environment without an index). It builds a wheel of
the `dlpg` package (plus `dlpg/libdlpg.so*` when one was copied beside the package, which
makes the wheel platform-specific), an sdist, and an editable wheel (a .pth file pointing
at this directory). Name, version and the other metadata come from pyproject.toml.
"""
import base64
import hashlib
import io
import os
import re
import sysconfig
import tarfile
import zipfile

_ROOT = os.path.dirname(os.path.abspath(__file__))
_PACKAGE = "dlpg"


def _project():
    """The [project] table of pyproject.toml (tomllib, or a small reader before 3.11)."""
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


def _package_files():
    """(path in the wheel, path on disk) of every module, and of a bundled libdlpg.so*."""
    out, native = [], False
    for dirpath, dirnames, filenames in os.walk(os.path.join(_ROOT, _PACKAGE)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py") or name.startswith("libdlpg.so"):
                native |= name.startswith("libdlpg.so")
                disk = os.path.join(dirpath, name)
                out.append((os.path.relpath(disk, _ROOT).replace(os.sep, "/"), disk))
    return out, native


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
    entries = []
    for arcname, disk in files:
        with open(disk, "rb") as f:
            entries.append((arcname, f.read()))
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
        for arcname in extra + [a for a, _ in files]:
            tar.add(os.path.join(_ROOT, arcname), arcname="%s/%s" % (base, arcname))
        info = tarfile.TarInfo("%s/PKG-INFO" % base)
        data = _metadata(project).encode("utf-8")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return name
