"""baton.torch.use_registered_memory: torch's own tensors in registered memory.

    launch.py -n 2 torch_allocator_test.py     (BATON_DEBUG=INFO BATON_DEBUG_SUBSYS=COLL)

Which tensors the allocator takes (by size, before and after a group exists, while
off), that collectives on them are right and read the peers' tensors in place (the
library's log: one line per communicator's first such call), reuse of freed blocks and
the cache's limit, DDP with its buckets there against a one-process reference, a
forked child (it allocates elsewhere and shares, not copies, the parent's blocks),
and the registrations given back with the groups. Values are small integers where the
result is compared exactly.
"""

import datetime
import functools
import gc
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import baton.torch
import expect
import torch_values

failures = []
log = expect.LibraryLog()
lines = log.registered_lines
check = functools.partial(expect.check, failures)
MIN_BYTES = 64 << 10
same = functools.partial(torch_values.same, failures)
data = torch_values.data


check("off before the first call", not baton.torch.registered_memory_stats()["enabled"])
expect.expect_error(failures, "min_bytes 0", ValueError, "min_bytes",
                    lambda: baton.torch.use_registered_memory(min_bytes=0))
baton.torch.use_registered_memory(min_bytes=MIN_BYTES)
early = torch.ones(MIN_BYTES // 4)  # made before any group: registered on each one made later
check("a tensor of min_bytes", baton.torch.in_registered_memory(early))
check("a smaller tensor", not baton.torch.in_registered_memory(torch.ones(MIN_BYTES // 4 - 1)))

dist.init_process_group("baton", timeout=datetime.timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()
stats = baton.torch.registered_memory_stats()
check("one communicator", stats["communicators"] == 1, str(stats))
check("every block registered on it", stats["registrations"] ==
      stats["blocks_in_use"] + stats["blocks_cached"], str(stats))

# Above the registered path's smallest call (64 KiB where ranks outnumber cores),
# odd, not divisible by the rank counts.
count = (256 << 10) // 4 + 3

baton.torch.use_registered_memory(False)
plain = data(rank, count, torch.float32)
check("a tensor made while off", not baton.torch.in_registered_memory(plain))
dist.all_reduce(plain)
same("ordinary all_reduce", plain, sum(data(r, count, torch.float32) for r in range(size)))
dist.barrier()
check("ordinary tensors took the registered path", lines() == 0)
baton.torch.use_registered_memory(True, min_bytes=MIN_BYTES)

dist.all_reduce(early)
same("all_reduce of a tensor made before the group", early, torch.full((MIN_BYTES // 4,),
                                                                        float(size)))
for dtype in [torch.float32, torch.float64, torch.bfloat16, torch.int32]:
    t = data(rank, count, dtype)  # torch's own arange, cast: the allocator's memory
    check(f"{dtype} result of torch ops", baton.torch.in_registered_memory(t))
    dist.all_reduce(t)
    same(f"all_reduce {dtype}", t, sum(data(r, count, dtype) for r in range(size)))
    m = data(rank, count // 4 * 4, dtype).reshape(4, -1)
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    same(f"all_reduce max {dtype}", m,
         torch.stack([data(r, count // 4 * 4, dtype) for r in range(size)]).amax(0).reshape(4, -1))
gathered = torch.empty(size * count)
dist.all_gather_into_tensor(gathered, data(rank, count, torch.float32))
same("all_gather_into_tensor", gathered,
     torch.cat([data(r, count, torch.float32) for r in range(size)]))
scattered = torch.empty(count)
dist.reduce_scatter_tensor(scattered, data(rank, count, torch.float32).repeat(size))
same("reduce_scatter_tensor", scattered, sum(data(r, count, torch.float32) for r in range(size)))
b = torch.full((16, count // 16), 5.0 if rank == 0 else 0.0, dtype=torch.float64)
dist.broadcast(b, src=0)
same("broadcast", b, torch.full((16, count // 16), 5.0, dtype=torch.float64))
dist.barrier()
check("the world's calls on the allocator's tensors", lines() == 1,
      f"{lines()} lines saying they read the peers' tensors in place, want 1")
stats = baton.torch.registered_memory_stats()
check("every block registered on the world", stats["registrations"] ==
      stats["blocks_in_use"] + stats["blocks_cached"], str(stats))

# Freed blocks come back for the same size class; past the cache's limit they go.
t = torch.empty(count)
address = t.data_ptr()
before = baton.torch.registered_memory_stats()
del t
again = torch.empty(count + 5)  # the same class: at most 1/8 larger than asked
after = baton.torch.registered_memory_stats()
check("a freed block reused", again.data_ptr() == address and
      after["reused"] == before["reused"] + 1, f"{before} -> {after}")
del again
baton.torch.use_registered_memory(min_bytes=MIN_BYTES, cache_bytes=0)
gc.collect()
baton.torch.release_cached_memory()
held = baton.torch.registered_memory_stats()
t = torch.empty(count)
del t
gone = baton.torch.registered_memory_stats()
check("no cache: a freed block given back", gone["blocks_cached"] == 0 and
      gone["blocks_in_use"] == held["blocks_in_use"], f"{held} -> {gone}")
baton.torch.use_registered_memory(min_bytes=MIN_BYTES)


# DDP on a group made after the tensors: its buckets and gradients in the
# allocator's memory; against one process training on every rank's batch.
def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(96, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 128))  # 96 KiB and 128 KiB weights


group = dist.new_group()
check("the new group attached", baton.torch.registered_memory_stats()["communicators"] == 2)
model = DDP(mlp(), process_group=group, gradient_as_bucket_view=True, bucket_cap_mb=1)
reference = mlp()
optimizers = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (model, reference)]
for step in range(3):
    batches = [torch.randn(8, 96, generator=torch.Generator().manual_seed(100 * step + r))
               for r in range(size)]
    for opt in optimizers:
        opt.zero_grad()
    model(batches[rank]).square().mean().backward()
    # DDP averages the ranks' gradients: the gradient of the mean of their losses.
    torch.stack([reference(x).square().mean() for x in batches]).mean().backward()
    for opt in optimizers:
        opt.step()
for (name, p), q in zip(model.module.named_parameters(), reference.parameters()):
    check(f"DDP {name}", torch.allclose(p, q, rtol=1e-5, atol=1e-6),
          f"differs from one process by {(p - q).abs().max().item():.3g}")
big = [p for p in model.module.parameters() if p.numel() * 4 >= MIN_BYTES]
check("DDP's large gradients in registered memory",
      len(big) == 2 and all(baton.torch.in_registered_memory(p.grad) for p in big))
dist.barrier(group=group)
check("DDP's group read the peers' buckets in place", lines() == 2,
      f"{lines()} lines, want 2 (the world's and the DDP group's first such call)")

# At a quarter of the open-file limit (each block holds a memfd), cached
# blocks make room, then tensors take torch's allocator, with one warning.
if rank == 0:
    failures += expect.open_file_limit_failures("import torch, baton.torch", """
baton.torch.use_registered_memory(min_bytes=4096)
cached = torch.empty(10000)
del cached
held = [torch.empty(4096 + i, dtype=torch.uint8) for i in range(20)]
s = baton.torch.registered_memory_stats()
in_pool = sum(baton.torch.in_registered_memory(t) for t in held)
""")

# A forked child: allocates from torch's allocator, frees an inherited tensor
# without touching the parent's cache, and shares what it writes.
shared = torch.zeros(count)
inherited = torch.ones(count)
pid = os.fork()
if pid == 0:
    torch.set_num_threads(1)  # OpenMP's threads are not forked (DataLoader workers do the same)
    ok = True
    mine = torch.empty(count)
    ok &= not baton.torch.in_registered_memory(mine)
    del inherited
    again = torch.zeros(count)
    ok &= not baton.torch.in_registered_memory(again)
    shared[0] = 42.0
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
check("the forked child", os.waitstatus_to_exitcode(status) == 0,
      f"exited {os.waitstatus_to_exitcode(status)}")
check("the child's write seen by the parent", shared[0].item() == 42.0)
same("the tensor the child freed", inherited[:4], torch.ones(4))

# Registrations go with the groups; tensors outlive them.
kept = torch.full((count,), 7.0)
dist.destroy_process_group()
stats = baton.torch.registered_memory_stats()
check("no communicators after destroy", stats["communicators"] == 0 and
      stats["registrations"] == 0, str(stats))
same("a tensor after destroy", kept[:4], torch.full((4,), 7.0))
del kept, model, reference, optimizers, gathered, scattered, b, m, early, shared, inherited, big
gc.collect()
released = baton.torch.release_cached_memory()
stats = baton.torch.registered_memory_stats()
check("release_cached_memory", released > 0 and stats["bytes_cached"] == 0,
      f"released {released}, {stats}")
baton.torch.use_registered_memory(False)
check("off again", not baton.torch.in_registered_memory(torch.empty(count)))

expect.finish(failures, rank, "registered memory ok", log)
