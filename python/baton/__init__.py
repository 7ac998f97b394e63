"""Baton's collectives for NumPy arrays and buffer-protocol objects (docs/python.md).

    import baton, numpy as np
    comm = baton.init()                      # batonrun, mpirun, srun or torchrun environment
    total = comm.allreduce(np.ones(4), op="sum")

Every call blocks until done unless it is given async_op=True, which queues it
on the communicator's host stream and returns a Request (wait() gives the
result, or raises that call's own error). Failures raise BatonError
subclasses carrying Baton's message.
"""

import ctypes
import weakref

import numpy as np

from . import _core, _lib, _memory
from ._memory import (Registration, empty, in_registered_memory, registered_memory_stats,
                      release_cached_memory, use_registered_memory, zeros)
from ._lib import (BatonError, BatonTimeoutError, InvalidArgumentError, InvalidUsageError,
                   RemoteError)

__all__ = ["init", "init_rank", "get_unique_id", "Comm", "Request", "BatonError",
           "InvalidArgumentError", "InvalidUsageError", "RemoteError", "BatonTimeoutError",
           "version", "wait_all", "empty", "zeros", "Registration", "use_registered_memory",
           "registered_memory_stats", "release_cached_memory", "in_registered_memory"]


def version():
    v = ctypes.c_int()
    _lib.check(_lib.lib.batonGetVersion(ctypes.byref(v)))
    return v.value


def get_unique_id():
    """A fresh unique id (bytes) to hand to every rank for init_rank; this process serves it."""
    uid = _lib.UniqueId()
    _lib.check(_lib.lib.batonGetUniqueId(ctypes.byref(uid)), what="get_unique_id")
    return bytes(uid)  # all 128 bytes (uid.internal, a c_char array, stops at a NUL)


def init():
    """The communicator of the launcher's job (batonCommInitFromEnv)."""
    handle = _lib.c_comm()
    _lib.check(_lib.lib.batonCommInitFromEnv(ctypes.byref(handle)), what="init")
    return Comm(handle)


def init_rank(nranks, unique_id, rank, timeout=None, name=None):
    """Joins a communicator of nranks ranks made from get_unique_id()'s bytes."""
    if len(unique_id) != _lib.UNIQUE_ID_BYTES:
        raise ValueError(f"unique_id must be {_lib.UNIQUE_ID_BYTES} bytes, not {len(unique_id)}")
    # (uid.internal reads as a bytes copy: the id is copied into the structure itself)
    uid = _lib.UniqueId.from_buffer_copy(bytes(unique_id))
    cfg = _lib.make_config(name, timeout)
    handle = _lib.c_comm()
    _lib.check(_lib.lib.batonCommInitRankConfig(ctypes.byref(handle), int(nranks), uid, int(rank),
                                                ctypes.byref(cfg)), what="init_rank")
    return Comm(handle)


def _input(obj):
    """A C-contiguous array over obj (copied only when obj is not contiguous)."""
    arr = np.asarray(obj)
    return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)


class Request:
    """A call queued on a communicator's host stream, with an event recorded right after it.

    The event completes when this call has run and reports this call's error
    alone (batonEventRecord's contract in include/baton.h), so requests may be
    waited for in any order. The arrays the call reads or writes stay alive
    until it has run, also when the Request is dropped unwaited.
    """

    def __init__(self, comm, what, result, keep):
        self._comm = comm
        self._what = what
        self._result = result
        self._keep = keep
        self._error = None
        self._event = None
        event = _lib.c_event()
        r = _lib.lib.batonEventCreate(ctypes.byref(event))
        if r == 0:
            r = _lib.lib.batonEventRecord(event, comm._stream)
            if r == 0:
                self._event = event
                return
            _lib.lib.batonEventDestroy(event)
        try:
            _lib.check(r, None, f"{what}: recording its event")
        finally:  # the call is queued: it must not outlive its arrays
            _lib.lib.batonStreamSynchronize(comm._stream)
            self._keep = None

    def _finish(self):
        """Waits for the event, keeps its outcome, frees it and the arrays."""
        r = _lib.lib.batonEventSynchronize(self._event)
        try:
            _lib.check(r, None, self._what)  # the message is batonGetLastError(NULL)'s
        except BatonError as e:
            self._error = e
        event, self._event, self._keep = self._event, None, None
        _lib.lib.batonEventDestroy(event)

    def wait(self):
        """Waits for this call alone; returns its result or raises its error."""
        if self._event is not None:
            self._finish()
        if self._error is not None:
            raise self._error
        return self._result

    def done(self):
        """True once this call has run (successfully or not); never blocks or raises."""
        return self._event is None or _lib.lib.batonEventQuery(self._event) != _lib.IN_PROGRESS

    def test(self):
        """True once this call has run, False while it has not; raises its error."""
        if not self.done():
            return False
        self.wait()
        return True

    def __del__(self):
        try:
            event = self._event
            if event is None:
                return
            self._event = None
            if self._keep and _lib.lib.batonEventQuery(event) == _lib.IN_PROGRESS:
                self._comm._orphans.append((event, self._keep))  # freed once the call has run
            else:
                _lib.lib.batonEventDestroy(event)
        except Exception:  # noqa: BLE001 - at interpreter exit the modules may be gone
            pass


