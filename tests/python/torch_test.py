"""The "baton" torch.distributed backend against the "gloo" backend of the same torch.

    launch.py -n 4 torch_test.py collectives|ddp|errors|killed

Every rank joins a gloo process group and a baton one, runs each collective
on both with the same inputs and compares; where gloo lacks a call (or a
dtype), the result is compared with a reference every rank computes from all
ranks' inputs. Values are small integers, so sums are exact in any order.
"""

import datetime
import os
import signal
import sys
import time
import warnings

import torch
import torch.distributed as dist

import baton.torch  # noqa: F401 - registers "baton"
import expect
import torch_order_test

mode = sys.argv[1]
# "stream": every call takes the host stream, instead of blocking calls running on the
# caller's thread when the backend is idle and small async ones being deferred to their wait()
# (work.h); one of the meson runs tests that path.
inline_blocking = "stream" not in sys.argv[2:]
warnings.filterwarnings("ignore", category=FutureWarning)  # all_reduce_coalesced
timeout = datetime.timedelta(seconds=float(os.environ.get("TORCH_TEST_PG_TIMEOUT", "30")))
dist.init_process_group("gloo", timeout=timeout)
rank, size = dist.get_rank(), dist.get_world_size()
gloo = dist.group.WORLD
bgroup = dist.new_group(backend="baton", timeout=timeout)
baton.torch._baton_torch._set_inline_blocking(inline_blocking)
failures = []
skipped = set()
R = dist.ReduceOp


def data(r, n, dtype):
    return ((torch.arange(n) * 7 + r * 3) % 11 - 3).to(dtype)


def same(name, got, want):
    got, want = list(got), list(want)
    if len(got) != len(want):
        failures.append(f"{name}: {len(got)} tensors, want {len(want)}")
        return
    for g, w in zip(got, want):
        half = g.dtype in (torch.float16, torch.bfloat16)
        try:
            torch.testing.assert_close(g, w, rtol=1e-2 if half else 0, atol=0)
        except AssertionError as e:
            failures.append(f"{name}: {str(e).splitlines()[0:4]}")
            return


def compare(name, run, reference):
    """run(group) -> list of result tensors; reference: what they must be."""
    got = run(bgroup)
    same(f"{name} (vs reference)", got, reference)
    try:
        want = run(gloo)
    except (RuntimeError, ValueError) as e:  # gloo lacks it: the reference stands alone
        skipped.add(f"{name.split(' ')[0]}: {str(e).splitlines()[0][:80]}")
        return
    same(f"{name} (vs gloo)", got, want)


