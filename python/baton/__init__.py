"""Baton's collectives for NumPy arrays and buffer-protocol objects (docs/python.md).

    import baton, numpy as np
    comm = baton.init()                      # batonrun, mpirun, srun or torchrun environment
    total = comm.allreduce(np.ones(4), op="sum")

Every call blocks until done unless it is given async_op=True, which queues it
on the communicator's host stream and returns a Request (wait() gives the
result). Failures raise BatonError subclasses carrying Baton's message.
"""

import ctypes

import numpy as np

from . import _lib
from ._lib import (BatonError, BatonTimeoutError, InvalidArgumentError, InvalidUsageError,
                   RemoteError)

__all__ = ["init", "init_rank", "get_unique_id", "Comm", "Request", "BatonError",
           "InvalidArgumentError", "InvalidUsageError", "RemoteError", "BatonTimeoutError",
           "version"]


def version():
    v = ctypes.c_int()
    _lib.check(_lib.lib.batonGetVersion(ctypes.byref(v)))
    return v.value


def get_unique_id():
    """A fresh unique id (bytes) to hand to every rank for init_rank; this process serves it."""
    uid = _lib.UniqueId()
    _lib.check(_lib.lib.batonGetUniqueId(ctypes.byref(uid)), what="get_unique_id")
    return bytes(uid.internal)


def init():
    """The communicator of the launcher's job (batonCommInitFromEnv)."""
    handle = _lib.c_comm()
    _lib.check(_lib.lib.batonCommInitFromEnv(ctypes.byref(handle)), what="init")
    return Comm(handle)


def init_rank(nranks, unique_id, rank, timeout=None, name=None):
    """Joins a communicator of nranks ranks made from get_unique_id()'s bytes."""
    if len(unique_id) != _lib.UNIQUE_ID_BYTES:
        raise ValueError(f"unique_id must be {_lib.UNIQUE_ID_BYTES} bytes, not {len(unique_id)}")
    uid = _lib.UniqueId()
    ctypes.memmove(uid.internal, bytes(unique_id), _lib.UNIQUE_ID_BYTES)
    cfg = _lib.make_config(name, timeout)
    handle = _lib.c_comm()
    _lib.check(_lib.lib.batonCommInitRankConfig(ctypes.byref(handle), int(nranks), uid, int(rank),
                                                ctypes.byref(cfg)), what="init_rank")
    return Comm(handle)


def _input(obj):
    """A C-contiguous array over obj (copied only when obj is not contiguous)."""
    arr = np.asarray(obj)
    return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)


def _output(obj, what):
    arr = np.asarray(obj)
    if not arr.flags.c_contiguous or not arr.flags.writeable:
        raise ValueError(f"{what} must be a writable C-contiguous array or buffer")
    return arr


def _holds(arr, nbytes, what):
    """arr, when it holds at least nbytes: Baton reads or writes that many, and a shorter
    buffer would be overrun."""
    if arr.nbytes < nbytes:
        raise ValueError(f"{what} has {arr.nbytes} bytes, the call needs {nbytes}")
    return arr


def _ptr(arr):
    return arr.ctypes.data_as(ctypes.c_void_p) if arr is not None else None


class Request:
    """An operation queued on a communicator's host stream."""

    def __init__(self, comm, result, keep):
        self._comm = comm
        self._result = result
        self._keep = keep  # the arrays stay alive until the call has run
        self._done = False

    def wait(self):
        """Waits for this call (and every call queued before it); returns its result."""
        if not self._done:
            self._comm._synchronize()
            self._done = True
            self._keep = None
        return self._result

    def test(self):
        """True when the stream has nothing left queued (this call and later ones)."""
        if self._done:
            return True
        r = _lib.lib.batonStreamQuery(self._comm._stream)
        if r == 7:  # batonInProgress
            return False
        self.wait()
        return True


