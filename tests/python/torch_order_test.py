"""Call order in the "baton" torch backend (torch_test.py's collectives mode): calls on the host
stream keep the order they were made in, blocking calls run on the caller's thread when the
backend is idle, small async calls are deferred to their wait() (work.h). Each function takes
torch_test's module (ctx), whose groups, helpers and failure list it uses; split from
torch_test.py."""

import time

import torch
import torch.distributed as dist


def stream_order(ctx):
    """Calls on the host stream keep the order they were made in, host copies included."""
    bgroup, rank, size, R, data, same = ctx.bgroup, ctx.rank, ctx.size, ctx.R, ctx.data, ctx.same
    # Async calls that each read the previous one's result, none waited on until the end
    # (then in reverse order): allreduce in place, allgather of its result into a list
    # (copied out once it ran), allreduce of one gathered tensor, reduce_scatter of the list.
    n, s = 1001, float(sum(r + 1 for r in range(size)))
    t = torch.full((n,), float(rank + 1))
    outs = [torch.empty(n) for _ in range(size)]
    out = torch.empty(n)
    works = [dist.all_reduce(t, group=bgroup, async_op=True),
             dist.all_gather(outs, t, group=bgroup, async_op=True),
             dist.all_reduce(outs[1], group=bgroup, async_op=True),
             dist.reduce_scatter(out, outs, group=bgroup, async_op=True)]
    for w in reversed(works):
        w.wait()
    same("stream order", [t, outs[0], outs[1], out],
         [torch.full((n,), s), torch.full((n,), s), torch.full((n,), size * s),
          torch.full((n,), size * (size * s if rank == 1 else s))])

    # The coalescing manager with a device: torch brackets the calls with start/endCoalescing
    # and they run as one Baton group (allreduce_coalesced, reduce_scatter_tensor_coalesced).
    cpu = torch.device("cpu")
    a, b = torch.full((7,), float(rank)), torch.full((3, 3), float(2 * rank + 1), dtype=torch.float64)
    with dist._coalescing_manager(group=bgroup, device=cpu, async_ops=True) as cm:
        dist.all_reduce(a, group=bgroup)
        dist.all_reduce(b, group=bgroup)
    cm.wait()
    same("coalesced all_reduce", [a, b],
         [torch.full((7,), float(sum(range(size)))),
          torch.full((3, 3), float(sum(2 * r + 1 for r in range(size))), dtype=torch.float64)])
    for op in [R.SUM, R.MAX, R.AVG]:
        ins = [data(rank, size * m, torch.float32) for m in (1, 5, 1000)]
        outs = [torch.empty(m) for m in (1, 5, 1000)]
        with dist._coalescing_manager(group=bgroup, device=cpu, async_ops=True) as cm:
            for o, i in zip(outs, ins):
                dist.reduce_scatter_tensor(o, i, op=op, group=bgroup)
        cm.wait()
        want = []
        for m in (1, 5, 1000):
            stack = torch.stack([data(r, size * m, torch.float32) for r in range(size)])
            red = {R.SUM: stack.sum(0), R.MAX: stack.max(0).values, R.AVG: stack.mean(0)}[op]
            want.append(red[rank * m:(rank + 1) * m])
        same(f"reduce_scatter_tensor coalesced {op}", outs, want)

    # isend/irecv never waited on: polling is_completed() sees them run.
    got = torch.empty(8)
    ws = [dist.isend(torch.full((8,), float(rank)), (rank + 1) % size, group=bgroup),
          dist.irecv(got, (rank - 1) % size, group=bgroup)]
    deadline = time.monotonic() + 20
    while not all(w.is_completed() for w in ws) and time.monotonic() < deadline:
        time.sleep(0.002)
    same("polled isend/irecv", [got], [torch.full((8,), float((rank - 1) % size))])
    blocking_calls(ctx)
    deferred_calls(ctx)
    ctx.split_groups()