def collectives():
    for dtype in [torch.float32, torch.float64, torch.int32, torch.int64, torch.float16,
                  torch.bfloat16, torch.uint8]:
        for n in [1, 1000, 65536 + 3]:
            ins = [data(r, n, dtype) for r in range(size)]
            x = ins[rank]
            stack = torch.stack(ins)
            tag = f"{dtype} x {n}"
            refs = {R.SUM: stack.sum(0), R.MIN: stack.min(0).values, R.MAX: stack.max(0).values}
            if dtype not in (torch.uint8, torch.bfloat16, torch.float16):
                refs[R.PRODUCT] = stack.prod(0)
            for op, ref in refs.items():
                compare(f"all_reduce {op} {tag}",
                        lambda g, op=op: [_ar(x.clone(), op, g)], [ref.to(dtype)])
            if dtype.is_floating_point:
                compare(f"all_reduce avg {tag}", lambda g: [_ar(x.clone(), R.AVG, g)],
                        [(stack.double().sum(0) / size).to(dtype)])
                premul = dist._make_nccl_premul_sum(2.0)
                compare(f"all_reduce premul_sum {tag}", lambda g: [_ar(x.clone(), premul, g)],
                        [(stack.double() * 2).sum(0).to(dtype)])
            root = size - 1

            def bcast(g):
                t = x.clone()
                dist.broadcast(t, src=root, group=g)
                return [t]
            compare(f"broadcast {tag}", bcast, [ins[root]])

            def reduce(g):
                t = x.clone()
                dist.reduce(t, dst=1, op=R.MAX, group=g)
                return [t] if rank == 1 else []
            compare(f"reduce {tag}", reduce, [refs[R.MAX]] if rank == 1 else [])

            def allgather(g):
                out = [torch.empty_like(x) for _ in range(size)]
                dist.all_gather(out, x, group=g)
                return out
            compare(f"all_gather {tag}", allgather, ins)

            def allgather_base(g):
                out = torch.empty(size * n, dtype=dtype)
                dist.all_gather_into_tensor(out, x, group=g)
                return [out]
            compare(f"all_gather_into_tensor {tag}", allgather_base, [torch.cat(ins)])

            def gather(g):
                out = [torch.empty_like(x) for _ in range(size)] if rank == 0 else None
                dist.gather(x, out, dst=0, group=g)
                return out or []
            compare(f"gather {tag}", gather, ins if rank == 0 else [])

            def scatter(g):
                out = torch.empty_like(x)
                dist.scatter(out, [t * 2 for t in ins] if rank == 1 else None, src=1, group=g)
                return [out]
            compare(f"scatter {tag}", scatter, [x * 2])

            m = n // size
            blocks = [t[:m * size] for t in ins]
            total = torch.stack(blocks).sum(0).to(dtype)

            def reduce_scatter(g):
                out = torch.empty(m, dtype=dtype)
                dist.reduce_scatter(out, list(x[:m * size].chunk(size)), group=g)
                return [out]
            compare(f"reduce_scatter {tag}", reduce_scatter, [total[rank * m:(rank + 1) * m]])

            def reduce_scatter_tensor(g):
                out = torch.empty(m, dtype=dtype)
                dist.reduce_scatter_tensor(out, x[:m * size].clone(), group=g)
                return [out]
            compare(f"reduce_scatter_tensor {tag}", reduce_scatter_tensor,
                    [total[rank * m:(rank + 1) * m]])

            def alltoall_single(g):
                out = torch.empty(m * size, dtype=dtype)
                dist.all_to_all_single(out, x[:m * size].clone(), group=g)
                return [out]
            compare(f"all_to_all_single {tag}", alltoall_single,
                    [torch.cat([b[rank * m:(rank + 1) * m] for b in blocks])])
    uneven()


def _ar(t, op, g):
    dist.all_reduce(t, op=op, group=g)
    return t