def wait_all(requests):
    """Waits for every request; returns their results in order, or raises the first error
    (of the earliest failed request) once all have finished."""
    results, error = [], None
    for req in requests:
        try:
            results.append(req.wait())
        except BatonError as e:
            results.append(None)
            error = error or e
    if error is not None:
        raise error
    return results


class Comm:
    """A Baton communicator. Use as a context manager, or call destroy()."""

    def __init__(self, handle):
        self._handle = handle
        self._h = handle.value  # the handle as _core takes it; 0 once destroyed
        self._stream = None
        self._orphans = []  # (event, arrays) of Requests dropped while their call was queued
        self._registrations = weakref.WeakSet()  # open Registrations (register())
        n = ctypes.c_int()
        r = ctypes.c_int()
        _lib.check(_lib.lib.batonCommCount(handle, ctypes.byref(n)), handle)
        _lib.check(_lib.lib.batonCommUserRank(handle, ctypes.byref(r)), handle)
        self.size = n.value
        self.rank = r.value
        _memory.comm_opened(self)  # use_registered_memory's blocks registered on it

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

    def synchronize(self):
        """Waits for every asynchronous call queued so far; raises the first error of any
        call since the last synchronize (requests already waited for included)."""
        if self._stream is not None:
            _lib.check(_lib.lib.batonStreamSynchronize(self._stream), self._handle,
                       "async operation")
        self._free_orphans(all_done=True)

    def _free_orphans(self, all_done=False):
        """Frees what dropped Requests left once their calls have run."""
        pending = []
        for event, keep in self._orphans:
            if not all_done and _lib.lib.batonEventQuery(event) == _lib.IN_PROGRESS:
                pending.append((event, keep))
            else:
                _lib.lib.batonEventDestroy(event)
        self._orphans = pending

    def destroy(self):
        """Waits for queued work, then frees the communicator."""
        if self._handle is None:
            return
        handle, self._handle, self._h = self._handle, None, 0
        if self._stream is not None:
            _lib.lib.batonStreamDestroy(self._stream)  # waits for the queued calls
            self._stream = None
        self._free_orphans(all_done=True)
        self._forget_registrations()
        _memory.comm_closing(handle.value)
        _lib.check(_lib.lib.batonCommDestroy(handle), None, "destroy")

    def abort(self):
        """Stops outstanding work at once (peers see an error) and frees the communicator."""
        if self._handle is None:
            return
        handle, self._handle, self._h = self._handle, None, 0
        self._forget_registrations()
        _memory.comm_closing(handle.value)
        _lib.lib.batonCommAbort(handle)
        if self._stream is not None:
            _lib.lib.batonStreamDestroy(self._stream)
            self._stream = None
        self._free_orphans(all_done=True)

    # ---- registered arrays (_memory.py) ----
    def register(self, buf):
        """Registers buf (a C-contiguous buffer; one from baton.empty or baton.zeros to be of
        use) on this communicator: collectives whose send and receive buffers are registered
        on every rank of one host read the peers' buffers in place (batonCommRegister).
        Returns a Registration (close() or a with block gives it back); it keeps buf alive."""
        self._check_open()
        array, handle = _memory.register(self, buf)
        reg = Registration(self, array, handle)
        self._registrations.add(reg)
        return reg

    def empty(self, shape, dtype=np.float32):
        """baton.empty's array, registered on this communicator for as long as both live."""
        self._check_open()
        return _memory.registered_empty(shape, dtype, self,
                                        lambda array: _memory.register(self, array)[1],
                                        Comm._deregister)

    def zeros(self, shape, dtype=np.float32):
        """As empty, filled with zeros."""
        return self.empty(shape, dtype)  # batonMemAlloc zeroes what it returns

    def _deregister(self, handle):
        """batonCommDeregister; nothing once destroyed (destroy gave every registration back)."""
        if self._handle is not None:
            _lib.check(_lib.lib.batonCommDeregister(self._handle, ctypes.c_void_p(handle)),
                       self._handle, "deregister")

    def _forget_registrations(self):
        """Destroying the communicator gives back every registration on it."""
        for reg in list(self._registrations):
            reg._forget()

    def failed_ranks(self):
        """The ranks of this communicator known to have failed (batonCommGetFailedRanks), a list
        in ascending order, [] when none; what to pass to a shrink. Meant for after a failure:
        a communicator's RemoteError and BatonTimeoutError carry the same list as
        `failed_ranks`."""
        self._check_open()
        return _lib.failed_ranks(self._handle)

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
    # Each collective hands its buffers to the _core extension as they are; it checks
    # them (dtype, contiguity, every buffer holds what Baton will read or write) and
    # makes the C call without the GIL. Outputs are allocated here when not given.
    # An asynchronous call's inputs are made contiguous arrays here, so that the
    # arrays the queued call reads are the ones its Request keeps alive.

    def _async_stream(self):
        """The host stream asynchronous calls are queued on (made at the first)."""
        self._check_open()
        if self._stream is None:
            s = _lib.c_stream()
            _lib.check(_lib.lib.batonStreamCreate(ctypes.byref(s)), None, "stream create")
            self._stream = s
        elif self._orphans:
            self._free_orphans()
        return self._stream.value

    def _counts(self, counts, what):
        counts = [int(c) for c in counts]
        if len(counts) != self.size:
            raise ValueError(f"{what} needs {self.size} counts (one per rank), got {len(counts)}")
        if any(c < 0 for c in counts):
            raise ValueError(f"{what}: counts must not be negative")
        return counts

    # ---- collectives ----
    def allreduce(self, send, out=None, op="sum", datatype=None, async_op=False):
        """The reduction of every rank's send (out= send for in place); returns out."""
        if out is None or async_op:
            send = _input(send)
            if out is None:
                out = np.empty_like(send)
        _core.allreduce(self._h, async_op and self._async_stream(), send, out, op, datatype)
        return Request(self, "allreduce", out, (send, out)) if async_op else out

    def broadcast(self, buf, root=0, datatype=None, async_op=False):
        """Root's buf into every rank's buf (in place); returns buf."""
        _core.broadcast(self._h, async_op and self._async_stream(), buf, root, datatype)
        return Request(self, "broadcast", buf, (buf,)) if async_op else buf

    def reduce(self, send, root=0, out=None, op="sum", datatype=None, async_op=False):
        """The reduction at root (returned there; None elsewhere)."""
        send = _input(send)
        if self.rank == root:
            if out is None:
                out = np.empty_like(send)
        else:
            out = None
        _core.reduce(self._h, async_op and self._async_stream(), send, out, op, root, datatype)
        return Request(self, "reduce", out, (send, out)) if async_op else out

    def allgather(self, send, out=None, datatype=None, async_op=False):
        """Every rank's send stacked in rank order: shape (size, *send.shape)."""
        send = _input(send)
        if out is None:
            out = np.empty((self.size,) + send.shape, send.dtype)
        _core.allgather(self._h, async_op and self._async_stream(), send, out, datatype)
        return Request(self, "allgather", out, (send, out)) if async_op else out

    def allgatherv(self, send, counts, out=None, datatype=None, async_op=False):
        """Every rank's send (counts[r] elements from rank r) back to back in one flat array."""
        send = _input(send)
        counts = self._counts(counts, "allgatherv")
        if out is None:
            out = np.empty(sum(counts), send.dtype)
        _core.allgatherv(self._h, async_op and self._async_stream(), send, out, counts, datatype)
        return Request(self, "allgatherv", out, (send, out)) if async_op else out

    def reduce_scatter(self, send, out=None, op="sum", datatype=None, async_op=False):
        """Block `rank` of the reduction of every rank's send (send.size / size elements)."""
        send = _input(send)
        if out is None:
            out = np.empty(send.size // self.size, send.dtype)
        _core.reduce_scatter(self._h, async_op and self._async_stream(), send, out, op, datatype)
        return Request(self, "reduce_scatter", out, (send, out)) if async_op else out

    def reduce_scatterv(self, send, counts, out=None, op="sum", datatype=None, async_op=False):
        """Block `rank` (counts[rank] elements) of the reduction of every rank's send."""
        send = _input(send)
        counts = self._counts(counts, "reduce_scatterv")
        if out is None:
            out = np.empty(counts[self.rank], send.dtype)
        _core.reduce_scatterv(self._h, async_op and self._async_stream(), send, out, counts, op,
                              datatype)
        return Request(self, "reduce_scatterv", out, (send, out)) if async_op else out

    def alltoall(self, send, out=None, datatype=None, async_op=False):
        """Block j of send goes to rank j; block i of the result came from rank i."""
        send = _input(send)
        if out is None:
            out = np.empty_like(send)
        _core.alltoall(self._h, async_op and self._async_stream(), send, out, datatype)
        return Request(self, "alltoall", out, (send, out)) if async_op else out

    def alltoallv(self, send, sendcounts, recvcounts, out=None, datatype=None, async_op=False):
        """sendcounts[j] elements to rank j, recvcounts[i] from rank i, blocks back to back."""
        send = _input(send)
        sc = self._counts(sendcounts, "alltoallv sendcounts")
        rc = self._counts(recvcounts, "alltoallv recvcounts")
        if out is None:
            out = np.empty(sum(rc), send.dtype)
        _core.alltoallv(self._h, async_op and self._async_stream(), send, out, sc, rc, datatype)
        return Request(self, "alltoallv", out, (send, out)) if async_op else out

    def gather(self, send, root=0, out=None, datatype=None, async_op=False):
        """Every rank's send stacked at root (shape (size, *send.shape)); None elsewhere."""
        send = _input(send)
        if self.rank == root:
            if out is None:
                out = np.empty((self.size,) + send.shape, send.dtype)
        else:
            out = None
        _core.gather(self._h, async_op and self._async_stream(), send, out, root, datatype)
        return Request(self, "gather", out, (send, out)) if async_op else out

    def scatter(self, out, send=None, root=0, datatype=None, async_op=False):
        """Block `rank` of root's send (size blocks of out.size elements) into out."""
        if self.rank == root:
            if send is None:
                raise ValueError("scatter: the root must pass send")
            send = _input(send)
        else:
            send = None
        _core.scatter(self._h, async_op and self._async_stream(), send, out, root, datatype)
        return Request(self, "scatter", out, (send, out)) if async_op else out

    def send(self, buf, peer, datatype=None, async_op=False):
        if async_op:
            buf = _input(buf)
        _core.send(self._h, async_op and self._async_stream(), buf, peer, datatype)
        return Request(self, "send", None, (buf,)) if async_op else None

    def recv(self, buf, peer, datatype=None, async_op=False):
        """Receives into buf (in place); returns buf."""
        _core.recv(self._h, async_op and self._async_stream(), buf, peer, datatype)
        return Request(self, "recv", buf, (buf,)) if async_op else buf

    def recv_any(self, buf, datatype=None):
        """Receives into buf from whichever rank's send comes first (batonRecvAny);
        returns that rank. Synchronous; buf must not be empty."""
        return _core.recv_any(self._h, 0, buf, datatype)

    def barrier(self, async_op=False):
        _core.barrier(self._h, async_op and self._async_stream())
        return Request(self, "barrier", None, ()) if async_op else None
