"""`python -m dlpg store|info|bench [ARGS]`, the commands a wheel installs (dlpg-store,
dlpg-info, dlpg-bench and nccl-tests' names dlpg_<collective>_perf), which run the tools the
wheel carries in dlpg/_native, and what a C program needs to build against the installed
package:

    cc demo.c $(python -m dlpg --cflags --libs)
    PKG_CONFIG_PATH=$(python -m dlpg --pkgconfigdir) pkg-config --cflags --libs dlpg
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
NATIVE = os.path.join(HERE, "_native")
INCLUDE = os.path.join(HERE, "include")
TOOLS = {"store": "dlpg-store", "info": "dlpg-info", "bench": "dlpg-bench"}
# What a C program compiles and links with; the run path lets it find libdlpg.so.0 (and what
# that needs beside it) without LD_LIBRARY_PATH.
FLAGS = {
    "--cflags": lambda: "-I" + INCLUDE,
    "--libs": lambda: "-L%s -Wl,-rpath,%s -ldlpg" % (NATIVE, NATIVE),
    "--includedir": lambda: INCLUDE,
    "--libdir": lambda: NATIVE,
    "--pkgconfigdir": lambda: os.path.join(NATIVE, "pkgconfig"),
}
USAGE = ("usage: python -m dlpg {%s} [ARGS...]\n       python -m dlpg [%s]..."
         % ("|".join(sorted(TOOLS)), "] [".join(FLAGS)))


def _exec(tool, argv0, args):
    path = os.path.join(NATIVE, tool)
    if not os.access(path, os.X_OK):
        sys.exit("dlpg: %s is not in this installation (%s); the wheel (`pip install .` in a "
                 "checkout) carries it, a CMake build has it in its build folder"
                 % (tool, path))
    # argv[0] travels: dlpg-bench reads the collective from a dlpg_<collective>_perf name.
    os.execv(path, [argv0] + list(args))


def store():
    _exec("dlpg-store", "dlpg-store", sys.argv[1:])


def info():
    _exec("dlpg-info", "dlpg-info", sys.argv[1:])


def bench():
    _exec("dlpg-bench", os.path.basename(sys.argv[0]), sys.argv[1:])


def main(argv):
    if argv and argv[0] in TOOLS:
        _exec(TOOLS[argv[0]], TOOLS[argv[0]], argv[1:])
    if not argv or [a for a in argv if a not in FLAGS]:
        sys.exit(USAGE)
    print(" ".join(FLAGS[a]() for a in argv))


if __name__ == "__main__":
    main(sys.argv[1:])
