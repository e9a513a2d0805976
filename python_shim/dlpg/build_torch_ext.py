"""Build the C++ torch backend ahead of use: `python -m dlpg.build_torch_ext [-v]`.

`import dlpg.torch` builds it on first use anyway (dlpg._torch_load); this builds it, into
the same per-torch cache, once before many ranks import (CI, a job's setup step).

(It lives outside dlpg.torch so that building does not import the backend being built.)
"""

import sys

from . import _torch_load


def build(verbose=False):
    """Build the extension for the installed torch (if its cache has none); returns its path.
    verbose: show the compiler's commands."""
    return _torch_load.cached_build(_torch_load.wanted(), verbose=verbose)


def main(argv):
    if [a for a in argv if a != "-v"]:
        sys.exit("usage: python -m dlpg.build_torch_ext [-v]")
    path = build(verbose="-v" in argv)
    print("dlpg.build_torch_ext: %s (%s)" % (path, _torch_load.wanted()))


if __name__ == "__main__":
    main(sys.argv[1:])
