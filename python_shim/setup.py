"""setuptools build of the dlpg wheel (pyproject.toml holds the metadata).

    PIP_NO_INDEX=1 pip install --no-build-isolation ./python_shim

The wheel carries the package, its native files in dlpg/_native (native_build.py: libdlpg.so,
the backend modules, dlpg-store and dlpg-info, and the libraries they need), the ABI headers
(dlpg/include, so the torch extension can be rebuilt against another torch), and, when torch
is importable here, the compiled torch extension dlpg/torch/_C_dlpg (torch's BuildExtension)
with a stamp naming the torch it was built for. With the extension its tag is
cpXY-cpXY-linux_x86_64; without, py3-none-linux_x86_64 (the rest is ctypes).
"""

import importlib.util
import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1: the wheel package's command
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_version = _load("_dlpg_setup_version", "dlpg/_version.py")
_ext = _load("_dlpg_setup_torch_ext", "dlpg/_torch_ext.py")
native = _load("_dlpg_setup_native", "native_build.py")
VERSION = "%d.%d.%d" % (_version.from_cmakelists() or _version.from_header())


class BuildPy(build_py):
    """The modules, then the native files and the headers beside them in build_lib."""

    def run(self):
        super().run()
        pkg = os.path.join(self.build_lib, "dlpg")
        try:
            native.copy_into(os.path.join(pkg, "_native"), native.collect())
        except native.NativeError as e:
            sys.exit("dlpg wheel: " + str(e))
        inc = os.path.join(pkg, "include", "dlpg")
        os.makedirs(inc, exist_ok=True)
        self.copy_file(os.path.join(_ext.dlpg_include(), "dlpg", "dlpg.h"), inc)
        with open(os.path.join(inc, "dlpg_version.h"), "w") as f:
            f.write(_version.header_text(tuple(int(x) for x in VERSION.split("."))))


class BinaryDistribution(Distribution):
    """Platform-specific even without an extension module: it carries libdlpg.so."""

    def has_ext_modules(self):
        return True


class Wheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        impl, abi, plat = super().get_tag()
        if not self.distribution.ext_modules:
            return "py3", "none", plat  # only ctypes and native libraries: any CPython 3
        return impl, abi, plat


def _torch_extension():
    """(ext_modules, build_ext command) for the C++ torch backend, or ([], None) without torch."""
    try:
        import torch
        from torch.utils import cpp_extension
    except ImportError as e:
        native.log("torch is not importable (%s): no torch extension in the wheel; "
                   "import dlpg.torch builds one for the torch it finds" % e)
        return [], None
    gen = os.path.join(HERE, "build", "dlpg-torch-include")
    ext = cpp_extension.CppExtension(
        "dlpg.torch." + _ext.NAME,
        [os.path.relpath(s, HERE) for s in _ext.sources()],
        include_dirs=_ext.include_dirs(gen, cpp_extension.include_paths()),
        extra_compile_args=_ext.CFLAGS, libraries=_ext.LIBRARIES)
    stamp = _ext.stamp(torch.__version__)

    class BuildExt(cpp_extension.BuildExtension):
        def run(self):
            super().run()
            # Python's own CFLAGS carry -g: the debug sections would triple the wheel.
            if shutil.which("strip"):
                for path in self.get_outputs():
                    subprocess.run(["strip", "--strip-debug", path], check=True)
            folder = os.path.join(self.build_lib, "dlpg", "torch")
            os.makedirs(folder, exist_ok=True)
            _ext.write_stamp(folder, stamp)

    native.log("torch extension for torch %s" % torch.__version__)
    return [ext], BuildExt


ext_modules, build_ext = _torch_extension()
cmdclass = {"build_py": BuildPy, "bdist_wheel": Wheel}
if build_ext is not None:
    cmdclass["build_ext"] = build_ext

setup(
    version=VERSION,
    packages=["dlpg", "dlpg.torch"],
    package_data={"dlpg.torch": ["csrc/*.cpp", "csrc/*.h"]},
    ext_modules=ext_modules,
    cmdclass=cmdclass,
    distclass=BinaryDistribution,
    zip_safe=False,
)