def uneven():
    # all_to_all_single with split sizes: rank i sends i + j + 1 rows (of 3) to rank j.
    send_splits = [rank + j + 1 for j in range(size)]
    recv_splits = [i + rank + 1 for i in range(size)]
    src = torch.cat([torch.full((s, 3), 100.0 * rank + j) for j, s in enumerate(send_splits)])

    def a2a(g):
        out = torch.empty(sum(recv_splits), 3)
        dist.all_to_all_single(out, src, recv_splits, send_splits, group=g)
        return [out]
    compare("all_to_all_single splits", a2a,
            [torch.cat([torch.full((s, 3), 100.0 * i + rank) for i, s in enumerate(recv_splits)])])

    def a2a_list(g):
        ins = [torch.full((s,), 100.0 * rank + j) for j, s in enumerate(send_splits)]
        outs = [torch.empty(s) for s in recv_splits]
        dist.all_to_all(outs, ins, group=g)
        return outs
    compare("all_to_all list", a2a_list,
            [torch.full((s,), 100.0 * i + rank) for i, s in enumerate(recv_splits)])

    # all_gather with uneven sizes: rank r contributes r + 1 elements.
    def allgather_uneven(g):
        outs = [torch.empty(r + 1) for r in range(size)]
        dist.all_gather(outs, torch.full((rank + 1,), float(rank)), group=g)
        return outs
    compare("all_gather uneven", allgather_uneven,
            [torch.full((r + 1,), float(r)) for r in range(size)])

    def reduce_scatter_uneven(g):
        ins = [torch.full((r + 2,), float(rank + r)) for r in range(size)]
        out = torch.empty(rank + 2)
        dist.reduce_scatter(out, ins, group=g)
        return [out]
    compare("reduce_scatter uneven", reduce_scatter_uneven,
            [torch.full((rank + 2,), float(sum(q + rank for q in range(size))))])

    if hasattr(dist, "all_reduce_coalesced"):
        def coalesced(g):
            ts = [torch.full((3,), float(rank)), torch.full((5,), float(rank * 2))]
            dist.all_reduce_coalesced(ts, group=g)
            return ts
        s = float(sum(range(size)))
        compare("all_reduce_coalesced", coalesced, [torch.full((3,), s), torch.full((5,), 2 * s)])

    # send/recv around the ring (even ranks send first), and isend/irecv pairs.
    right, left = (rank + 1) % size, (rank - 1) % size

    def ring(g):
        got = torch.empty(4)
        if rank % 2 == 0:
            dist.send(torch.full((4,), float(rank)), right, group=g)
            dist.recv(got, left, group=g)
        else:
            dist.recv(got, left, group=g)
            dist.send(torch.full((4,), float(rank)), right, group=g)
        return [got]
    compare("send/recv", ring, [torch.full((4,), float(left))])

    # isend then irecv on every rank, in the same order, 16 MiB each (past what Baton sends
    # before the recv is posted): the worker runs the pair as one Baton group; each send
    # alone would wait for a recv queued behind it until the timeout.
    def pairs(g):
        got = torch.empty(1 << 22)
        works = [dist.isend(torch.full((1 << 22,), float(rank)), right, group=g),
                 dist.irecv(got, left, group=g)]
        for w in works:
            w.wait()
        return [got]
    compare("isend/irecv same order", pairs, [torch.full((1 << 22,), float(left))])

    def batch(g):
        got = torch.empty(1 << 22)
        ops = [dist.P2POp(dist.isend, torch.full((1 << 22,), float(rank) + 0.5), right, group=g),
               dist.P2POp(dist.irecv, got, left, group=g)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        return [got]
    compare("batch_isend_irecv", batch, [torch.full((1 << 22,), left + 0.5)])

    # all_gather_coalesced: every rank's tensors in one allgather; outs[r][i]
    # is rank r's ins[i] (torch's layout).
    def gather_coalesced(g):
        ins = [torch.full((3,), float(rank)), torch.full((2, 2), float(10 * rank + 1))]
        outs = [[torch.empty(3), torch.empty(2, 2)] for _ in range(size)]
        dist.all_gather_coalesced(outs, ins, group=g)
        return [t for per_rank in outs for t in per_rank]
    compare("all_gather_coalesced", gather_coalesced,
            [t for r in range(size)
             for t in (torch.full((3,), float(r)), torch.full((2, 2), float(10 * r + 1)))])

    # all_gather_into_tensor under the coalescing manager (allgather_into_tensor_coalesced).
    outs = [torch.empty(size * 3), torch.empty(size * 5, dtype=torch.float64)]
    with dist._coalescing_manager(group=bgroup):
        dist.all_gather_into_tensor(outs[0], torch.full((3,), float(rank)), group=bgroup)
        dist.all_gather_into_tensor(outs[1], torch.full((5,), rank + 0.5, dtype=torch.float64),
                                    group=bgroup)
    same("all_gather_into_tensor coalesced", outs,
         [torch.arange(size).float().repeat_interleave(3),
          (torch.arange(size).double() + 0.5).repeat_interleave(5)])

    try:
        dist.monitored_barrier(group=bgroup, timeout=timeout)
    except ValueError as e:
        # torch 2.11 and older run monitored_barrier on gloo groups only.
        if "only implemented for GLOO" not in str(e):
            raise
        skipped.add(f"monitored_barrier: torch {torch.__version__} allows it on gloo groups only")

    # Works and futures: several async calls, then their futures' values.
    ts = [torch.full((1000,), float(rank + i)) for i in range(4)]
    works = [dist.all_reduce(t, group=bgroup, async_op=True) for t in ts]
    futs = [w.get_future() for w in works]
    dist.barrier(group=bgroup)
    for i, (w, f) in enumerate(zip(works, futs)):
        w.wait()
        val = f.wait()
        same(f"future {i}", [val[0]], [torch.full((1000,), float(sum(range(size)) + size * i))])
        if not w.is_completed():
            failures.append(f"work {i}: not completed after wait()")
    torch_order_test.stream_order(sys.modules[__name__])


def split_groups():
    # torch's split_group on the baton group: halves, and the first and last rank alone
    # (the others get no group).
    halves = [list(range(0, size // 2)), list(range(size // 2, size))]
    try:
        sub = dist.split_group(parent_pg=bgroup, split_ranks=halves)
    except RuntimeError as e:
        # torch 2.11 and older split only where the default group is bound to a device.
        if "No device associated with the default pg" not in str(e):
            raise
        skipped.add(f"split_group: torch {torch.__version__} needs a device-bound default group")
        return
    mine = halves[0] if rank < size // 2 else halves[1]
    t = torch.full((1001,), float(rank + 1))
    dist.all_reduce(t, group=sub)
    outs = [torch.empty(3) for _ in mine]
    dist.all_gather(outs, torch.full((3,), float(rank)), group=sub)
    same("split_group halves", [t] + outs,
         [torch.full((1001,), float(sum(r + 1 for r in mine)))] +
         [torch.full((3,), float(r)) for r in mine])
    ends = sorted({0, size - 1})
    pair = dist.split_group(parent_pg=bgroup, split_ranks=[ends])
    if rank in ends:
        t = torch.full((5,), float(rank + 1))
        dist.all_reduce(t, group=pair)
        same("split_group ends", [t], [torch.full((5,), float(sum(r + 1 for r in ends)))])
    elif pair != dist.GroupMember.NON_GROUP_MEMBER:
        failures.append(f"split_group ends: rank {rank} got a group")


def ddp():
    """A small MLP trained with DDP on both backends: parameters equal after every step."""
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    def model(group):
        torch.manual_seed(1)
        net = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                            nn.Linear(64, 5))
        return DDP(net, process_group=group, bucket_cap_mb=0.01)  # several buckets
    def train(nets, momentum, seed, steps, tol, label):
        """Steps both DDP models on the same batches; parameters compared after every step."""
        opts = {k: torch.optim.SGD(v.parameters(), lr=0.1, momentum=momentum)
                for k, v in nets.items()}
        gen = torch.Generator().manual_seed(seed + rank)
        for step in range(steps):
            xb = torch.randn(16, 20, generator=gen)
            yb = torch.randint(0, 5, (16,), generator=gen)
            for k in nets:
                opts[k].zero_grad()
                nn.functional.cross_entropy(nets[k](xb), yb).backward()
                opts[k].step()
            for (name, p), q in zip(nets["baton"].named_parameters(), nets["gloo"].parameters()):
                if not torch.allclose(p, q, rtol=tol, atol=tol / 10):
                    failures.append(f"{label} step {step}: {name} differs by "
                                    f"{(p - q).abs().max().item():.3g}")

    nets = {"baton": model(bgroup), "gloo": model(gloo)}
    train(nets, 0.9, 100, 8, 1e-5, "ddp")
    # Communication hooks read the Work's future and chain on it (.then): the plain
    # allreduce hook, and fp16 compression (the sums round differently: a looser match).
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    for hook, tol in [(default_hooks.allreduce_hook, 1e-5), (default_hooks.fp16_compress_hook, 2e-3)]:
        hooked = {"baton": model(bgroup), "gloo": model(gloo)}
        for k, g in [("baton", bgroup), ("gloo", gloo)]:
            hooked[k].register_comm_hook(g, hook)
        train(hooked, 0.0, 200, 4, tol, f"ddp {hook.__name__}")
    # And the replicas agree among ranks.
    flat = torch.cat([p.detach().reshape(-1) for p in nets["baton"].parameters()])
    gathered = [torch.empty_like(flat) for _ in range(size)]
    dist.all_gather(gathered, flat, group=gloo)
    if any(not torch.equal(g, gathered[0]) for g in gathered):
        failures.append("ddp: replicas differ among ranks")


def expect_error(name, words, fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - any exception type torch raises
        if rank == 0:
            print(f"{name}: {type(e).__name__}: {str(e).splitlines()[0][:240]}")
        if not all(w in str(e) for w in words):
            failures.append(f"{name}: message {str(e)[:300]!r} lacks {words}")
        return type(e)
    failures.append(f"{name}: no exception")
    return None


def any_source():
    """dist.recv without src (batonRecvAny): each rank in turn receives one tensor from every
    other rank in whatever order they arrive (senders start after different delays), by
    dtype; the sources and values are checked against what each sender must have sent."""
    for dtype in (torch.float32, torch.int64, torch.bfloat16):
        for receiver in range(size):
            n = 3 + receiver * 5 + (7 if dtype == torch.int64 else 0)
            if rank == receiver:
                seen = []
                for _ in range(size - 1):
                    t = torch.full((n,), -1).to(dtype)
                    src = dist.recv(t, group=bgroup)
                    seen.append(src)
                    same(f"recv from any source {dtype} from {src}", [t], [data(src, n, dtype)])
                if sorted(seen) != [r for r in range(size) if r != rank]:
                    failures.append(f"recv from any source {dtype}: sources {seen}")
            else:
                time.sleep(0.002 * ((rank + receiver) % size))
                dist.send(data(rank, n, dtype), receiver, group=bgroup)
            dist.barrier(group=bgroup)


def bools():
    """Bool tensors travel as bytes: SUM is "any" and PRODUCT "all" (as ProcessGroupNCCL has
    them), never a byte count (3 on 3 ranks, 0 at 256); AVG is refused."""
    flags = torch.tensor([True, rank == 0, False, rank > 0])
    for op, want in ((R.SUM, [True, True, False, size > 1]),
                     (R.PRODUCT, [True, size == 1, False, False])):
        t = flags.clone()
        dist.all_reduce(t, op=op, group=bgroup)
        if not torch.equal(t.view(torch.uint8), torch.tensor(want).view(torch.uint8)):
            failures.append(f"bool all_reduce {op}: bytes {t.view(torch.uint8).tolist()}")
        out = torch.empty(1, dtype=torch.bool)
        dist.reduce_scatter_tensor(out, torch.full((size,), rank == 0), op=op, group=bgroup)
        if out.view(torch.uint8).item() != int(want[1]):
            failures.append(f"bool reduce_scatter_tensor {op}: {out.view(torch.uint8).item()}")
    expect_error("bool avg", ["AVG of boolean"],
                 lambda: dist.all_reduce(flags.clone(), op=R.AVG, group=bgroup))


def errors():
    # torch checks the root itself; straight to the backend, Baton's check answers.
    backend = bgroup._get_backend(torch.device("cpu"))
    opts = dist.BroadcastOptions()
    opts.rootRank = size + 5
    kind = expect_error("bad root", ["baton broadcast", "invalid argument", "root"],
                        lambda: backend.broadcast([torch.ones(3)], opts).wait())
    if kind is not None and not issubclass(kind, dist.DistBackendError):
        failures.append(f"bad root: {kind.__name__}, want DistBackendError")
    expect_error("int16", ["no Baton datatype"],
                 lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16), group=bgroup))
    expect_error("bitwise op", ["not supported"],
                 lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32), op=R.BAND,
                                         group=bgroup))
    expect_error("non-contiguous", ["contiguous"],
                 lambda: dist.all_reduce(torch.ones(4, 4).t(), group=bgroup))
    bools()
    any_source()
    # An empty recv from any source carries nothing to learn the sender from: refused.
    expect_error("empty recv from any source", ["baton recv from any source", "count is 0"],
                 lambda: dist.recv(torch.empty(0), group=bgroup))
    # A collective that one rank never joins: Baton's timeout (2 s) names the missing rank.
    short = dist.new_group(backend="baton", timeout=datetime.timedelta(seconds=2))
    if rank != 0:
        kind = expect_error("timeout", ["baton allreduce"],
                            lambda: dist.all_reduce(torch.ones(3), group=short))
        if kind is not None and not issubclass(kind, dist.DistBackendError):
            failures.append(f"timeout: {kind.__name__}, want DistBackendError")
    dist.barrier(group=gloo)
    lifecycle()