class Comm:
    """A Baton communicator. Use as a context manager, or call destroy()."""

    def __init__(self, handle):
        self._handle = handle
        self._stream = None
        n = ctypes.c_int()
        r = ctypes.c_int()
        _lib.check(_lib.lib.batonCommCount(handle, ctypes.byref(n)), handle)
        _lib.check(_lib.lib.batonCommUserRank(handle, ctypes.byref(r)), handle)
        self.size = n.value
        self.rank = r.value

    # ---- life cycle ----
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def __del__(self):
        try:
            self.destroy()
        except Exception:  # noqa: BLE001 - nothing to report to at collection time
            pass

    def _check_open(self):
        if self._handle is None or not self._handle.value:
            raise InvalidUsageError(5, "communicator already destroyed")

    def _synchronize(self):
        _lib.check(_lib.lib.batonStreamSynchronize(self._stream), self._handle, "async operation")

    def destroy(self):
        """Waits for queued work, then frees the communicator."""
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        if self._stream is not None:
            _lib.lib.batonStreamDestroy(self._stream)
            self._stream = None
        _lib.check(_lib.lib.batonCommDestroy(handle), None, "destroy")

    def abort(self):
        """Stops outstanding work at once (peers see an error) and frees the communicator."""
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        _lib.lib.batonCommAbort(handle)
        if self._stream is not None:
            _lib.lib.batonStreamDestroy(self._stream)
            self._stream = None

    def finalize(self):
        self._check_open()
        _lib.check(_lib.lib.batonCommFinalize(self._handle), self._handle, "finalize")

    def split(self, color, key=0, timeout=None, name=None):
        """Ranks with the same color form a new Comm (color None: this rank joins none)."""
        self._check_open()
        cfg = _lib.make_config(name, timeout) if (timeout is not None or name) else None
        new = _lib.c_comm()
        _lib.check(_lib.lib.batonCommSplit(self._handle, -1 if color is None else int(color),
                                           int(key), ctypes.byref(new),
                                           ctypes.byref(cfg) if cfg else None),
                   self._handle, "split")
        return Comm(new) if new.value else None

    # ---- the call path ----
    def _call(self, fn, args, result, keep, async_op, what):
        self._check_open()
        stream = None
        if async_op:
            if self._stream is None:
                s = _lib.c_stream()
                _lib.check(_lib.lib.batonStreamCreate(ctypes.byref(s)), None, "stream create")
                self._stream = s
            stream = self._stream
        _lib.check(getattr(_lib.lib, fn)(*args, self._handle, stream), self._handle, what)
        if async_op:
            return Request(self, result, keep)
        return result

    def _counts(self, counts, what):
        counts = [int(c) for c in counts]
        if len(counts) != self.size:
            raise ValueError(f"{what} needs {self.size} counts (one per rank), got {len(counts)}")
        if any(c < 0 for c in counts):
            raise ValueError(f"{what}: counts must not be negative")
        return counts

    @staticmethod
    def _displs(counts):
        out, at = [], 0
        for c in counts:
            out.append(at)
            at += c
        return out

    # ---- collectives ----
    def allreduce(self, send, out=None, op="sum", datatype=None, async_op=False):
        """The reduction of every rank's send (out= send for in place); returns out."""
        send = _input(send)
        out = np.empty_like(send) if out is None else _output(out, "out")
        if out.nbytes != send.nbytes:
            raise ValueError(f"out has {out.nbytes} bytes, send {send.nbytes}")
        dt = _lib.datatype_of(send, datatype)
        return self._call("batonAllReduce", [_ptr(send), _ptr(out), send.size, dt,
                                             _lib.op_code(op)], out, (send, out), async_op,
                          "allreduce")

    def broadcast(self, buf, root=0, datatype=None, async_op=False):
        """Root's buf into every rank's buf (in place); returns buf."""
        buf = _output(buf, "buf")
        dt = _lib.datatype_of(buf, datatype)
        return self._call("batonBroadcast", [_ptr(buf), _ptr(buf), buf.size, dt, int(root)], buf,
                          (buf,), async_op, "broadcast")

    def reduce(self, send, root=0, out=None, op="sum", datatype=None, async_op=False):
        """The reduction at root (returned there; None elsewhere)."""
        send = _input(send)
        if self.rank == root:
            out = np.empty_like(send) if out is None else _output(out, "out")
            _holds(out, send.nbytes, "out")
        else:
            out = None
        dt = _lib.datatype_of(send, datatype)
        return self._call("batonReduce", [_ptr(send), _ptr(out), send.size, dt, _lib.op_code(op),
                                          int(root)], out, (send, out), async_op, "reduce")

    def allgather(self, send, out=None, datatype=None, async_op=False):
        """Every rank's send stacked in rank order: shape (size, *send.shape)."""
        send = _input(send)
        if out is None:
            out = np.empty((self.size,) + send.shape, send.dtype)
        out = _holds(_output(out, "out"), self.size * send.nbytes, "out")
        dt = _lib.datatype_of(send, datatype)
        return self._call("batonAllGather", [_ptr(send), _ptr(out), send.size, dt], out,
                          (send, out), async_op, "allgather")

    def allgatherv(self, send, counts, out=None, datatype=None, async_op=False):
        """Every rank's send (counts[r] elements from rank r) back to back in one flat array."""
        send = _input(send)
        counts = self._counts(counts, "allgatherv")
        if out is None:
            out = np.empty(sum(counts), send.dtype)
        out = _holds(_output(out, "out"), sum(counts) * send.itemsize, "out")
        dt = _lib.datatype_of(send, datatype)
        c, d = _lib.size_array(counts), _lib.size_array(self._displs(counts))
        return self._call("batonAllGatherV", [_ptr(send), send.size, _ptr(out), c, d, dt], out,
                          (send, out), async_op, "allgatherv")

    def reduce_scatter(self, send, out=None, op="sum", datatype=None, async_op=False):
        """Block `rank` of the reduction of every rank's send (send.size / size elements)."""
        send = _input(send).reshape(-1)
        if send.size % self.size:
            raise ValueError(f"reduce_scatter: {send.size} elements do not split into "
                             f"{self.size} equal blocks")
        n = send.size // self.size
        out = np.empty(n, send.dtype) if out is None else _output(out, "out")
        _holds(out, n * send.itemsize, "out")
        dt = _lib.datatype_of(send, datatype)
        return self._call("batonReduceScatter", [_ptr(send), _ptr(out), n, dt, _lib.op_code(op)],
                          out, (send, out), async_op, "reduce_scatter")

    def reduce_scatterv(self, send, counts, out=None, op="sum", datatype=None, async_op=False):
        """Block `rank` (counts[rank] elements) of the reduction of every rank's send."""
        send = _input(send).reshape(-1)
        counts = self._counts(counts, "reduce_scatterv")
        _holds(send, sum(counts) * send.itemsize, "send")
        out = np.empty(counts[self.rank], send.dtype) if out is None else _output(out, "out")
        _holds(out, counts[self.rank] * send.itemsize, "out")
        dt = _lib.datatype_of(send, datatype)
        return self._call("batonReduceScatterV", [_ptr(send), _ptr(out), _lib.size_array(counts),
                                                  dt, _lib.op_code(op)], out, (send, out),
                          async_op, "reduce_scatterv")

    def alltoall(self, send, out=None, datatype=None, async_op=False):
        """Block j of send goes to rank j; block i of the result came from rank i."""
        send = _input(send)
        if send.size % self.size:
            raise ValueError(f"alltoall: {send.size} elements do not split into {self.size} "
                             f"equal blocks")
        out = np.empty_like(send) if out is None else _output(out, "out")
        _holds(out, send.nbytes, "out")
        dt = _lib.datatype_of(send, datatype)
        return self._call("batonAlltoAll", [_ptr(send), _ptr(out), send.size // self.size, dt],
                          out, (send, out), async_op, "alltoall")

    def alltoallv(self, send, sendcounts, recvcounts, out=None, datatype=None, async_op=False):
        """sendcounts[j] elements to rank j, recvcounts[i] from rank i, blocks back to back."""
        send = _input(send).reshape(-1)
        sc = self._counts(sendcounts, "alltoallv sendcounts")
        rc = self._counts(recvcounts, "alltoallv recvcounts")
        _holds(send, sum(sc) * send.itemsize, "send")
        out = np.empty(sum(rc), send.dtype) if out is None else _output(out, "out")
        _holds(out, sum(rc) * send.itemsize, "out")
        dt = _lib.datatype_of(send, datatype)
        args = [_ptr(send), _lib.size_array(sc), _lib.size_array(self._displs(sc)), _ptr(out),
                _lib.size_array(rc), _lib.size_array(self._displs(rc)), dt]
        return self._call("batonAlltoAllV", args, out, (send, out), async_op, "alltoallv")

    def gather(self, send, root=0, out=None, datatype=None, async_op=False):
        """Every rank's send stacked at root (shape (size, *send.shape)); None elsewhere."""
        send = _input(send)
        if self.rank == root:
            out = np.empty((self.size,) + send.shape, send.dtype) if out is None else out
            out = _holds(_output(out, "out"), self.size * send.nbytes, "out")
        else:
            out = None
        dt = _lib.datatype_of(send, datatype)
        return self._call("batonGather", [_ptr(send), _ptr(out), send.size, dt, int(root)], out,
                          (send, out), async_op, "gather")

    def scatter(self, out, send=None, root=0, datatype=None, async_op=False):
        """Block `rank` of root's send (size blocks of out.size elements) into out."""
        out = _output(out, "out")
        if self.rank == root:
            if send is None:
                raise ValueError("scatter: the root must pass send")
            send = _holds(_input(send), self.size * out.nbytes, "send")
        else:
            send = None
        dt = _lib.datatype_of(out, datatype)
        return self._call("batonScatter", [_ptr(send), _ptr(out), out.size, dt, int(root)], out,
                          (send, out), async_op, "scatter")

    def send(self, buf, peer, datatype=None, async_op=False):
        buf = _input(buf)
        dt = _lib.datatype_of(buf, datatype)
        return self._call("batonSend", [_ptr(buf), buf.size, dt, int(peer)], None, (buf,),
                          async_op, "send")

    def recv(self, buf, peer, datatype=None, async_op=False):
        """Receives into buf (in place); returns buf."""
        buf = _output(buf, "buf")
        dt = _lib.datatype_of(buf, datatype)
        return self._call("batonRecv", [_ptr(buf), buf.size, dt, int(peer)], buf, (buf,),
                          async_op, "recv")

    def barrier(self, async_op=False):
        return self._call("batonBarrier", [], None, (), async_op, "barrier")
