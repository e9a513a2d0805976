"""The package's version. It is written once, in project(dlpg VERSION ...) of the checkout's
CMakeLists.txt: a checkout reads that line; an installed wheel reads the
dlpg/include/dlpg/dlpg_version.h CMake generated from it; a copy that has neither (a
bundle of the package alone) asks the library (dlpg_get_version).
Standard library only: _torch_ext.py loads this file by path."""
import os
import re

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))
HEADER = os.path.join(_HERE, "include", "dlpg", "dlpg_version.h")
CMAKELISTS = os.path.join(_REPO, "CMakeLists.txt")
TEMPLATE = os.path.join(_REPO, "cmake", "dlpg_version.h.in")


def _read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def from_cmakelists(path=CMAKELISTS):
    """(major, minor, patch) of project(dlpg VERSION ...) in path, or None."""
    text = _read(path)
    m = text and re.search(r"^\s*project\(\s*dlpg\s+VERSION\s+(\d+)\.(\d+)\.(\d+)", text, re.M)
    return tuple(int(x) for x in m.groups()) if m else None


def from_header(path=HEADER):
    """(major, minor, patch) of a dlpg_version.h, or None."""
    text = _read(path)
    if not text:
        return None
    v = [re.search(r"^#define DLPG_VERSION_%s (\d+)" % k, text, re.M)
         for k in ("MAJOR", "MINOR", "PATCH")]
    return tuple(int(m.group(1)) for m in v) if all(v) else None


def header_text(v, template=TEMPLATE):
    """dlpg_version.h for version v, as CMake's configure_file writes it from the template."""
    text = _read(template)
    if text is None:
        raise RuntimeError("dlpg: %s not found" % template)
    for k, x in zip(("MAJOR", "MINOR", "PATCH"), v):
        text = text.replace("@PROJECT_VERSION_%s@" % k, str(x))
    return text


def version_tuple():
    v = from_header() or from_cmakelists()
    if v is None:
        from . import _abi
        code = _abi.version()
        v = (code // 10000, code // 100 % 100, code % 100)
    return v


def version():
    """"MAJOR.MINOR.PATCH"."""
    return "%d.%d.%d" % version_tuple()
