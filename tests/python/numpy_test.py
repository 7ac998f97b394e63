"""The baton package's collectives against NumPy references, on every rank.

Started by batonrun (tests/meson.build): every rank builds every rank's input
from the rank number, so each can compute the expected result itself. Values
are small integers, so float sums are exact in any order.
"""

import functools
import time

import numpy as np

import baton
import expect

comm = baton.init()
rank, size = comm.rank, comm.size
failures = []


def check(name, got, want):
    if got is not None and want is not None:
        want = np.asarray(want).astype(np.asarray(got).dtype)  # sums wrap in the datatype
    if got is None or want is None:
        ok = got is None and want is None
    else:
        ok = np.asarray(got).shape == np.asarray(want).shape and np.array_equal(got, want)
    if not ok:
        failures.append(f"{name}: got {np.asarray(got).ravel()[:8]}, want "
                        f"{np.asarray(want).ravel()[:8]}")


def data(r, n, dtype):
    return ((np.arange(n) * 7 + r * 3) % 11 - 3).astype(dtype)


expect_error = functools.partial(expect.expect_error, failures)


ops = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}
for dtype in [np.float32, np.float64, np.int32, np.int64, np.float16, np.uint8, np.int8]:
    for n in [1, 1000, 70000]:
        inputs = np.stack([data(r, n, dtype) for r in range(size)])
        mine = inputs[rank]
        tag = f"{np.dtype(dtype).name} x {n}"
        for op, fn in ops.items():
            if op == "prod" and dtype in (np.float16, np.uint8, np.int8):
                continue  # products overflow these; the kernels' own tests cover them
            check(f"allreduce {op} {tag}", comm.allreduce(mine, op=op), fn(inputs, axis=0))
        if dtype in (np.float32, np.float64):
            check(f"allreduce avg {tag}", comm.allreduce(mine, op="avg"),
                  (inputs.sum(axis=0) / size).astype(dtype))
        buf = mine.copy()
        comm.allreduce(buf, out=buf)
        check(f"allreduce in place {tag}", buf, inputs.sum(axis=0))
        root = size - 1
        buf = mine.copy()
        check(f"broadcast {tag}", comm.broadcast(buf, root=root), inputs[root])
        check(f"reduce {tag}", comm.reduce(mine, root=root, op="max"),
              inputs.max(axis=0) if rank == root else None)
        check(f"allgather {tag}", comm.allgather(mine), inputs)
        check(f"gather {tag}", comm.gather(mine, root=1),
              inputs if rank == 1 else None)
        out = np.empty(n, dtype)
        check(f"scatter {tag}", comm.scatter(out, inputs * 2 if rank == 0 else None, root=0),
              inputs[rank] * 2)
        if n % size == 0 or n == 1000:
            m = n // size * size
            block = m // size
            total = inputs[:, :m].sum(axis=0)
            check(f"reduce_scatter {tag}", comm.reduce_scatter(mine[:m]),
                  total[rank * block:(rank + 1) * block])
            got = comm.alltoall(mine[:m])
            want = np.concatenate([inputs[r, rank * block:(rank + 1) * block]
                                   for r in range(size)])
            check(f"alltoall {tag}", got, want)

# v-collectives: rank r holds r + 1 blocks of 5 elements.
counts = [5 * (r + 1) for r in range(size)]
ins = [data(r, counts[r], np.float32) for r in range(size)]
check("allgatherv", comm.allgatherv(ins[rank], counts), np.concatenate(ins))
full = [data(r, sum(counts), np.float32) for r in range(size)]
at = sum(counts[:rank])
check("reduce_scatterv", comm.reduce_scatterv(full[rank], counts),
      np.sum(full, axis=0)[at:at + counts[rank]])
# alltoallv: rank i sends (i + j + 1) elements to rank j.
send_counts = [rank + j + 1 for j in range(size)]
recv_counts = [i + rank + 1 for i in range(size)]
payload = np.concatenate([np.full(send_counts[j], 100 * rank + j, np.int64)
                          for j in range(size)])
want = np.concatenate([np.full(recv_counts[i], 100 * i + rank, np.int64) for i in range(size)])
check("alltoallv", comm.alltoallv(payload, send_counts, recv_counts), want)

# send/recv around a ring (even ranks send first so it cannot deadlock).
right, left = (rank + 1) % size, (rank - 1) % size
token = np.full(3, rank, np.int32)
got = np.empty(3, np.int32)
if rank % 2 == 0:
    comm.send(token, right)
    comm.recv(got, left)
else:
    comm.recv(got, left)
    comm.send(token, right)
check("send/recv", got, np.full(3, left, np.int32))

# recv_any: rank 0 receives one message from every other rank, whichever comes first.
if size > 1:
    if rank == 0:
        sources = []
        for _ in range(size - 1):
            buf = np.empty(5, np.float64)
            src = comm.recv_any(buf)
            sources.append(src)
            check(f"recv_any from {src}", buf, np.arange(5) + 10.0 * src)
        check("recv_any sources", np.array(sorted(sources)), np.arange(1, size))
    else:
        comm.send(np.arange(5) + 10.0 * rank, 0)
    comm.barrier()

