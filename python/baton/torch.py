"""Registers Baton as the torch.distributed backend "baton" (docs/python.md).

    import baton.torch
    torch.distributed.init_process_group("baton", ...)   # instead of "gloo"

CPU tensors; the unique id travels through the process group's Store.
"""

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


if "baton" not in _dist.Backend.backend_list:
    _dist.Backend.register_backend("baton", _create_backend, devices=["cpu"])
