"""Values the torch tests send and compare: small integers, so sums are exact in any order."""

import torch


def data(r, n, dtype):
    """Rank r's n values, -3..7, as dtype."""
    return ((torch.arange(n) * 7 + r * 3) % 11 - 3).to(dtype)


def same(failures, name, got, want):
    """Appends to failures unless got equals want in dtype, shape and every value."""
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        failures.append(f"{name}: got {got.flatten()[:6].tolist()} ({got.dtype}, "
                        f"{tuple(got.shape)}), want {want.flatten()[:6].tolist()}")
