"""Registered NumPy arrays (baton.empty, Comm.register, Comm.empty) on every rank.

Started by batonrun with BATON_DEBUG=INFO BATON_DEBUG_SUBSYS=COLL (tests/meson.build):
the library's log goes to a file here, so the test can tell that calls on
registered arrays read the peers' buffers in place and calls on ordinary
arrays do not. Results are checked against NumPy references built from the
rank numbers; values are small integers, so sums are exact in any order.
"""

import functools
import gc

import numpy as np

import baton
import expect

failures = []


def check(name, got, want):
    want = np.asarray(want).astype(np.asarray(got).dtype)
    if np.asarray(got).shape != want.shape or not np.array_equal(got, want):
        failures.append(f"{name}: got {np.asarray(got).ravel()[:6]}, want {want.ravel()[:6]}")


expect_error = functools.partial(expect.expect_error, failures)

log = expect.LibraryLog()  # for the whole run; fd 2 given back at the end
REGISTERED_LINE = expect.LibraryLog.REGISTERED
log_text = log.text

comm = baton.init()
rank, size = comm.rank, comm.size
# 256 KiB and an odd count: above the registered path's smallest call (32 KiB, 64 KiB
# where ranks outnumber cores), not divisible by the rank counts.
count = (256 << 10) // 4 + 3


def data(r, n, dtype):
    return ((np.arange(n) * 7 + r * 3) % 11 - 3).astype(dtype)


# Ordinary arrays first, on a communicator of their own: no registered call.
plain = comm.split(0, key=rank)
x = data(rank, count, np.float32)
check("ordinary allreduce", plain.allreduce(x), sum(data(r, count, np.float32) for r in range(size)))
plain.barrier()
if REGISTERED_LINE in log_text():
    failures.append("ordinary arrays took the registered path")
plain.destroy()

# Comm.empty: registered for as long as the array and the communicator live.
for dtype in [np.float32, np.float64, np.int32]:
    for op, reduce in [("sum", np.sum), ("max", np.max)]:
        want = reduce([data(r, count, dtype) for r in range(size)], axis=0)
        send, out = comm.empty(count, dtype), comm.zeros(count, dtype)
        send[:] = data(rank, count, dtype)
        check(f"registered allreduce {np.dtype(dtype).name} {op}",
              comm.allreduce(send, out=out, op=op), want)
        check(f"registered allreduce in place {np.dtype(dtype).name} {op}",
              comm.allreduce(send, out=send, op=op), want)
comm.barrier()
if log_text().count(REGISTERED_LINE) != 1:
    failures.append(f"registered arrays: {log_text().count(REGISTERED_LINE)} lines saying so, "
                    "want 1 (the first registered call of the communicator)")

# The other collectives on registered arrays.
block = count  # per rank
send = comm.empty(block, np.float32)
send[:] = data(rank, block, np.float32)
gathered = comm.empty(block * size, np.float32)
check("registered allgather", comm.allgather(send, out=gathered),
      np.concatenate([data(r, block, np.float32) for r in range(size)]))
scatter_in = comm.empty(block * size, np.float32)
scatter_in[:] = np.tile(data(rank, block, np.float32), size)
scattered = comm.empty(block, np.float32)
check("registered reduce_scatter", comm.reduce_scatter(scatter_in, out=scattered),
      sum(data(r, block, np.float32) for r in range(size)))
root_data = comm.empty((16, block // 16), np.float64)
if rank == size - 1:
    root_data[:] = 5
check("registered broadcast 2-D", comm.broadcast(root_data, root=size - 1),
      np.full((16, block // 16), 5.0))
reduced = comm.empty(block, np.float32)
got = comm.reduce(send, root=0, out=reduced if rank == 0 else None)
if rank == 0:
    check("registered reduce", got, sum(data(r, block, np.float32) for r in range(size)))

# One rank registered, the others ordinary: the ordinary path, the same result.
mixed_send = comm.empty(count) if rank == 0 else np.empty(count, np.float32)
mixed_out = comm.empty(count) if rank == 0 else np.empty(count, np.float32)
mixed_send[:] = rank + 1
check("mixed allreduce", comm.allreduce(mixed_send, out=mixed_out),
      np.full(count, size * (size + 1) // 2))

# baton.empty and Comm.register: a Registration, given back by close() or a with block.
arr = baton.zeros((3, 1000), np.float64)
check("zeros", arr, np.zeros((3, 1000)))
with comm.register(arr) as reg:
    arr[:] = rank
    check("registered with block", comm.allreduce(arr, out=arr), np.full((3, 1000), sum(range(size))))
    if reg.closed:
        failures.append("registration closed inside its with block")
if not reg.closed:
    failures.append("registration still open after its with block")
reg.close()  # a second close does nothing
reg = comm.register(arr)
del arr
gc.collect()  # the registration keeps the array alive
reg.close()
scalar = baton.empty((), np.int64)
if scalar.shape != () or scalar.dtype != np.int64:
    failures.append(f"empty(()): shape {scalar.shape}, dtype {scalar.dtype}")
if comm.empty(0).size != 0:
    failures.append("comm.empty(0) has elements")
expect_error("non-contiguous", ValueError, "C-contiguous",
             lambda: comm.register(baton.empty(8)[::2]))
expect_error("nothing to register", ValueError, "empty", lambda: comm.register(baton.empty(0)))
expect_error("negative shape", ValueError, "negative", lambda: baton.empty((2, -1)))

# Arrays outlive their communicator: destroying it gives the registrations back, the
# memory stays until the last array goes.
kept = comm.empty(count)
kept[:] = 7
still_open = comm.register(baton.empty(64))
comm.destroy()
check("array after destroy", kept[:4], np.full(4, 7.0))
if not still_open.closed:
    failures.append("destroy left a registration open")
still_open.close()
expect_error("register after destroy", baton.InvalidUsageError, "destroyed",
             lambda: comm.register(baton.empty(8)))
del kept
gc.collect()

expect.finish(failures, rank, "registered arrays ok", log)
