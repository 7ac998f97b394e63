"""all_reduce time on the "baton" and "gloo" torch.distributed backends, interleaved.

    python3 tests/python/launch.py -n 4 perf/python/torch_allreduce.py [--iters 20]

(PYTHONPATH=build/python.) Float32 sums from 1 KiB to 64 MiB; for each size the
two backends take turns, several rounds, and rank 0 prints each one's median.
"""

import argparse
import datetime
import statistics
import time

import torch
import torch.distributed as dist

import baton.torch  # noqa: F401

p = argparse.ArgumentParser()
p.add_argument("--iters", type=int, default=20)
p.add_argument("--min-bytes", type=int, default=1 << 10)
p.add_argument("--max-bytes", type=int, default=64 << 20)
a = p.parse_args()
torch.set_num_threads(1)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
groups = {"gloo": dist.group.WORLD,
          "baton": dist.new_group(backend="baton", timeout=datetime.timedelta(seconds=120))}
rank, size = dist.get_rank(), dist.get_world_size()
if rank == 0:
    print(f"# {size} ranks, all_reduce float32 sum, median of {a.iters} calls per backend")
    print(f"{'bytes':>10} {'baton us':>10} {'gloo us':>10} {'gloo/baton':>10}")
nbytes = a.min_bytes
while nbytes <= a.max_bytes:
    t = torch.ones(nbytes // 4)
    iters = max(3, a.iters if nbytes <= (4 << 20) else a.iters // 4)
    times = {k: [] for k in groups}
    for k, g in groups.items():  # warm up
        dist.all_reduce(t, group=g)
    for _ in range(iters):
        for k, g in groups.items():
            dist.barrier(group=groups["gloo"])
            t0 = time.perf_counter()
            dist.all_reduce(t, group=g)
            times[k].append(time.perf_counter() - t0)
    med = {}
    for k in groups:  # the slowest rank's median
        m = torch.tensor([statistics.median(times[k])], dtype=torch.float64)
        dist.all_reduce(m, op=dist.ReduceOp.MAX, group=groups["gloo"])
        med[k] = m.item() * 1e6
    if rank == 0:
        print(f"{nbytes:>10} {med['baton']:>10.1f} {med['gloo']:>10.1f} "
              f"{med['gloo'] / med['baton']:>10.2f}", flush=True)
    nbytes *= 4
dist.destroy_process_group()
