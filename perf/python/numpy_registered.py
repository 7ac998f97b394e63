"""Allreduce of NumPy arrays: ordinary arrays against registered ones, interleaved.

    PYTHONPATH=build/python batonrun -n 2 .venv/bin/python perf/python/numpy_registered.py

Float32 sums into a preallocated output, out of place (comm.allreduce(x, out=y)),
from 64 KiB to 64 MiB (--sizes, bytes); each round times --calls calls of each
kind in turn after a barrier. Kinds: ordinary (np.ones / np.empty), registered
(comm.empty) and pool (np.ones / np.empty made while baton.use_registered_memory
is on, the arrays a program makes itself). Rank 0 prints the slowest rank's
median over --rounds rounds, us per call, and registered / ordinary, pool /
ordinary (docs/python.md).
"""

import argparse
import statistics
import time

import numpy as np

import baton

p = argparse.ArgumentParser()
p.add_argument("--sizes", default="65536,1048576,16777216,67108864")
p.add_argument("--rounds", type=int, default=7)
p.add_argument("--calls", type=int, default=10)
args = p.parse_args()

comm = baton.init()
if comm.rank == 0:
    print(f"# {comm.size} ranks, allreduce float32 sum out of place, median of {args.rounds} "
          f"rounds of {args.calls} calls, us per call")
    print(f"{'bytes':>10} {'ordinary':>10} {'registered':>11} {'pool':>10} {'reg/ord':>8} "
          f"{'pool/ord':>8}")
slowest = np.zeros(1)
for nbytes in [int(s) for s in args.sizes.split(",")]:
    count = nbytes // 4
    arrays = {"ordinary": (np.ones(count, np.float32), np.empty(count, np.float32)),
              "registered": (comm.empty(count), comm.empty(count))}
    arrays["registered"][0][:] = 1
    baton.use_registered_memory(min_bytes=min(nbytes, 256 << 10))
    arrays["pool"] = (np.ones(count, np.float32), np.empty(count, np.float32))
    baton.use_registered_memory(False)
    assert all(baton.in_registered_memory(a) for a in arrays["pool"])
    times = {k: [] for k in arrays}
    for x, y in arrays.values():
        comm.allreduce(x, out=y)  # warm-up: first touch, and the peers' mappings
    for _ in range(args.rounds):
        for kind, (x, y) in arrays.items():
            comm.barrier()
            t0 = time.perf_counter()
            for _ in range(args.calls):
                comm.allreduce(x, out=y)
            slowest[0] = (time.perf_counter() - t0) / args.calls
            comm.allreduce(slowest, out=slowest, op="max")
            times[kind].append(slowest[0] * 1e6)
    for kind, (x, y) in arrays.items():
        assert y[0] == comm.size and y[-1] == comm.size, (kind, y[:4])
    med = {k: statistics.median(v) for k, v in times.items()}
    if comm.rank == 0:
        print(f"{nbytes:>10} {med['ordinary']:>10.1f} {med['registered']:>11.1f} "
              f"{med['pool']:>10.1f} {med['registered'] / med['ordinary']:>8.2f} "
              f"{med['pool'] / med['ordinary']:>8.2f}", flush=True)
comm.destroy()
