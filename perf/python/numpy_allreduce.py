"""Allreduce of NumPy arrays: the baton package against mpi4py (Open MPI), interleaved.

    mpirun -np 4 .venv/bin/python perf/python/numpy_allreduce.py

(PYTHONPATH=build/python; baton.init() takes the job from Open MPI's PMIx.)
Float32 sums from 8 B to 64 MiB into a preallocated output (comm.allreduce(x,
out=y) and MPI's Allreduce(x, y)); rank 0 prints the slowest rank's median.
"""

import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

import baton

mpi = MPI.COMM_WORLD
comm = baton.init()
iters = int(sys.argv[1]) if len(sys.argv) > 1 else 50
if comm.rank == 0:
    print(f"# {comm.size} ranks, allreduce float32 sum, median of {iters} calls")
    print(f"{'bytes':>10} {'baton us':>10} {'mpi4py us':>10} {'mpi/baton':>10}")
for nbytes in [8 << (3 * i) for i in range(8)] + [64 << 20]:  # 8 B, 64 B, ..., 16 MiB, 64 MiB
    x = np.ones(nbytes // 4, np.float32)
    y = np.empty_like(x)
    n = max(3, iters if nbytes <= (1 << 20) else iters // 10)
    runs = {"baton": lambda: comm.allreduce(x, out=y), "mpi": lambda: mpi.Allreduce(x, y)}
    times = {k: [] for k in runs}
    for f in runs.values():
        f()
    for _ in range(n):
        for k, f in runs.items():
            mpi.Barrier()
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    med = {k: mpi.allreduce(statistics.median(v), op=MPI.MAX) * 1e6 for k, v in times.items()}
    if comm.rank == 0:
        print(f"{nbytes:>10} {med['baton']:>10.1f} {med['mpi']:>10.1f} "
              f"{med['mpi'] / med['baton']:>10.2f}", flush=True)
comm.destroy()
