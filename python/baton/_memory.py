"""Arrays in memory the other processes of a host can map, and their registration.

Collectives whose buffers are registered on every rank (batonMemAlloc memory,
batonCommRegister) read the peers' buffers in place: one pass through memory
instead of the shared-memory rings' copies (docs/python.md, "Registered
arrays"). baton.empty / baton.zeros allocate such memory as NumPy arrays;
Comm.register registers one (a Registration, given back by close() or at the
end of a with block); Comm.empty / Comm.zeros do both, the registration
lasting as long as the memory or the communicator.
"""

import ctypes
import math
import threading
import weakref

import numpy as np

from . import _lib

# What gives back the registrations tied to an allocation (Comm.empty,
# baton.torch.empty), by its address: callables run before it is freed.
_tied = {}
_tied_lock = threading.Lock()


def _release(address):
    """Frees one allocation once no array uses it, after its tied registrations."""
    with _tied_lock:
        ties = _tied.pop(address, [])
    for give_back in ties:
        try:
            give_back()
        except Exception:  # noqa: BLE001 - at collection time there is nobody to raise to
            pass  # (batonMemFree then refuses memory still registered: it stays allocated)
    _lib.lib.batonMemFree(ctypes.c_void_p(address))


def _shape(shape):
    shape = (int(shape),) if np.isscalar(shape) else tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise ValueError(f"negative dimensions are not allowed: {shape}")
    return shape


def empty(shape, dtype=np.float32):
    """An uninitialized C-contiguous array in memory the peers of this host can map
    (batonMemAlloc, zeroed as allocated). Freed when the last array over it is gone."""
    shape, dtype = _shape(shape), np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    address = ctypes.c_void_p()
    # (a zero-size array still gets a page, so every array has an allocation)
    _lib.check(_lib.lib.batonMemAlloc(ctypes.byref(address), max(nbytes, 1)), what="empty")
    raw = (ctypes.c_char * max(nbytes, 1)).from_address(address.value)
    with _tied_lock:
        _tied[address.value] = []
    # Every array made from this one (views, slices, reshapes) keeps `raw` as its base.
    weakref.finalize(raw, _release, address.value)
    return np.frombuffer(raw, dtype=dtype, count=math.prod(shape)).reshape(shape)


def zeros(shape, dtype=np.float32):
    """As empty, filled with zeros."""
    return empty(shape, dtype)  # batonMemAlloc zeroes what it returns


def registered_empty(shape, dtype, owner, register, deregister):
    """empty's array, registered by register(array) -> handle (unless it is empty) for as
    long as both the memory and `owner` live: deregister(owner, handle) runs before the
    memory is freed if owner is still there (Comm.empty, baton.torch.empty)."""
    array = empty(shape, dtype)
    if array.nbytes == 0:
        return array  # nothing to register
    handle = register(array)
    owner_ref = weakref.ref(owner)

    def give_back():
        live = owner_ref()
        if live is not None:
            deregister(live, handle)

    with _tied_lock:
        _tied[array.ctypes.data].append(give_back)
    return array


class Registration:
    """A buffer registered on a communicator (Comm.register). Keeps the buffer alive
    until close(), which gives the registration back (at the end of a with block too);
    the communicator's destroy gives back every registration still open."""

    def __init__(self, comm, array, handle):
        self._comm = weakref.ref(comm)
        self._array = array
        self._handle = handle

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - nothing to report to at collection time
            pass

    @property
    def closed(self):
        return self._handle is None

    def close(self):
        """Gives the registration back (batonCommDeregister); a second close does nothing."""
        handle, self._handle = self._handle, None
        comm = self._comm()
        if handle is not None and comm is not None:
            comm._deregister(handle)
        self._array = None  # only now: the memory outlives its registration

    def _forget(self):
        """The communicator was destroyed, and the registration with it."""
        self._handle = None
        self._array = None


def register(comm, buf):
    """batonCommRegister of buf's bytes (a C-contiguous buffer) on comm: the handle and the
    array it covers."""
    array = np.asarray(buf)
    if not array.flags.c_contiguous:
        raise ValueError("register: the buffer must be C-contiguous (the peers read its bytes "
                         "in one piece)")
    if array.nbytes == 0:
        raise ValueError("register: the buffer is empty")
    handle = ctypes.c_void_p()
    _lib.check(_lib.lib.batonCommRegister(comm._handle, ctypes.c_void_p(array.ctypes.data),
                                          array.nbytes, ctypes.byref(handle)),
               comm._handle, "register")
    return array, handle.value


# ---- use_registered_memory: NumPy's own allocations in registered memory ----
# The _numpy_memory extension (NumPy's memory handler over a pool of
# batonMemAlloc blocks, which keeps the communicators it registers on) once
# use_registered_memory ran; and every live Comm, to attach those made before
# the first call.
_pool = None
_live_comms = weakref.WeakSet()


def use_registered_memory(enabled=True, min_bytes=256 << 10, cache_bytes=1 << 30):
    """From now on, arrays of at least min_bytes that NumPy allocates in this thread (np.empty,
    np.zeros, the results of NumPy's operations, Comm calls' outputs) live in memory the other
    processes of this host can map, registered on every communicator of this process, those
    made later included: collectives on them read the peers' arrays in place, as on
    Comm.empty's, with no change to the program (docs/python.md, "Registered memory for every
    array"). Arrays made earlier stay where they are; smaller ones take malloc. Freed blocks
    are kept for reuse up to cache_bytes (release_cached_memory() gives them back).
    enabled=False: later arrays take NumPy's allocator again.

    NumPy keeps its allocator per thread (per context): threads started later use NumPy's
    own unless they call this too. A child forked afterwards allocates with malloc until it
    calls this itself (then from a pool of its own), and it shares, rather than copies, the
    parent's arrays of at least min_bytes."""
    global _pool
    if min_bytes <= 0 or cache_bytes < 0:
        raise ValueError(f"baton.use_registered_memory: min_bytes {min_bytes} must be positive "
                         f"and cache_bytes {cache_bytes} not negative")
    if _pool is None:
        from . import _numpy_memory
        _pool = _numpy_memory
        for comm in list(_live_comms):
            if comm._h:  # not destroyed
                _pool.attach(comm._h)
    _pool.use(bool(enabled), int(min_bytes), int(cache_bytes))


def registered_memory_stats():
    """What use_registered_memory's pool holds: enabled, min_bytes, cache_bytes,
    blocks_in_use / bytes_in_use, blocks_cached / bytes_cached, allocations (served from
    registered memory), reused (of those, from the cache), fallbacks (declined: no block to be
    had), max_blocks (a quarter of the open-file limit), communicators, registrations (block,
    communicator pairs). Before the first use_registered_memory, all zero."""
    if _pool is None:
        from . import _numpy_memory
        return _numpy_memory.stats()
    return _pool.stats()


def release_cached_memory():
    """Gives the cached free blocks of use_registered_memory's pool back; returns their bytes."""
    return 0 if _pool is None else _pool.release_cached()


def in_registered_memory(array):
    """Whether the array's data lies in use_registered_memory's pool."""
    return _pool is not None and _pool.contains(np.asarray(array).ctypes.data)


def comm_opened(comm):
    """A Comm was made: the pool's blocks are registered on it, now or at the first
    use_registered_memory."""
    _live_comms.add(comm)
    if _pool is not None:
        _pool.attach(comm._h)


def comm_closing(handle):
    """A communicator is about to be destroyed or aborted (detaching one the pool never
    attached does nothing)."""
    if _pool is not None:
        _pool.detach(handle)
