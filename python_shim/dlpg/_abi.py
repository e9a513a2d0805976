"""The ctypes binding of include/dlpg/dlpg.h: library lookup, one prototype per function.

This is the only module that knows the C spellings. Every function of the header is
declared here with its argtypes and restype, so a mismatch with the header shows up in one
place. Calls through ctypes.CDLL release the GIL, which is what lets dlpg's own threads call
back into Python (store callbacks) while the main thread is inside a blocking dlpg call.
"""

import ctypes
import glob
import os

from ctypes import (CFUNCTYPE, POINTER, c_char_p, c_double, c_int, c_int64, c_size_t,
                    c_uint32, c_void_p)

# Status values of dlpg_status_t; explicit and never renumbered (dlpg.h).
OK = 0
ERR_INVALID_ARGUMENT = 1
ERR_UNSUPPORTED = 2
ERR_TIMEOUT = 3
ERR_REMOTE = 4
ERR_ABORTED = 5
ERR_SYSTEM = 6
ERR_INTERNAL = 7

STATUS_NAMES = {
    OK: "DLPG_OK",
    ERR_INVALID_ARGUMENT: "DLPG_ERR_INVALID_ARGUMENT",
    ERR_UNSUPPORTED: "DLPG_ERR_UNSUPPORTED",
    ERR_TIMEOUT: "DLPG_ERR_TIMEOUT",
    ERR_REMOTE: "DLPG_ERR_REMOTE",
    ERR_ABORTED: "DLPG_ERR_ABORTED",
    ERR_SYSTEM: "DLPG_ERR_SYSTEM",
    ERR_INTERNAL: "DLPG_ERR_INTERNAL",
}

# dlpg_reduce_op_t.
SUM, PROD, MIN, MAX, AVG, BAND, BOR, BXOR, PREMUL_SUM = range(9)
# dlpg_recv's peer meaning "any rank".
ANY_SOURCE = -1

ABI_MAJOR = 0


class DlpgError(RuntimeError):
    """A dlpg call failed. .status is the numeric dlpg_status_t, .status_name its name
    ("DLPG_ERR_TIMEOUT"), .message the library's message naming function and arguments."""

    def __init__(self, status, message):
        self.status = int(status)
        self.status_name = STATUS_NAMES.get(self.status, "DLPG_ERR_UNKNOWN")
        self.message = message or ""
        super().__init__("%s (%d): %s" % (self.status_name, self.status, self.message))

    def __reduce__(self):
        return (DlpgError, (self.status, self.message))


class LibraryNotFoundError(DlpgError, OSError):
    """libdlpg.so could not be loaded; the message names every place that was tried."""

    def __init__(self, message):
        DlpgError.__init__(self, ERR_SYSTEM, message)


# dlpg_store_ops_t and its callback types, laid out as the header declares them.
STORE_SET_FN = CFUNCTYPE(c_int, c_void_p, c_char_p, c_void_p, c_size_t)
STORE_GET_FN = CFUNCTYPE(c_int, c_void_p, c_char_p, c_double, c_void_p, c_size_t,
                         POINTER(c_size_t))
STORE_ADD_FN = CFUNCTYPE(c_int, c_void_p, c_char_p, c_int64, POINTER(c_int64))
STORE_WAIT_FN = CFUNCTYPE(c_int, c_void_p, POINTER(c_char_p), c_size_t, c_double)
STORE_RELEASE_FN = CFUNCTYPE(None, c_void_p)
STORE_CHECK_FN = CFUNCTYPE(c_int, c_void_p, POINTER(c_char_p), c_size_t, POINTER(c_int))
STORE_DELETE_FN = CFUNCTYPE(c_int, c_void_p, c_char_p, POINTER(c_int))


class StoreOps(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("set", STORE_SET_FN),
        ("get", STORE_GET_FN),
        ("add", STORE_ADD_FN),
        ("wait", STORE_WAIT_FN),
        ("release", STORE_RELEASE_FN),
        ("check", STORE_CHECK_FN),
        ("delete_key", STORE_DELETE_FN),
    ]


class GroupOptions(ctypes.Structure):
    """dlpg_group_options_t; the nccl_* fields: DLPG_NCCL_DEFAULT (-1) or None for NCCL's own."""
    _fields_ = [("struct_size", c_size_t), ("timeout_s", c_double), ("name", c_char_p),
                ("nccl_cga_cluster_size", c_int), ("nccl_min_ctas", c_int),
                ("nccl_max_ctas", c_int), ("nccl_traffic_class", c_int),
                ("nccl_net_name", c_char_p), ("nccl_comm_name", c_char_p)]


NCCL_DEFAULT = -1


class ReduceDesc(ctypes.Structure):
    """dlpg_reduce_desc_t: a reduce op with its scalar (DLPG_PREMUL_SUM's factor)."""
    _fields_ = [("struct_size", c_size_t), ("op", c_int), ("scalar", c_double)]


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


_P = c_void_p          # opaque handles and DLTensor * travel as addresses
_PP = POINTER(c_void_p)  # DLTensor *const *, void *const *, handle out-parameters
_S = c_int             # dlpg_status_t

