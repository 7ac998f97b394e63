"""Registers Baton as the torch.distributed backend "baton" (docs/python.md).

    import baton.torch
    torch.distributed.init_process_group("baton", ...)   # instead of "gloo"

CPU tensors, and CUDA tensors in allreduce, broadcast, reduce, all_gather_into_tensor and
reduce_scatter_tensor where torch has CUDA and a GPU; the unique id travels through the
process group's Store.
"""

import atexit as _atexit
import math as _math

from . import _build_info, _memory

_REBUILD = ("with that torch installed, `pip install --no-build-isolation --force-reinstall .` "
            "in Baton's source (meson builds: a -Dpython= that has it; docs/python.md)")

if _build_info.TORCH_VERSION is None:
    raise ImportError("baton.torch: this baton was built without torch (torch was not importable "
                      "when it was built), so it has no torch backend; to get it: "
                      + _REBUILD)

try:
    import torch as _torch
except ImportError as e:
    raise ImportError(f"baton.torch: needs torch {_build_info.TORCH_VERSION} (the torch it "
                      f"was built for): {e}") from e


def _public(version):
    return version.split("+")[0]


# The extension is compiled against one torch's C++ API, which changes between
# releases: loaded under another torch it may fail to link or misbehave. Only
# the local label (+cu132, +cpu) may differ.
if _public(_torch.__version__) != _public(_build_info.TORCH_VERSION):
    raise ImportError(f"baton.torch: built for torch {_build_info.TORCH_VERSION}, but torch "
                      f"{_torch.__version__} is installed; rebuild baton against it: " + _REBUILD)

import torch.distributed as _dist  # noqa: E402 (after the check: any torch may be there)

try:
    from . import _baton_torch
except ImportError as e:  # e.g. a torch without the CUDA libraries the extension links
    raise ImportError(f"baton.torch: the _baton_torch extension (built for torch "
                      f"{_build_info.TORCH_VERSION}) does not load under torch "
                      f"{_torch.__version__}: {e}; " + _REBUILD) from e

BatonBackend = _baton_torch.BatonBackend


_backends = {}  # (process group, device type) -> its BatonBackend, for all_reduce


def _backend_of(group, device, what):
    pg = _dist.group.WORLD if group is None else group
    key = (pg, device.type)
    backend = _backends.get(key)
    if backend is None:
        backend = pg._get_backend(device)
        if not isinstance(backend, BatonBackend):
            raise ValueError(f"{what}: the group's backend for {device} is "
                             f"{type(backend).__name__}, not baton's")
        _backends[key] = backend
    return backend


def all_reduce(tensor, op=_dist.ReduceOp.SUM, group=None):
    """dist.all_reduce(tensor, op, group) on a "baton" group, blocking, in place, without
    torch.distributed's Python layer, dispatcher and hooks (its flight recorder does not see
    the call): what DeepSpeed's inference_all_reduce is to its SHM op. CPU tensors and
    CUDA tensors as the backend takes them."""
    backend = _backend_of(group, tensor.device, "baton.torch.all_reduce")
    _baton_torch._all_reduce(backend, tensor, op)


def empty(*size, dtype=_torch.float32, group=None):
    """A CPU tensor in memory the other processes of this host can map (baton.empty),
    registered on the "baton" group's communicator (the default group when None) for as
    long as both live: collectives of that group whose tensors are all such, on every rank
    of one host, read the peers' tensors in place (docs/python.md, "Registered arrays")."""
    shape = tuple(size[0]) if len(size) == 1 and not isinstance(size[0], int) else tuple(size)
    backend = _backend_of(group, _torch.device("cpu"), "baton.torch.empty")
    nbytes = _math.prod(shape) * _torch.empty((), dtype=dtype).element_size()
    raw = _memory.registered_empty(
        nbytes, "uint8", backend,
        lambda array: _baton_torch._register(backend, array.ctypes.data, array.nbytes),
        _baton_torch._deregister)
    return _torch.from_numpy(raw).view(dtype).reshape(shape)  # keeps raw, and so the memory


def zeros(*size, dtype=_torch.float32, group=None):
    """As empty, filled with zeros."""
    return empty(*size, dtype=dtype, group=group)  # batonMemAlloc zeroes what it returns


def use_registered_memory(enabled=True, min_bytes=256 << 10, cache_bytes=1 << 30):
    """From now on, CPU tensors of at least min_bytes that torch allocates (torch.empty,
    torch.randn, a layer's gradients, DDP's buckets, FSDP's gathered parameters) live in
    memory the other processes of this host can map, registered on every "baton" group's
    communicator: collectives on them read the peers' tensors in place, as on
    baton.torch.empty's, with no change to the program (docs/python.md, "Registered
    memory for every tensor"). Call it before the model and its optimizer are made; tensors
    made earlier stay where they are. Smaller tensors keep torch's allocator. Freed blocks
    are kept for reuse up to cache_bytes (release_cached_memory() gives them back).
    enabled=False: later tensors take torch's allocator again.

    A child forked afterwards (DataLoader workers) allocates from torch's allocator until it
    calls this itself (then from a pool of its own), and it shares, rather than copies, the
    parent's tensors of at least min_bytes: what it writes into one, the parent sees."""
    if min_bytes <= 0 or cache_bytes < 0:
        raise ValueError(f"baton.torch.use_registered_memory: min_bytes {min_bytes} must be "
                         f"positive and cache_bytes {cache_bytes} not negative")
    _baton_torch._use_registered_memory(bool(enabled), int(min_bytes), int(cache_bytes))


def registered_memory_stats():
    """What use_registered_memory's allocator holds: enabled, min_bytes, cache_bytes,
    blocks_in_use / bytes_in_use, blocks_cached / bytes_cached, allocations (served from
    registered memory), reused (of those, from the cache), fallbacks (served by torch's
    allocator because Baton could not allocate), communicators, registrations (block,
    communicator pairs)."""
    return _baton_torch._registered_memory_stats()


def release_cached_memory():
    """Gives the cached free blocks of use_registered_memory's allocator back to the
    system; returns their bytes."""
    return _baton_torch._release_cached_memory()


def in_registered_memory(tensor):
    """Whether the tensor lies in memory of use_registered_memory's allocator."""
    return tensor.device.type == "cpu" and _baton_torch._in_registered_memory(tensor.data_ptr())


def _create_backend(store, rank, size, timeout):
    return BatonBackend(store, rank, size, timeout)


# Before the interpreter's finalization, while the workers can still take the
# GIL to free tensors (backend.h, ShutdownAll).
_atexit.register(_baton_torch._shutdown_all)

# CUDA tensors where the extension takes them and a GPU is there (without one,
# a group registered for "cuda" would pick CUDA tensors for its own calls).
_devices = ["cpu"]
if _baton_torch.cuda_tensors and _torch.cuda.is_available():
    _devices.append("cuda")
if "baton" not in _dist.Backend.backend_list:
    _dist.Backend.register_backend("baton", _create_backend, devices=_devices)