def lifecycle():
    # abort(): a call in flight that no peer joins fails at once, not after the timeout.
    late = dist.new_group(backend="baton", timeout=datetime.timedelta(seconds=60))
    if rank == 0:
        backend = late._get_backend(torch.device("cpu"))
        work = dist.all_reduce(torch.ones(5), group=late, async_op=True)
        time.sleep(0.3)
        start = time.monotonic()
        backend.abort()
        expect_error("aborted call", ["baton allreduce"], lambda: work.wait())
        if time.monotonic() - start > 10:
            failures.append(f"abort: the call failed after {time.monotonic() - start:.1f} s")
        expect_error("call after abort", ["shut down"],
                     lambda: backend.allreduce([torch.ones(2)]).wait())
    dist.barrier(group=gloo)
    # destroy_process_group shuts the backend down: later calls on it fail with a message.
    doomed = dist.new_group(backend="baton", timeout=timeout)
    t = torch.ones(3)
    dist.all_reduce(t, group=doomed)
    same("before shutdown", [t], [torch.full((3,), float(size))])
    backend = doomed._get_backend(torch.device("cpu"))
    dist.destroy_process_group(doomed)
    expect_error("call after shutdown", ["shut down"],
                 lambda: backend.allreduce([torch.ones(2)]).wait())