# name -> (restype, argtypes): every function of include/dlpg/dlpg.h.
PROTOTYPES = {
    "dlpg_status_name": (c_char_p, [c_int]),
    "dlpg_last_error": (c_char_p, []),
    "dlpg_get_version": (_S, [POINTER(c_int)]),
    "dlpg_get_build_info": (_S, [POINTER(c_char_p)]),
    "dlpg_store_open": (_S, [c_char_p, c_double, _PP]),
    "dlpg_store_port": (_S, [_P, POINTER(c_int)]),
    "dlpg_store_from_ops": (_S, [POINTER(StoreOps), c_void_p, c_double, _PP]),
    "dlpg_store_set": (_S, [_P, c_char_p, c_void_p, c_size_t]),
    "dlpg_store_get": (_S, [_P, c_char_p, c_double, c_void_p, c_size_t, POINTER(c_size_t)]),
    "dlpg_store_add": (_S, [_P, c_char_p, c_int64, POINTER(c_int64)]),
    "dlpg_store_wait": (_S, [_P, POINTER(c_char_p), c_size_t, c_double]),
    "dlpg_store_check": (_S, [_P, POINTER(c_char_p), c_size_t, POINTER(c_int)]),
    "dlpg_store_delete_key": (_S, [_P, c_char_p, POINTER(c_int)]),
    "dlpg_store_close": (_S, [_P]),
    "dlpg_group_create": (_S, [_P, c_int, c_int, POINTER(GroupOptions), _PP]),
    "dlpg_group_create_from_env": (_S, [POINTER(GroupOptions), _PP]),
    "dlpg_group_rank": (_S, [_P, POINTER(c_int)]),
    "dlpg_group_size": (_S, [_P, POINTER(c_int)]),
    "dlpg_group_abort": (_S, [_P]),
    "dlpg_group_destroy": (_S, [_P]),
    "dlpg_allreduce": (_S, [_P, _PP, _PP, c_int, c_int, _PP, _PP]),
    "dlpg_broadcast": (_S, [_P, _PP, _PP, c_int, c_int, _PP, _PP]),
    "dlpg_reduce": (_S, [_P, _PP, _PP, c_int, c_int, c_int, _PP, _PP]),
    "dlpg_allgather": (_S, [_P, _PP, _PP, c_int, _PP, _PP]),
    "dlpg_reduce_scatter": (_S, [_P, _PP, _PP, c_int, c_int, _PP, _PP]),
    "dlpg_alltoall": (_S, [_P, _P, _P, c_void_p, _PP]),
    "dlpg_send": (_S, [_P, _P, c_int, c_int, c_void_p, _PP]),
    "dlpg_recv": (_S, [_P, _P, c_int, c_int, c_void_p, _PP]),
    "dlpg_barrier": (_S, [_P, _PP]),
    "dlpg_group_start": (_S, [_P]),
    "dlpg_group_end": (_S, [_P]),
    "dlpg_work_wait": (_S, [_P, c_double]),
    "dlpg_work_test": (_S, [_P, POINTER(c_int)]),
    "dlpg_work_error": (c_char_p, [_P]),
    "dlpg_work_free": (_S, [_P]),
    "dlpg_get_api": (c_void_p, [c_uint32]),
    "dlpg_group_flight_record": (_S, [_P, c_char_p, c_size_t, POINTER(c_size_t)]),
    "dlpg_reduce_supported": (_S, [DLDevice, DLDataType, c_int]),
    "dlpg_recv_any": (_S, [_P, _P, c_int, POINTER(c_int), c_void_p]),
    "dlpg_work_source": (_S, [_P, POINTER(c_int)]),
    "dlpg_allreduce_ex": (_S, [_P, _PP, _PP, c_int, POINTER(ReduceDesc), _PP, _PP]),
    "dlpg_reduce_ex": (_S, [_P, _PP, _PP, c_int, POINTER(ReduceDesc), c_int, _PP, _PP]),
    "dlpg_reduce_scatter_ex": (_S, [_P, _PP, _PP, c_int, POINTER(ReduceDesc), _PP, _PP]),
    "dlpg_group_split": (_S, [_P, c_int, c_int, POINTER(GroupOptions), _PP]),
    "dlpg_gather": (_S, [_P, _P, _P, c_int, c_void_p, _PP]),
    "dlpg_scatter": (_S, [_P, _P, _P, c_int, c_void_p, _PP]),
    "dlpg_allgatherv": (_S, [_P, _P, _P, POINTER(c_int64), POINTER(c_int64), c_void_p, _PP]),
    "dlpg_alltoallv": (_S, [_P, _P, POINTER(c_int64), POINTER(c_int64), _P, POINTER(c_int64),
                            POINTER(c_int64), c_void_p, _PP]),
    "dlpg_reduce_scatter_v": (_S, [_P, _P, _P, POINTER(c_int64), POINTER(c_int64),
                                   POINTER(ReduceDesc), c_void_p, _PP]),
    "dlpg_group_create_subset": (_S, [_P, c_int, POINTER(c_int), POINTER(GroupOptions), _PP]),
}


