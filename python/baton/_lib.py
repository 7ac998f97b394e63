"""libbaton through ctypes: the library, the C types, and errors as exceptions.

Only the public C API (include/baton.h) is used. ctypes releases the GIL
around every foreign call, so a blocking collective lets other Python
threads run.
"""

import ctypes
import ctypes.util
import os

import numpy as np

# The path meson configured into the build tree's copy of the package
# (_config.py); absent in the source tree.
try:
    from ._config import LIBBATON_PATH as _CONFIGURED_PATH
except ImportError:  # pragma: no cover - running from python/ directly
    _CONFIGURED_PATH = None


def _load():
    tried = []
    candidates = []
    if _CONFIGURED_PATH:
        candidates.append(_CONFIGURED_PATH)
    candidates.append("libbaton.so")  # LD_LIBRARY_PATH, ldconfig
    found = ctypes.util.find_library("baton")
    if found:
        candidates.append(found)
    # The source tree's default build directory, for `PYTHONPATH=python`.
    here = os.path.dirname(os.path.abspath(__file__))
    candidates.append(os.path.join(here, "..", "..", "build", "src", "libbaton.so"))
    for path in candidates:
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path}: {e}")
    raise ImportError("cannot load libbaton.so (build Baton, or put its directory on "
                      "LD_LIBRARY_PATH); tried:\n  " + "\n  ".join(tried))


lib = _load()

# ---- types ----
c_comm = ctypes.c_void_p
c_stream = ctypes.c_void_p
UNIQUE_ID_BYTES = 128


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]


class Config(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("blocking", ctypes.c_int), ("commName", ctypes.c_char_p),
                ("timeout", ctypes.c_int), ("splitShare", ctypes.c_int)]


CONFIG_UNDEF_INT = -2147483647 - 1
CONFIG_MAGIC = 0xBA7C0F19


def make_config(name=None, timeout=None):
    version = ctypes.c_int()
    lib.batonGetVersion(ctypes.byref(version))
    cfg = Config(ctypes.sizeof(Config), CONFIG_MAGIC, version.value, CONFIG_UNDEF_INT,
                 name.encode() if name else None,
                 CONFIG_UNDEF_INT if timeout is None else int(timeout), CONFIG_UNDEF_INT)
    return cfg


# ---- errors ----
RESULT_NAMES = ["success", "unhandled cuda error", "system error", "internal error",
                "invalid argument", "invalid usage", "remote error", "in progress", "timeout"]


class BatonError(RuntimeError):
    """A Baton call failed; `result` is the batonResult_t, str() is Baton's message."""

    def __init__(self, result, message):
        super().__init__(message)
        self.result = result


class InvalidArgumentError(BatonError, ValueError):
    pass


class InvalidUsageError(BatonError):
    pass


class RemoteError(BatonError):
    """Another rank failed (died, aborted, or its call failed)."""


class BatonTimeoutError(BatonError, TimeoutError):
    pass


_ERROR_CLASSES = {4: InvalidArgumentError, 5: InvalidUsageError, 6: RemoteError,
                  8: BatonTimeoutError}


def check(result, comm=None, what=""):
    """Raises the exception for a batonResult_t other than success."""
    if result == 0:
        return
    message = lib.batonGetLastError(comm).decode(errors="replace")
    name = RESULT_NAMES[result] if 0 <= result < len(RESULT_NAMES) else f"result {result}"
    text = f"{what}: {message}" if what else message
    if not message:
        text = f"{what}: {name}" if what else name
    raise _ERROR_CLASSES.get(result, BatonError)(result, text)


