"""Registered tensors (baton.torch.empty / zeros) on a "baton" process group.

    launch.py -n 2 torch_memory_test.py     (BATON_DEBUG=INFO BATON_DEBUG_SUBSYS=COLL)

The library's log goes to a file here, so the test can tell that collectives on
registered tensors read the peers' tensors in place and those on ordinary
tensors do not. Results are checked against references every rank computes;
values are small integers, so sums are exact in any order.
"""

import datetime
import functools
import gc

import torch
import torch.distributed as dist

import baton.torch
import expect
import torch_values

failures = []
log = expect.LibraryLog()  # for the whole run; fd 2 given back at the end
REGISTERED_LINE = expect.LibraryLog.REGISTERED
log_text = log.text

same = functools.partial(torch_values.same, failures)
data = torch_values.data

dist.init_process_group("baton", timeout=datetime.timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()
# Above the registered path's smallest call (32 KiB, 64 KiB where ranks outnumber
# cores), odd, not divisible by the rank counts.
count = (256 << 10) // 4 + 3

plain = data(rank, count, torch.float32)
dist.all_reduce(plain)
same("ordinary all_reduce", plain, sum(data(r, count, torch.float32) for r in range(size)))
dist.barrier()
if REGISTERED_LINE in log_text():
    failures.append("ordinary tensors took the registered path")

for dtype in [torch.float32, torch.float64, torch.bfloat16, torch.int32]:
    t = baton.torch.empty(count, dtype=dtype)
    t.copy_(data(rank, count, dtype))
    dist.all_reduce(t)
    same(f"registered all_reduce {dtype}", t, sum(data(r, count, dtype) for r in range(size)))
    m = baton.torch.zeros(4, count // 4, dtype=dtype)
    same(f"zeros {dtype}", m, torch.zeros(4, count // 4, dtype=dtype))
    m.copy_(data(rank, count // 4 * 4, dtype).reshape(4, -1))
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    same(f"registered all_reduce max {dtype}", m,
         torch.stack([data(r, count // 4 * 4, dtype) for r in range(size)]).amax(0).reshape(4, -1))
dist.barrier()
if log_text().count(REGISTERED_LINE) != 1:
    failures.append(f"registered tensors: {log_text().count(REGISTERED_LINE)} lines saying so, "
                    "want 1 (the first registered call of the communicator)")

# all_gather_into_tensor, reduce_scatter_tensor and broadcast on registered tensors.
block = count
send = baton.torch.empty(block)
send.copy_(data(rank, block, torch.float32))
gathered = baton.torch.empty(size * block)
dist.all_gather_into_tensor(gathered, send)
same("registered all_gather_into_tensor", gathered,
     torch.cat([data(r, block, torch.float32) for r in range(size)]))
scatter_in = baton.torch.empty(size * block)
scatter_in.copy_(data(rank, block, torch.float32).repeat(size))
scattered = baton.torch.empty(block)
dist.reduce_scatter_tensor(scattered, scatter_in)
same("registered reduce_scatter_tensor", scattered,
     sum(data(r, block, torch.float32) for r in range(size)))
b = baton.torch.empty((16, block // 16), dtype=torch.float64)
if rank == 0:
    b.fill_(5)
dist.broadcast(b, src=0)
same("registered broadcast", b, torch.full((16, block // 16), 5.0, dtype=torch.float64))

# Asynchronous calls and a tensor dropped while others of its kind live.
work = dist.all_reduce(send, async_op=True)
work.wait()
same("registered async all_reduce", send,
     sum(data(r, block, torch.float32) for r in range(size)))
del gathered, scatter_in
gc.collect()
same("empty of no elements", baton.torch.empty(0), torch.empty(0))

# A group whose backend is not baton's is refused; so is nothing at all.
gloo = dist.new_group(backend="gloo")
try:
    baton.torch.empty(8, group=gloo)
    failures.append("a gloo group's empty: no exception")
except ValueError as e:
    if "not baton's" not in str(e):
        failures.append(f"a gloo group's empty: message {e}")

# Tensors outlive the process group.
kept = baton.torch.empty(count)
kept.fill_(7)
dist.destroy_process_group()
same("tensor after destroy", kept[:4], torch.full((4,), 7.0))
del kept
gc.collect()

expect.finish(failures, rank, "registered tensors ok", log)
