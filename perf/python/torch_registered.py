"""dist.all_reduce on a "baton" group: ordinary tensors against registered ones, interleaved.

    PYTHONPATH=build/python .venv/bin/python tests/python/launch.py -n 2 \\
        perf/python/torch_registered.py

Float32 sums in place, from 64 KiB to 64 MiB (--sizes, bytes), on torch.empty
tensors and on baton.torch.empty ones (docs/python.md, "Registered arrays");
each round times --calls calls of each kind in turn after a barrier. Rank 0
prints the slowest rank's median over --rounds rounds, us per call, and
registered / ordinary.
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist

import baton.torch

p = argparse.ArgumentParser()
p.add_argument("--sizes", default="65536,1048576,16777216,67108864")
p.add_argument("--rounds", type=int, default=7)
p.add_argument("--calls", type=int, default=10)
args = p.parse_args()

dist.init_process_group("baton")
rank, size = dist.get_rank(), dist.get_world_size()
if rank == 0:
    print(f"# {size} ranks, dist.all_reduce float32 sum in place, median of {args.rounds} "
          f"rounds of {args.calls} calls, us per call")
    print(f"{'bytes':>10} {'ordinary':>10} {'registered':>11} {'reg/ord':>8}")
slowest = torch.zeros(1, dtype=torch.float64)
for nbytes in [int(s) for s in args.sizes.split(",")]:
    count = nbytes // 4
    tensors = {"ordinary": torch.zeros(count), "registered": baton.torch.zeros(count)}
    times = {k: [] for k in tensors}
    for t in tensors.values():
        dist.all_reduce(t)  # warm-up: first touch, and the peers' mappings
    for _ in range(args.rounds):
        for kind, t in tensors.items():
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(args.calls):
                dist.all_reduce(t)
            slowest[0] = (time.perf_counter() - t0) / args.calls
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            times[kind].append(slowest.item() * 1e6)
    med = {k: statistics.median(v) for k, v in times.items()}
    if rank == 0:
        print(f"{nbytes:>10} {med['ordinary']:>10.1f} {med['registered']:>11.1f} "
              f"{med['registered'] / med['ordinary']:>8.2f}", flush=True)
dist.destroy_process_group()