# ---- prototypes ----
_i, _sz, _vp, _cvp = ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p
_szp = ctypes.POINTER(ctypes.c_size_t)
_PROTOTYPES = {
    "batonGetVersion": [ctypes.POINTER(_i)],
    "batonGetUniqueId": [ctypes.POINTER(UniqueId)],
    "batonCommInitRank": [ctypes.POINTER(c_comm), _i, UniqueId, _i],
    "batonCommInitRankConfig": [ctypes.POINTER(c_comm), _i, UniqueId, _i, ctypes.POINTER(Config)],
    "batonCommInitFromEnv": [ctypes.POINTER(c_comm)],
    "batonCommSplit": [c_comm, _i, _i, ctypes.POINTER(c_comm), ctypes.POINTER(Config)],
    "batonCommFinalize": [c_comm],
    "batonCommDestroy": [c_comm],
    "batonCommAbort": [c_comm],
    "batonCommCount": [c_comm, ctypes.POINTER(_i)],
    "batonCommUserRank": [c_comm, ctypes.POINTER(_i)],
    "batonRedOpCreatePreMulSum": [ctypes.POINTER(_i), _vp, _i, _i, c_comm],
    "batonRedOpDestroy": [_i, c_comm],
    "batonStreamCreate": [ctypes.POINTER(c_stream)],
    "batonStreamSynchronize": [c_stream],
    "batonStreamQuery": [c_stream],
    "batonStreamDestroy": [c_stream],
    "batonAllReduce": [_cvp, _vp, _sz, _i, _i, c_comm, c_stream],
    "batonBroadcast": [_cvp, _vp, _sz, _i, _i, c_comm, c_stream],
    "batonReduce": [_cvp, _vp, _sz, _i, _i, _i, c_comm, c_stream],
    "batonAllGather": [_cvp, _vp, _sz, _i, c_comm, c_stream],
    "batonReduceScatter": [_cvp, _vp, _sz, _i, _i, c_comm, c_stream],
    "batonAlltoAll": [_cvp, _vp, _sz, _i, c_comm, c_stream],
    "batonGather": [_cvp, _vp, _sz, _i, _i, c_comm, c_stream],
    "batonScatter": [_cvp, _vp, _sz, _i, _i, c_comm, c_stream],
    "batonAllGatherV": [_cvp, _sz, _vp, _szp, _szp, _i, c_comm, c_stream],
    "batonReduceScatterV": [_cvp, _vp, _szp, _i, _i, c_comm, c_stream],
    "batonAlltoAllV": [_cvp, _szp, _szp, _vp, _szp, _szp, _i, c_comm, c_stream],
    "batonSend": [_cvp, _sz, _i, _i, c_comm, c_stream],
    "batonRecv": [_vp, _sz, _i, _i, c_comm, c_stream],
    "batonBarrier": [c_comm, c_stream],
    "batonGroupStart": [],
    "batonGroupEnd": [],
}
for _name, _args in _PROTOTYPES.items():
    _fn = getattr(lib, _name)
    _fn.argtypes = _args
    _fn.restype = ctypes.c_int
lib.batonGetLastError.argtypes = [c_comm]
lib.batonGetLastError.restype = ctypes.c_char_p
lib.batonGetErrorString.argtypes = [ctypes.c_int]
lib.batonGetErrorString.restype = ctypes.c_char_p

# ---- datatypes and ops ----
# numpy dtype -> batonDataType_t. bfloat16 and fp8 have no numpy dtype; pass
# datatype= explicitly with a uint16 / uint8 array holding their bits.
_DTYPES = {
    np.dtype(np.int8): 0, np.dtype(np.uint8): 1, np.dtype(np.int32): 2, np.dtype(np.uint32): 3,
    np.dtype(np.int64): 4, np.dtype(np.uint64): 5, np.dtype(np.float16): 6,
    np.dtype(np.float32): 7, np.dtype(np.float64): 8, np.dtype(np.bool_): 1,
}
DATATYPE_NAMES = {"int8": 0, "uint8": 1, "int32": 2, "uint32": 3, "int64": 4, "uint64": 5,
                  "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9,
                  "float8_e4m3": 10, "float8_e5m2": 11}
DATATYPE_SIZES = [1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1]
OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}


def datatype_of(arr, datatype=None):
    """The batonDataType_t for arr (or the named datatype, whose size must match)."""
    if datatype is not None:
        code = DATATYPE_NAMES.get(datatype) if isinstance(datatype, str) else int(datatype)
        if code is None:
            raise ValueError(f"unknown datatype {datatype!r}; one of {sorted(DATATYPE_NAMES)}")
        if arr.dtype.itemsize != DATATYPE_SIZES[code]:
            raise ValueError(f"datatype {datatype!r} needs {DATATYPE_SIZES[code]}-byte elements, "
                             f"the array has {arr.dtype} ({arr.dtype.itemsize} bytes)")
        return code
    code = _DTYPES.get(arr.dtype)
    if code is None:
        raise TypeError(f"Baton has no datatype for numpy {arr.dtype}; one of "
                        f"{sorted(str(d) for d in _DTYPES)} (or datatype='bfloat16' on uint16)")
    return code


def op_code(op):
    if isinstance(op, str):
        code = OPS.get(op.lower())
        if code is None:
            raise ValueError(f"unknown op {op!r}; one of {sorted(OPS)}")
        return code
    return int(op)


def size_array(values):
    arr = (ctypes.c_size_t * len(values))(*[int(v) for v in values])
    return arr