# Buffer protocol: a bytearray in place.
ba = bytearray([rank] * 8)
comm.allreduce(ba, out=ba)
check("bytearray allreduce", np.frombuffer(ba, np.uint8), np.full(8, sum(range(size)), np.uint8))

# bfloat16 bits in uint16 (1.0 is 0x3f80): the sum of size ones.
ones = np.full(4, 0x3F80, np.uint16)
bf = comm.allreduce(ones, datatype="bfloat16")
want_bf = (np.array([float(size)], np.float32).view(np.uint32) >> 16).astype(np.uint16)
check("bfloat16 allreduce", bf, np.repeat(want_bf, 4))

# Asynchronous calls on the host stream.
reqs = [comm.allreduce(data(rank, 100, np.float64), op="sum", async_op=True) for _ in range(3)]
reqs.append(comm.barrier(async_op=True))
bcast = comm.broadcast(np.full(5, rank, np.int64), root=0, async_op=True)
results = [r.wait() for r in reqs]
want = np.sum([data(r, 100, np.float64) for r in range(size)], axis=0)
for i in range(3):
    check(f"async allreduce {i}", results[i], want)
check("async broadcast", bcast.wait(), np.zeros(5, np.int64))

# Each Request completes on its own event: several calls in flight, waited in reverse order.
reqs = [comm.allreduce(data(rank + i, 1000 + i, np.float64), async_op=True) for i in range(4)]
gathered = comm.allgather(np.full(3, rank, np.int32), async_op=True)
bcast = comm.broadcast(np.full(5, rank, np.int64), root=size - 1, async_op=True)
check("async broadcast first", bcast.wait(), np.full(5, size - 1, np.int64))
check("async allgather second", gathered.wait(), np.repeat(np.arange(size)[:, None], 3, axis=1))
for i in reversed(range(4)):
    check(f"async allreduce reversed {i}", reqs[i].wait(),
          np.sum([data(r + i, 1000 + i, np.float64) for r in range(size)], axis=0))
# test() polled until True (done() agrees), then wait() gives the result.
req = comm.allreduce(np.full(70000, rank + 1, np.float32), async_op=True)
while not req.test():
    time.sleep(0.001)
