"""libbaton for the life cycle calls (ctypes), the C types, and errors as exceptions.

The collectives go through the _core extension (_core.cc); init, split,
destroy, streams and events, off the hot path, through ctypes here. Both use the one
libbaton _core is linked to (its rpath finds the build's or the installed
one), so communicator handles pass between them. Only the public C API
(include/baton.h) is used; ctypes releases the GIL around every call.
"""

import ctypes

import numpy as np

try:
    from . import _core
except ImportError as e:
    raise ImportError("baton: the _core extension is not built or cannot load libbaton "
                      f"(meson builds it with the package; docs/python.md): {e}") from e

lib = ctypes.CDLL(_core.library_path())

# ---- types ----
c_comm = ctypes.c_void_p
c_stream = ctypes.c_void_p
c_event = ctypes.c_void_p
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
IN_PROGRESS = RESULT_NAMES.index("in progress")  # batonInProgress
REMOTE_ERROR, TIMEOUT = 6, 8  # batonRemoteError, batonTimeout


class BatonError(RuntimeError):
    """A Baton call failed; `result` is the batonResult_t, str() is Baton's message.
    `failed_ranks`: for an error of a communicator's call, the ranks of that communicator known
    to have failed when it was raised (batonCommGetFailedRanks), ascending; [] otherwise."""

    def __init__(self, result, message, failed_ranks=()):
        super().__init__(message)
        self.result = result
        self.failed_ranks = list(failed_ranks)


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
    failed = failed_ranks(comm) if comm and result in (REMOTE_ERROR, TIMEOUT) else []
    raise _ERROR_CLASSES.get(result, BatonError)(result, text, failed)


def failed_ranks(comm):
    """batonCommGetFailedRanks: the ranks of comm known to have failed, ascending; [] when the
    query itself fails (comm freed meanwhile)."""
    n = ctypes.c_int(0)
    while True:
        buf = (ctypes.c_int * max(n.value, 1))()
        cap = n.value
        if lib.batonCommGetFailedRanks(comm, buf, cap, ctypes.byref(n)) != 0:
            return []
        if n.value <= cap:  # the list only grows: ask again when it outgrew the buffer
            return list(buf[:n.value])


# ---- prototypes ----
_i, _vp = ctypes.c_int, ctypes.c_void_p
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
    "batonCommGetFailedRanks": [c_comm, ctypes.POINTER(_i), _i, ctypes.POINTER(_i)],
    "batonCommUserRank": [c_comm, ctypes.POINTER(_i)],
    "batonRedOpCreatePreMulSum": [ctypes.POINTER(_i), _vp, _i, _i, c_comm],
    "batonRedOpDestroy": [_i, c_comm],
    "batonStreamCreate": [ctypes.POINTER(c_stream)],
    "batonStreamSynchronize": [c_stream],
    "batonStreamQuery": [c_stream],
    "batonStreamDestroy": [c_stream],
    "batonEventCreate": [ctypes.POINTER(c_event)],
    "batonEventRecord": [c_event, c_stream],
    "batonEventQuery": [c_event],
    "batonEventSynchronize": [c_event],
    "batonEventDestroy": [c_event],
    "batonMemAlloc": [ctypes.POINTER(_vp), ctypes.c_size_t],
    "batonMemFree": [_vp],
    "batonCommRegister": [c_comm, _vp, ctypes.c_size_t, ctypes.POINTER(_vp)],
    "batonCommDeregister": [c_comm, _vp],
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

# The collectives raise Baton's failures through check(), and a call on a
# destroyed communicator as InvalidUsageError.
_core._init(check, InvalidUsageError, np.ascontiguousarray)
