"""baton.use_registered_memory: NumPy's own arrays in registered memory.

Started by batonrun with BATON_DEBUG=INFO BATON_DEBUG_SUBSYS=COLL (tests/meson.build),
the library's log read back here: which arrays the pool takes (by size, while on,
in this thread only), NumPy's calloc and realloc over it, collectives on such
arrays (outputs NumPy allocates included) right and reading the peers' arrays in
place (one log line per communicator's first such call), a communicator made
before the first call and one split after it, a forked child, the open-file limit,
and the registrations given back with the communicators. Values are small
integers, so sums are exact in any order.
"""

import functools
import gc
import os
import threading

import numpy as np

import baton
import expect

failures = []
log = expect.LibraryLog()
lines = log.registered_lines
check = functools.partial(expect.check, failures)
MIN_BYTES = 64 << 10


def same(name, got, want):
    want = np.asarray(want).astype(np.asarray(got).dtype)
    if np.asarray(got).shape != want.shape or not np.array_equal(got, want):
        failures.append(f"{name}: got {np.asarray(got).ravel()[:6]}, want {want.ravel()[:6]}")


def data(r, n, dtype):
    return ((np.arange(n) * 7 + r * 3) % 11 - 3).astype(dtype)


stats = baton.registered_memory_stats()
check("off before the first call", not stats["enabled"] and stats["blocks_in_use"] == 0,
      str(stats))
expect.expect_error(failures, "min_bytes 0", ValueError, "min_bytes",
                    lambda: baton.use_registered_memory(min_bytes=0))

comm = baton.init()  # before the first call: attached by it
rank, size = comm.rank, comm.size
# Above the registered path's smallest call (64 KiB where ranks outnumber cores),
# odd, not divisible by the rank counts.
count = (256 << 10) // 4 + 3

plain = data(rank, count, np.float32)
out = comm.allreduce(plain)
same("ordinary allreduce", out, sum(data(r, count, np.float32) for r in range(size)))
comm.barrier()
check("ordinary arrays took the registered path", lines() == 0)

baton.use_registered_memory(min_bytes=MIN_BYTES)
stats = baton.registered_memory_stats()
check("the communicator made before attached", stats["communicators"] == 1, str(stats))
check("an array of min_bytes", baton.in_registered_memory(np.empty(MIN_BYTES, np.uint8)))
check("a smaller array", not baton.in_registered_memory(np.empty(MIN_BYTES - 1, np.uint8)))
check("an array made before", not baton.in_registered_memory(plain))

for dtype in [np.float32, np.float64, np.int32, np.uint8]:
    x = data(rank, count, dtype)  # NumPy's arange and cast: the pool's memory
    check(f"{dtype.__name__} result of NumPy ops", baton.in_registered_memory(x))
    y = comm.allreduce(x)  # its output allocated by NumPy: the pool's too
    check(f"{dtype.__name__} allreduce output", baton.in_registered_memory(y))
    same(f"allreduce {dtype.__name__}", y,
         sum(data(r, count, dtype) for r in range(size)).astype(dtype))
    comm.allreduce(x, out=x, op="max")
    same(f"allreduce max in place {dtype.__name__}", x,
         np.max([data(r, count, dtype) for r in range(size)], axis=0))