def _source_checkout():
    """The repository root when this package is python_shim/dlpg of a dlpg checkout (not an
    installed copy), else None."""
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    if os.path.exists(os.path.join(repo, "include", "dlpg", "dlpg.h")) and \
            os.path.exists(os.path.join(repo, "CMakeLists.txt")):
        return repo
    return None


def _pkg_config_libdir():
    """libdir of an installed dlpg according to pkg-config, or (None, why not)."""
    import subprocess
    try:
        r = subprocess.run(["pkg-config", "--variable=libdir", "dlpg"], capture_output=True,
                           text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        return None, "pkg-config not usable: %s" % e
    if r.returncode != 0 or not r.stdout.strip():
        return None, "pkg-config knows no dlpg"
    return r.stdout.strip(), None


def candidate_paths():
    """The places searched for the library, in order: DLPG_LIBRARY; the package's
    _native/ folder (where the wheel puts it); in a source checkout, its build trees (build*/); the libdir
    pkg-config names for dlpg; the system loader (ld.so.conf, LD_LIBRARY_PATH)."""
    env = os.environ.get("DLPG_LIBRARY")
    if env:
        return [env]  # An explicit choice is never silently replaced by another library.
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [os.path.join(here, "_native", "libdlpg.so.0")]
    repo = _source_checkout()
    if repo is not None:
        builds = sorted(glob.glob(os.path.join(repo, "build*", "libdlpg.so")),
                        key=lambda p: -os.path.getmtime(p) if os.path.exists(p) else 0)
        paths += builds or [os.path.join(repo, "build*", "libdlpg.so")]
    libdir, why = _pkg_config_libdir()
    paths.append(os.path.join(libdir, "libdlpg.so.0") if libdir else "pkg-config (%s)" % why)
    paths += ["libdlpg.so.0 (system loader)"]
    return paths


def _load():
    tried = []
    for path in candidate_paths():
        if path.startswith("pkg-config ("):
            tried.append(path)
            continue
        target = path.split(" ")[0] if path.endswith("(system loader)") else path
        if "*" in target:
            tried.append("%s (no match)" % path)
            continue
        if os.sep in target and not os.path.exists(target):
            tried.append("%s (no such file)" % path)
            continue
        try:
            return ctypes.CDLL(target), path
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise LibraryNotFoundError(
        "dlpg: cannot load libdlpg.so; tried, in order: " + "; ".join(tried) +
        ". Set DLPG_LIBRARY to the library's path, install dlpg (cmake --install) where the "
        "system loader or pkg-config finds it, or install the package from a checkout "
        "(pip install .), which builds and carries it")


class _Lib(object):
    """The loaded library with every prototype applied; loaded on first use so that
    `import dlpg` works (and can report the error) without the library present."""

    def __init__(self):
        self._cdll = None
        self.path = None

    def _ensure(self):
        if self._cdll is None:
            cdll, path = _load()
            missing = []
            for name, (restype, argtypes) in PROTOTYPES.items():
                try:
                    fn = getattr(cdll, name)
                except AttributeError:
                    missing.append(name)
                    continue
                fn.restype = restype
                fn.argtypes = argtypes
            if missing:
                raise LibraryNotFoundError("dlpg: %s lacks the symbols %s" % (path, ", ".join(missing)))
            self._cdll = cdll
            self.path = path
        return self._cdll

    def __getattr__(self, name):
        fn = getattr(self._ensure(), name)
        setattr(self, name, fn)  # Cache: later lookups skip __getattr__.
        return fn


lib = _Lib()


def last_error():
    msg = lib.dlpg_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def check(status, work=None):
    """The one status check: raise DlpgError when status is not DLPG_OK, with the message
    of work (a work handle whose wait/test returned status) or else the calling thread's
    last error."""
    if status != OK:
        msg = lib.dlpg_work_error(work) if work is not None else None
        raise DlpgError(status, msg.decode("utf-8", "replace") if msg else last_error())
    return status


def status_name(status):
    s = lib.dlpg_status_name(int(status))
    return s.decode() if s else "DLPG_ERR_UNKNOWN"


def version():
    v = c_int()
    check(lib.dlpg_get_version(ctypes.byref(v)))
    return v.value


def build_info():
    s = c_char_p()
    check(lib.dlpg_get_build_info(ctypes.byref(s)))
    return s.value.decode() if s.value else ""


def library_path():
    lib._ensure()
    return lib.path


def reduce_supported(device, dtype, op):
    """Whether the library reduces dtype on device with op (dlpg_reduce_supported): device is
    (DLDeviceType, device_id), dtype (DLDataTypeCode, bits) or (code, bits, lanes), op an
    int. True, or False when the answer is DLPG_ERR_UNSUPPORTED (last_error() says why);
    other statuses (a negative device id, an op outside the enum) raise DlpgError."""
    code, bits = dtype[0], dtype[1]
    lanes = dtype[2] if len(dtype) > 2 else 1
    st = lib.dlpg_reduce_supported(DLDevice(int(device[0]), int(device[1])),
                                   DLDataType(int(code), int(bits), int(lanes)), int(op))
    if st == ERR_UNSUPPORTED:
        return False
    check(st)
    return True