check("async test() then done()", np.array([req.done()]), np.array([True]))
check("async test() result", req.wait(), np.full(70000, size * (size + 1) // 2, np.float32))
got = baton.wait_all([comm.alltoall(np.arange(2 * size, dtype=np.int64) + 100 * rank,
                                    async_op=True), comm.barrier(async_op=True)])
check("wait_all alltoall", got[0],
      np.concatenate([np.arange(2 * rank, 2 * rank + 2) + 100 * r for r in range(size)]))
check("wait_all barrier", got[1], None)
# Requests dropped unwaited: their arrays stay alive until the calls have run.
for _ in range(3):
    comm.allreduce(np.ones(50000), async_op=True)
comm.synchronize()
check("dropped requests freed", np.array([len(comm._orphans)]), np.array([0]))
# A call that fails raises from its own wait(), with Baton's message; the request of the
# call queued before it returns normally. Rank 0 alone makes the second call on a
# communicator with a 2 s timeout, so only that call fails.
short = comm.split(0, key=rank, timeout=2)
first = short.allreduce(np.full(4, rank, np.int64), async_op=True)
lone = short.allreduce(np.zeros(4, np.int64), async_op=True) if rank == 0 else None
# (waited first: a stream-wide wait would see the failure queued behind it)
check("async call before the failure", first.wait(), np.full(4, sum(range(size)), np.int64))
if lone is not None:
    expect_error("async failure, own wait", baton.BatonTimeoutError, "no progress", lone.wait)
    expect_error("async failure, again", baton.BatonTimeoutError, "allreduce", lone.wait)
    expect_error("async failure, test()", baton.BatonTimeoutError, "allreduce", lone.test)
    # The others are alive and answer (they wait in another communicator): nobody failed.
    check("failed ranks after a timeout", np.array(short.failed_ranks(), np.int64),
          np.zeros(0, np.int64))
comm.barrier()  # the others keep `short` until rank 0's call has timed out
if rank == 0:
    short.abort()
else:
    short.destroy()

check("failed ranks of a healthy communicator", np.array(comm.failed_ranks(), np.int64),
      np.zeros(0, np.int64))

# split: even and odd ranks.
sub = comm.split(rank % 2, key=rank)
check("split size", np.array([sub.size]), np.array([len(range(rank % 2, size, 2))]))
check("split allreduce", sub.allreduce(np.array([rank])), np.array([sum(range(rank % 2, size, 2))]))
sub.destroy()
none = comm.split(None if rank == 0 else 1)
check("split nocolor", np.array([none is None]), np.array([rank == 0]))
if none is not None:
    none.destroy()

# init_rank from get_unique_id's bytes (128 of them, NULs included), sent by broadcast.
uid = np.frombuffer(baton.get_unique_id(), np.uint8).copy() if rank == 0 else np.zeros(128, np.uint8)
comm.broadcast(uid, root=0)
second = baton.init_rank(size, uid.tobytes(), rank, timeout=30)
check("init_rank allreduce", second.allreduce(np.array([rank + 1])), np.array([size * (size + 1) // 2]))
second.destroy()

# Errors: Baton's message as an exception (the communicator stays usable).
expect_error("bad root", baton.InvalidArgumentError, "root",
             lambda: comm.broadcast(np.zeros(4, np.float32), root=size + 3))
expect_error("bad op", ValueError, "unknown op",
             lambda: comm.allreduce(np.zeros(4, np.float32), op="xor"))
expect_error("bad dtype", TypeError, "no datatype",
             lambda: comm.allreduce(np.zeros(4, np.complex64)))
expect_error("bad counts", ValueError, "counts",
             lambda: comm.allgatherv(np.zeros(1), [1]))
expect_error("read-only out", ValueError, "writable",
             lambda: comm.broadcast(np.zeros(4).view().setflags(write=False) or
                                    np.broadcast_to(np.zeros(1), (4,))))
# Buffers too small for the call: an error before Baton touches them, never an overrun
# (cases where every rank's buffer is short, so every rank raises).
expect_error("short allgather out", ValueError, "the call needs",
             lambda: comm.allgather(np.zeros(4, np.float32), out=np.zeros(4, np.float32)))
expect_error("short alltoallv send", ValueError, "the call needs",
             lambda: comm.alltoallv(np.zeros(1, np.float32), [2] * size, [1] * size))
expect_error("short reduce_scatterv send", ValueError, "the call needs",
             lambda: comm.reduce_scatterv(np.zeros(size, np.float32), [2] * size))
expect_error("int16", TypeError, "no datatype",
             lambda: comm.allreduce(np.zeros(4, np.int16)))
expect_error("datatype size", ValueError, "needs 2-byte elements",
             lambda: comm.allreduce(np.zeros(4, np.float32), datatype="bfloat16"))
expect_error("unknown datatype", ValueError, "unknown datatype",
             lambda: comm.allreduce(np.zeros(4, np.uint16), datatype="bf17"))
expect_error("short allreduce out", ValueError, "out has 8 bytes",
             lambda: comm.allreduce(np.zeros(4, np.float32), out=np.zeros(2, np.float32)))
expect_error("non-contiguous out", ValueError, "writable C-contiguous",
             lambda: comm.allreduce(np.zeros(4, np.float32), out=np.zeros(8, np.float32)[::2]))
# Python ints that do not fit a C int are refused, never wrapped (2**32 was root 0).
expect_error("root past a C int", ValueError, "out of range",
             lambda: comm.broadcast(np.zeros(4, np.float32), root=2**32))
expect_error("root past a C long", ValueError, "out of range",
             lambda: comm.reduce(np.zeros(4, np.float32), root=2**70))
expect_error("op past a C int", ValueError, "out of range",
             lambda: comm.allreduce(np.zeros(4, np.float32), op=2**32 + 2))
# Baton does not convert: an out of another dtype would get send's bits.
for name, fn in [("allreduce", lambda: comm.allreduce(np.ones(4, np.float32),
                                                      out=np.empty(4, np.int32))),
                 ("allreduce f64", lambda: comm.allreduce(np.ones(4, np.float32),
                                                          out=np.empty(2, np.float64))),
                 ("allgather", lambda: comm.allgather(np.ones(2, np.float64),
                                                      out=np.empty(2 * size, np.int64))),
                 ("reduce_scatter", lambda: comm.reduce_scatter(np.ones(size, np.float32),
                                                                out=np.empty(1, np.uint32)))]:
    expect_error(f"{name} into another dtype", TypeError, "does not convert", fn)
# bool travels as bytes: sum is "any", prod "all" (a byte count would wrap at 256 ranks).
flags = np.array([True, rank == 0, False, rank > 0])
check("bool sum", comm.allreduce(flags), np.array([True, True, False, size > 1]))
check("bool prod", comm.allreduce(flags, op="prod"), np.array([True, size == 1, False, False]))
check("bool sum, values", comm.allreduce(flags).view(np.uint8), np.array([1, 1, 0, size > 1]))
expect_error("bool avg", ValueError, "not defined on bool",
             lambda: comm.allreduce(flags, op="avg"))
# Inputs that are not contiguous arrays are copied into one first: a strided view, a list.
strided = np.arange(8, dtype=np.float64)[::2] + rank
check("strided send", comm.allreduce(strided, out=np.empty(4)),
      sum(np.arange(8, dtype=np.float64)[::2] + r for r in range(size)))
check("list send", comm.allreduce([rank, 1]), np.array([sum(range(size)), size]))
check("after errors", comm.allreduce(np.ones(2, np.int32)), np.full(2, size, np.int32))

comm.barrier()
comm.destroy()
expect_error("destroyed", baton.InvalidUsageError, "destroyed",
             lambda: comm.allreduce(np.zeros(1, np.float32)))
expect.finish(failures, rank, "numpy collectives ok")