def blocking_calls(ctx):
    """Blocking calls (asyncOp False) on an idle backend run on the caller's thread: their Work
    and future are complete when the call returns; after queued async calls they keep order."""
    bgroup, gloo, rank, size, R, same = ctx.bgroup, ctx.gloo, ctx.rank, ctx.size, ctx.R, ctx.same
    failures, expect_error, inline_blocking, baton = (ctx.failures, ctx.expect_error,
                                                      ctx.inline_blocking, ctx.baton)
    backend = bgroup._get_backend(torch.device("cpu"))
    opts = dist.AllreduceOptions()
    opts.asyncOp = False
    t = torch.full((33,), float(rank + 1))
    w = backend.allreduce([t], opts)
    s = float(sum(r + 1 for r in range(size)))
    if inline_blocking and not (w.is_completed() and w.get_future().done()):
        failures.append("blocking allreduce: its Work is not complete when the call returns")
    w.wait()
    same("blocking allreduce", [t, w.get_future().value()[0]], [torch.full((33,), s)] * 2)
    # Async calls still queued when a blocking call comes: it runs after them, in order.
    a = torch.full((100000,), float(rank + 1))
    works = [dist.all_reduce(a, group=bgroup, async_op=True) for _ in range(3)]
    outs = [torch.empty(100000) for _ in range(size)]
    dist.all_gather(outs, a, group=bgroup)
    for w in works:
        w.wait()
    same("blocking after async", [a] + outs, [torch.full((100000,), s * size ** 2)] * (size + 1))
    # baton.torch.all_reduce: the same call without torch.distributed's layer.
    for op, want in [(R.SUM, s), (R.MAX, float(size))]:
        t = torch.full((1001,), float(rank + 1))
        baton.torch.all_reduce(t, op=op, group=bgroup)
        same(f"baton.torch.all_reduce {op}", [t], [torch.full((1001,), want)])
    expect_error("baton.torch.all_reduce on gloo", ["not baton's"],
                 lambda: baton.torch.all_reduce(torch.ones(2), group=gloo))
    # Its errors come back through the Work, as DistBackendError with Baton's message.
    bopts = dist.BroadcastOptions()
    bopts.rootRank = size + 5
    bopts.asyncOp = False
    kind = expect_error("blocking bad root", ["baton broadcast", "root"],
                        lambda: backend.broadcast([torch.ones(3)], bopts).wait())
    if kind is not None and not issubclass(kind, dist.DistBackendError):
        failures.append(f"blocking bad root: {kind.__name__}, want DistBackendError")


def deferred_calls(ctx):
    """Small async calls wait for their wait() (then run on the waiter's thread), another kind
    of call, or a short linger (then on the host stream): in any case in the order they were
    made, and they progress with nobody waiting (work.h)."""
    bgroup, rank, size, same, failures = ctx.bgroup, ctx.rank, ctx.size, ctx.same, ctx.failures
    s = float(sum(r + 1 for r in range(size)))
    # async, blocking, async, each reading the previous result; waited in reverse.
    t = torch.full((33,), float(rank + 1))
    w1 = dist.all_reduce(t, group=bgroup, async_op=True)
    dist.all_reduce(t, group=bgroup)
    w2 = dist.all_reduce(t, group=bgroup, async_op=True)
    w2.wait()
    w1.wait()
    same("async, blocking, async", [t, w1.get_future().value()[0]],
         [torch.full((33,), s * size ** 2)] * 2)
    # Three deferred calls, the last waited first: all ran, in order.
    t = torch.full((5,), float(rank + 1))
    ws = [dist.all_reduce(t, group=bgroup, async_op=True) for _ in range(3)]
    ws[2].wait()
    same("three deferred, last waited", [t], [torch.full((5,), s * size ** 2)])
    for w in ws:
        w.wait()
    # A deferred call, then one that copies out (it launches the deferred one first), then a
    # deferred one reading the copy; then sends and recvs of the result (they launch it too).
    t = torch.full((7,), float(rank + 1))
    outs = [torch.empty(7) for _ in range(size)]
    w1 = dist.all_reduce(t, group=bgroup, async_op=True)
    w2 = dist.all_gather(outs, t, group=bgroup, async_op=True)
    w3 = dist.all_reduce(outs[0], group=bgroup, async_op=True)
    got = torch.empty(7)
    ps = [dist.isend(outs[0], (rank + 1) % size, group=bgroup),
          dist.irecv(got, (rank - 1) % size, group=bgroup)]
    for w in [ps[1], w3, ps[0], w2, w1]:
        w.wait()
    same("deferred, copy out, deferred, send/recv", [t, outs[1], outs[0], got],
         [torch.full((7,), s), torch.full((7,), s)] + [torch.full((7,), s * size)] * 2)
    # Nobody waits: a small call (deferred) and a large one (on the stream at once) complete
    # while the caller sleeps; polled, never waited on.
    small, large = torch.full((3,), float(rank + 1)), torch.full((4 << 20,), float(rank + 1))
    ws = [dist.all_reduce(small, group=bgroup, async_op=True),
          dist.all_reduce(large, group=bgroup, async_op=True)]
    deadline = time.monotonic() + 30
    while not all(w.is_completed() for w in ws) and time.monotonic() < deadline:
        time.sleep(0.01)
    if not all(w.is_completed() for w in ws):
        failures.append("async calls never waited on: not completed within 30 s")
    same("async calls never waited on", [small, large[:5], large[-5:]],
         [torch.full((3,), s), torch.full((5,), s), torch.full((5,), s)])
    # Waited through the future only (DDP's way): the linger launches it.
    t = torch.full((9,), float(rank + 1))
    got = dist.all_reduce(t, group=bgroup, async_op=True).get_future().wait()[0]
    same("deferred waited through its future", [got, t], [torch.full((9,), s)] * 2)
