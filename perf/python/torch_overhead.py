"""Per-call cost of one allreduce through torch.distributed, backends interleaved.

    PYTHONPATH=build/python python3 tests/python/launch.py -n 2 perf/python/torch_overhead.py

Float32 sum in place at 8 B, 64 KiB and 512 KiB (--sizes), blocking `dist.all_reduce(t)`
back to back, on:
  baton   the "baton" backend (baton.torch);
  gloo    torch's own gloo;
  fake    torch's "fake" backend (torch.testing), which does nothing: torch's own dispatch;
  native  the same allreduce through the baton NumPy package on a NumPy view of the
          tensor (Baton's C API plus one Python call, no torch);
  stream  "baton" with blocking calls sent through its host stream as before the fast
          path (baton.torch._baton_torch._set_inline_blocking(False) around its calls);
  async   "baton" with async_op=True and .wait() at once (up to 256 KiB the call is deferred
          and runs on the waiter's thread, python/torch_backend/work.h);
  astream the same through the host stream, as before that (_set_inline_blocking(False));
  direct  baton.torch.all_reduce(t, group=...): the backend's blocking call without
          torch.distributed's Python layer and dispatcher.
Each round runs --calls calls of every backend in turn after a barrier; each cell is
the slowest rank's median over --rounds rounds of (time of the calls / calls), us.
torch attaches its flight recorder's hook to third-party backends such as "baton" (gloo and
fake record natively or not at all); TORCH_FR_BUFFER_SIZE=0 in the environment turns it off,
to see the backend's own cost (docs/python.md).
"""

import argparse
import datetime
import statistics
import time

import numpy as np
import torch
import torch.distributed as dist

import baton
import baton.torch  # noqa: F401
import torch.testing._internal.distributed.fake_pg  # noqa: F401  registers "fake"

p = argparse.ArgumentParser()
p.add_argument("--sizes", default="8,65536,524288")
p.add_argument("--rounds", type=int, default=15)
p.add_argument("--calls", type=int, default=200, help="calls per round at 8 B (fewer above)")
p.add_argument("--backends", default="baton,stream,gloo,fake,native,async,astream,direct")
a = p.parse_args()
torch.set_num_threads(1)
timeout = datetime.timedelta(seconds=120)
dist.init_process_group("gloo", timeout=timeout)
rank, size = dist.get_rank(), dist.get_world_size()
names = a.backends.split(",")
groups = {"gloo": dist.group.WORLD}
if {"baton", "stream", "async", "astream", "direct"} & set(names):
    groups["baton"] = dist.new_group(backend="baton", timeout=timeout)
    for n in ["async", "astream", "stream", "direct"]:
        groups[n] = groups["baton"]
if "fake" in names:
    groups["fake"] = dist.new_group(backend="fake")
comm = None
if "native" in names:
    uid = [baton.get_unique_id() if rank == 0 else None]
    dist.broadcast_object_list(uid, src=0)
    comm = baton.init_rank(size, uid[0], rank)


def runner(name, t):
    if name == "native":
        x = t.numpy()
        return lambda: comm.allreduce(x, out=x)
    g = groups[name]
    if name in ("async", "astream"):
        return lambda: dist.all_reduce(t, group=g, async_op=True).wait()
    if name == "direct":
        return lambda: baton.torch.all_reduce(t, group=g)
    return lambda: dist.all_reduce(t, group=g)


STREAM = ("stream", "astream")  # the host-stream path for every call


def inline(on):
    baton.torch._baton_torch._set_inline_blocking(on)


if rank == 0:
    print(f"# {size} ranks, all_reduce float32 sum in place, us per call "
          f"(slowest rank's median of {a.rounds} rounds)")
    print(f"{'bytes':>8} " + " ".join(f"{n:>8}" for n in names) + "   baton-fake-native")
for nbytes in [int(s) for s in a.sizes.split(",")]:
    t = torch.ones(max(1, nbytes // 4))
    calls = max(5, a.calls // max(1, nbytes // 4096))
    fns = {n: runner(n, t) for n in names}
    for n, f in fns.items():
        inline(n not in STREAM)
        for _ in range(3):
            f()
        inline(True)
    times = {n: [] for n in names}
    for _ in range(a.rounds):
        for n, f in fns.items():
            inline(n not in STREAM)
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(calls):
                f()
            times[n].append((time.perf_counter() - t0) / calls)
            inline(True)
    med = {}
    for n in names:
        m = torch.tensor([statistics.median(times[n])], dtype=torch.float64)
        dist.all_reduce(m, op=dist.ReduceOp.MAX)
        med[n] = m.item() * 1e6
    if rank == 0:
        extra = ""
        if {"baton", "fake", "native"} <= set(names):
            extra = f"   {med['baton'] - med['fake'] - med['native']:8.2f}"
        print(f"{nbytes:>8} " + " ".join(f"{med[n]:8.2f}" for n in names) + extra, flush=True)
if comm is not None:
    comm.destroy()
dist.destroy_process_group()