gathered = comm.allgather(data(rank, count, np.float32))
same("allgather", gathered, np.stack([data(r, count, np.float32) for r in range(size)]))
scattered = comm.reduce_scatter(np.tile(data(rank, count, np.float32), size))
same("reduce_scatter", scattered, sum(data(r, count, np.float32) for r in range(size)))
b = np.full((16, count // 16), 5.0 if rank == 0 else 0.0)
comm.broadcast(b, root=0)
same("broadcast", b, np.full((16, count // 16), 5.0))
comm.barrier()
check("calls on the pool's arrays", lines() == 1,
      f"{lines()} lines saying they read the peers' arrays in place, want 1")
stats = baton.registered_memory_stats()
check("every block registered", stats["registrations"] ==
      stats["blocks_in_use"] + stats["blocks_cached"], str(stats))

# NumPy's calloc on a reused block, and its realloc (ndarray.resize).
dirty = np.full(count, 9.0, np.float32)
address = dirty.ctypes.data
del dirty
zeroed = np.zeros(count, np.float32)
check("np.zeros on the freed block", zeroed.ctypes.data == address)
same("np.zeros on a reused block", zeroed, np.zeros(count, np.float32))
grown = np.arange(count, dtype=np.float32)
grown.resize(count + 8, refcheck=False)  # within its block: at most 1/8 larger than asked
same("resize within the block", grown[:count], np.arange(count, dtype=np.float32))
grown.resize(4 * count, refcheck=False)  # beyond it: a new block, the contents copied
same("resize beyond the block", grown[:count], np.arange(count, dtype=np.float32))
check("resized array in the pool", baton.in_registered_memory(grown))
grown.resize(16, refcheck=False)  # below min_bytes: out of the pool (its free skips the pool)
same("resize below min_bytes", grown, np.arange(16, dtype=np.float32))
check("array shrunk below min_bytes", not baton.in_registered_memory(grown))
del grown, zeroed

# A communicator split afterwards is attached when made.
sub = comm.split(0)
check("the split communicator attached", baton.registered_memory_stats()["communicators"] == 2)
same("allreduce on the split communicator", sub.allreduce(data(rank, count, np.float32)),
     sum(data(r, count, np.float32) for r in range(size)))
sub.barrier()
check("the split communicator's calls", lines() == 2, f"{lines()} lines, want 2")

# NumPy keeps its allocator per thread: a thread started now has its own.
in_thread = []
thread = threading.Thread(target=lambda: in_thread.append(
    baton.in_registered_memory(np.empty(count, np.float32))))
thread.start()
thread.join()
check("another thread's arrays", in_thread == [False])

# A forked child: allocates with malloc, frees an inherited array without
# touching the parent's cache, and shares what it writes.
shared = np.zeros(count, np.float32)
inherited = np.ones(count, np.float32)
moved = np.arange(count, dtype=np.float32)
pid = os.fork()
if pid == 0:
    ok = not baton.in_registered_memory(np.empty(count, np.float32))
    del inherited
    ok &= not baton.in_registered_memory(np.zeros(count, np.float32))
    shared[0] = 42.0
    # Its own pool once it asks; an inherited array resized there moves out of the
    # parent's block, which stays as it was.
    baton.use_registered_memory(min_bytes=MIN_BYTES)
    ok &= baton.in_registered_memory(np.empty(count, np.float32))
    ok &= not baton.in_registered_memory(shared)
    moved.resize(2 * count, refcheck=False)
    ok &= bool(np.array_equal(moved[:count], np.arange(count, dtype=np.float32)))
    ok &= baton.in_registered_memory(moved)
    moved[:] = -1
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
check("the forked child", os.waitstatus_to_exitcode(status) == 0,
      f"exited {os.waitstatus_to_exitcode(status)}")
check("the child's write seen by the parent", shared[0] == 42.0)
same("the array the child freed", inherited[:4], np.ones(4))
same("the array the child resized", moved, np.arange(count, dtype=np.float32))

if rank == 0:
    failures += expect.open_file_limit_failures("import numpy as np, baton", """
baton.use_registered_memory(min_bytes=4096)
cached = np.empty(10000)
del cached
held = [np.empty(4096 + i, np.uint8) for i in range(20)]
s = baton.registered_memory_stats()
in_pool = sum(baton.in_registered_memory(a) for a in held)
""")

# Registrations go with the communicators; arrays outlive them.
kept = np.full(count, 7.0)
sub.destroy()
comm.destroy()
stats = baton.registered_memory_stats()
check("no communicators after destroy", stats["communicators"] == 0 and
      stats["registrations"] == 0, str(stats))
same("an array after destroy", kept[:4], np.full(4, 7.0))
del kept, b, gathered, scattered, shared, inherited, moved, x, y, out
gc.collect()
released = baton.release_cached_memory()
stats = baton.registered_memory_stats()
check("release_cached_memory", released > 0 and stats["bytes_cached"] == 0,
      f"released {released}, {stats}")
baton.use_registered_memory(False)
check("off again", not baton.in_registered_memory(np.empty(count)))

expect.finish(failures, rank, "registered memory ok", log)