def killed():
    # The last rank dies mid-job; the others' next collective raises instead of hanging.
    dist.all_reduce(torch.ones(3), group=bgroup)
    if rank == size - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    # The error names the lost rank through batonCommGetFailedRanks.
    expect_error("killed peer", ["baton allreduce", f"[failed ranks: {size - 1}]"],
                 lambda: dist.all_reduce(torch.ones(1 << 16), group=bgroup))
    if time.monotonic() - start > 20:
        failures.append(f"killed peer: noticed after {time.monotonic() - start:.1f} s")
    if failures:
        print(f"rank {rank}: " + "\n".join(failures), file=sys.stderr)
    # The gloo group's peer is gone too: leave without destroying it.
    os._exit(1 if failures else 0)


def cuda():
    # CUDA tensors through Baton's device buffers, on the caller's current stream; results
    # against a CPU reference. Skipped (exit 77 on every rank) without a GPU.
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    for dtype in [torch.float32, torch.float16, torch.bfloat16, torch.int32]:
        for n in [1, 1000, 1 << 18]:
            inputs = [data(r, n, dtype) for r in range(size)]
            t = inputs[rank].to(dev)
            dist.all_reduce(t, group=bgroup)
            same(f"cuda allreduce {dtype} x {n}", [t.cpu()], [sum(inputs).to(dtype)])
            t = inputs[rank].to(dev)
            dist.broadcast(t, src=size - 1, group=bgroup)
            same(f"cuda broadcast {dtype} x {n}", [t.cpu()], [inputs[size - 1]])
            out = torch.empty(size * n, dtype=dtype, device=dev)
            dist.all_gather_into_tensor(out, inputs[rank].to(dev), group=bgroup)
            same(f"cuda all_gather_into_tensor {dtype} x {n}", [out.cpu()], [torch.cat(inputs)])
            full = [data(r, size * n, dtype) for r in range(size)]
            out = torch.empty(n, dtype=dtype, device=dev)
            dist.reduce_scatter_tensor(out, full[rank].to(dev), group=bgroup)
            same(f"cuda reduce_scatter_tensor {dtype} x {n}", [out.cpu()],
                 [sum(full).to(dtype)[rank * n:(rank + 1) * n]])
    expect_error("cuda alltoall", ["CUDA tensors only in"],
                 lambda: dist.all_to_all_single(torch.empty(size, device=dev),
                                                torch.ones(size, device=dev), group=bgroup))


if mode == "cuda" and not torch.cuda.is_available():
    print(f"rank {rank}: skipped: no CUDA GPU (torch {torch.__version__})")
    sys.exit(77)
{"collectives": collectives, "ddp": ddp, "errors": errors, "killed": killed, "cuda": cuda}[mode]()
dist.barrier(group=gloo)
dist.destroy_process_group()
if rank == 0 and skipped:
    print("compared with the reference only (gloo lacks them):\n  " + "\n  ".join(sorted(skipped)))
expect.finish(failures, rank, f"{mode} ok")
