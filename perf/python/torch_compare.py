"""Collectives through torch.distributed: "baton" against torch's gloo and DeepSpeed's SHM op.

    PYTHONPATH=build/python python3 tests/python/launch.py -n 2 perf/python/torch_compare.py

Blocking calls (async_op=False) on float32 CPU tensors, 8 B to 256 MiB (--max-bytes):
  allreduce       dist.all_reduce (sum, in place) of `bytes`
  reduce_scatter  dist.reduce_scatter_tensor (sum): input `bytes`, output bytes/n
  all_gather      dist.all_gather_into_tensor: output `bytes`, input bytes/n
  broadcast       dist.broadcast from rank 0 of `bytes`
  alltoall        dist.all_to_all_single of `bytes` in and out
(`bytes` is rounded up to whole float32 elements per rank.) Columns: baton, gloo and, for
allreduce where DeepSpeed is importable (scripts/setup.sh with SETUP_DEEPSPEED=1),
deepspeed: deepspeed.comm.inference_all_reduce, its shared-memory allreduce op (built with
ninja on first use, about a minute and a half; LOCAL_SIZE is set to the world size, which
its launcher would set), and direct: baton.torch.all_reduce, the baton group's blocking
allreduce without torch.distributed's layer, as DeepSpeed's call is. DeepSpeed's other
collectives are torch.distributed's, i.e. gloo's here, so they have no column of their own. Each round runs every backend's calls in turn
after a barrier (as many as take about 2 ms, 1 to 200, after a warm-up); each cell is the
slowest rank's median over --rounds rounds (3x that up to 2 MiB) of (time of the calls /
calls), in us, then the ratios other/baton (above 1: baton is faster).
"""

import argparse
import datetime
import os
import statistics
import time

import torch
import torch.distributed as dist

import baton.torch

p = argparse.ArgumentParser()
p.add_argument("--ops", default="allreduce,reduce_scatter,all_gather,broadcast,alltoall")
p.add_argument("--min-bytes", type=int, default=8)
p.add_argument("--max-bytes", type=int, default=256 << 20)
p.add_argument("--step", type=int, default=8, help="size factor between rows")
p.add_argument("--rounds", type=int, default=5, help="rounds per size (3x that up to 2 MiB)")
p.add_argument("--deepspeed", choices=["auto", "yes", "no"], default="auto")
a = p.parse_args()
torch.set_num_threads(1)
timeout = datetime.timedelta(seconds=600)
os.environ.setdefault("LOCAL_SIZE", os.environ.get("WORLD_SIZE", "1"))  # DeepSpeed's SHM op
dist.init_process_group("gloo", timeout=timeout)
rank, size = dist.get_rank(), dist.get_world_size()
groups = {"baton": dist.new_group(backend="baton", timeout=timeout), "gloo": dist.group.WORLD}
ds = None
if a.deepspeed != "no":
    try:
        import deepspeed
        import deepspeed.comm.comm as ds_comm

        deepspeed.init_distributed(dist_backend="gloo")  # takes the group made above
        if ds_comm.cdb.shm_comm_op is None:
            raise RuntimeError("DeepSpeed's SHM op did not build")
        ds = ds_comm
    except Exception as e:  # noqa: BLE001  the column is optional
        if a.deepspeed == "yes":
            raise
        if rank == 0:
            print(f"# no DeepSpeed column: {type(e).__name__}: {str(e)[:200]}")


def make(op, nbytes, backend):
    """(elements per rank, call) for one op, size and backend."""
    per = max(1, -(-nbytes // (4 * size)))  # elements of one rank's block
    g = groups.get(backend)
    if op == "allreduce":
        t = torch.ones(per * size)
        if backend == "deepspeed":
            return t.numel(), lambda: ds.inference_all_reduce(t)
        if backend == "direct":
            return t.numel(), lambda: baton.torch.all_reduce(t, group=groups["baton"])
        return t.numel(), lambda: dist.all_reduce(t, group=g)
    if op == "reduce_scatter":
        i, o = torch.ones(per * size), torch.empty(per)
        return i.numel(), lambda: dist.reduce_scatter_tensor(o, i, group=g)
    if op == "all_gather":
        i, o = torch.ones(per), torch.empty(per * size)
        return o.numel(), lambda: dist.all_gather_into_tensor(o, i, group=g)
    if op == "broadcast":
        t = torch.ones(per * size)
        return t.numel(), lambda: dist.broadcast(t, src=0, group=g)
    if op == "alltoall":
        i, o = torch.ones(per * size), torch.empty(per * size)
        return i.numel(), lambda: dist.all_to_all_single(o, i, group=g)
    raise ValueError(op)


def calls_for(f):
    """Calls per round for about 2 ms of work (1 to 200), the same on every rank."""
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(3):
        f()
    t = torch.tensor([(time.perf_counter() - t0) / 3], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return max(1, min(200, int(2e-3 / max(t.item(), 1e-7))))


if rank == 0:
    print(f"# {size} ranks, float32, blocking calls, us per call "
          f"(slowest rank's median of {a.rounds} rounds, {3 * a.rounds} up to 2 MiB); "
          f"torch {torch.__version__}")
for op in a.ops.split(","):
    names = ["baton", "gloo"]
    if op == "allreduce":
        names += ["direct"] + (["deepspeed"] if ds is not None else [])
    if rank == 0:
        head = f"{'op':>14} {'bytes':>10} " + " ".join(f"{n + ' us':>12}" for n in names)
        print(head + " " + " ".join(f"{n + '/baton':>15}" for n in names[1:]), flush=True)
    sizes, nbytes = [], a.min_bytes
    while nbytes < a.max_bytes:
        sizes.append(nbytes)
        nbytes *= a.step
    for nbytes in sizes + [a.max_bytes]:
        fns, elements = {}, 0
        for n in names:
            elements, fns[n] = make(op, nbytes, n)
        calls = {n: calls_for(f) for n, f in fns.items()}  # after a warm-up of 3 calls
        times = {n: [] for n in names}
        for _ in range(a.rounds * (3 if nbytes <= (2 << 20) else 1)):
            for n, f in fns.items():
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(calls[n]):
                    f()
                times[n].append((time.perf_counter() - t0) / calls[n])
        med = {}
        for n in names:
            m = torch.tensor([statistics.median(times[n])], dtype=torch.float64)
            dist.all_reduce(m, op=dist.ReduceOp.MAX)
            med[n] = m.item() * 1e6
        if rank == 0:
            row = f"{op:>14} {elements * 4:>10} " + " ".join(f"{med[n]:>12.1f}" for n in names)
            print(row + " " + " ".join(f"{med[n] / med['baton']:>15.2f}" for n in names[1:]),
                  flush=True)
        del fns
dist.barrier()
dist.destroy_process_group()
