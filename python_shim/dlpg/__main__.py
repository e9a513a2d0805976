"""`python -m dlpg store|info [ARGS]`, and the dlpg-store / dlpg-info commands a wheel
installs: they run the tool the wheel carries in dlpg/_native (the standalone TCP store
server; version, build and backend report)."""
import os
import sys

NATIVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native")
TOOLS = {"store": "dlpg-store", "info": "dlpg-info"}


def _exec(tool, args):
    path = os.path.join(NATIVE, tool)
    if not os.access(path, os.X_OK):
        sys.exit("dlpg: %s is not in this installation (%s); a wheel built with "
                 "`pip install ./python_shim` carries it, a CMake build has it in "
                 "build/tools/" % (tool, path))
    os.execv(path, [tool] + list(args))


def store():
    _exec("dlpg-store", sys.argv[1:])


def info():
    _exec("dlpg-info", sys.argv[1:])


def main(argv):
    if not argv or argv[0] not in TOOLS:
        sys.exit("usage: python -m dlpg {%s} [ARGS...]" % "|".join(sorted(TOOLS)))
    _exec(TOOLS[argv[0]], argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
