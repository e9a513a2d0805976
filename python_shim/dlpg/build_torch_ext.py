"""Build the C++ torch backend ahead of use: `python3 -m dlpg.build_torch_ext [-v]`.

`import dlpg.torch` builds it on first use anyway (dlpg._torch_load); this builds it once
before many ranks import (CI, a job's setup step). In a checkout it goes into
dlpg/torch/_C_dlpg.so with its stamp (the build files in DLPG_TORCH_BUILD_DIR, default a
folder under the temp dir, so a rebuild is incremental); in an installed package, whose
files belong to pip, into the per-torch cache import dlpg.torch uses.

(It lives outside dlpg.torch so that building does not import the backend being built.)
"""

import os
import shutil
import sys
import tempfile

from . import _abi, _torch_ext, _torch_load


def build(verbose=False, build_dir=None):
    """Build the extension for the installed torch; returns its path."""
    stamp = _torch_load.wanted()
    if _abi._source_checkout() is None:
        return _torch_load.cached_build(stamp)
    build_dir = build_dir or os.environ.get("DLPG_TORCH_BUILD_DIR") or os.path.join(
        tempfile.gettempdir(), "dlpg-torch-ext-%d" % os.getuid())
    built = _torch_load.build(build_dir, stamp, verbose=verbose)
    target = os.path.join(_torch_load.PKG, _torch_ext.NAME + ".so")
    tmp = target + ".tmp%d" % os.getpid()
    shutil.copyfile(built, tmp)
    os.replace(tmp, target)  # atomic: a concurrent import sees the old or the new file
    _torch_ext.write_stamp(_torch_load.PKG, stamp)
    return target


def main(argv):
    path = build(verbose="-v" in argv)
    print("dlpg.build_torch_ext: built %s (%s)" % (path, _torch_load.wanted()))


if __name__ == "__main__":
    main(sys.argv[1:])
