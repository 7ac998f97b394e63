"""Registers Baton as the torch.distributed backend "baton" (docs/python.md).

    import baton.torch
    torch.distributed.init_process_group("baton", ...)   # instead of "gloo"

CPU tensors, and CUDA tensors in allreduce, broadcast, reduce, all_gather_into_tensor and
reduce_scatter_tensor where torch has CUDA and a GPU; the unique id travels through the
process group's Store.
"""

import atexit as _atexit

import torch as _torch
import torch.distributed as _dist

try:
    from . import _baton_torch
except ImportError as e:  # the extension is built only where torch was found
    raise ImportError("baton.torch: the _baton_torch extension is not built (meson builds it "
                      "when the venv of scripts/setup.sh has torch; see docs/python.md): "
                      f"{e}") from e

BatonBackend = _baton_torch.BatonBackend


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
