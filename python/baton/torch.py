"""Registers Baton as the torch.distributed backend "baton" (docs/python.md).

    import baton.torch
    torch.distributed.init_process_group("baton", ...)   # instead of "gloo"

CPU tensors; the unique id travels through the process group's Store.
"""

import atexit as _atexit

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

if "baton" not in _dist.Backend.backend_list:
    _dist.Backend.register_backend("baton", _create_backend, devices=["cpu"])
