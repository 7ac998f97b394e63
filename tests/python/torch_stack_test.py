"""What PyTorch builds on process groups, on "baton" against "gloo" (docs/python.md).

    launch.py -n 2 torch_stack_test.py train      # FSDP2, FSDP1, pipelining, DDP variants
    launch.py -n 4 torch_stack_test.py dtensor    # DTensor on 1-D and 2-D meshes
                                                  # (TORCH_STACK_DTENSOR_BACKEND=gloo: on gloo)
    launch.py -n 3 torch_stack_test.py lowp       # bf16/fp16, timeouts, abort, shutdown

TORCH_STACK_REGISTERED=BYTES runs it with baton.torch.use_registered_memory(min_bytes=BYTES)
on (with BATON_REGISTERED_MIN_BYTES as small, the baton group's calls on those tensors take
the registered path): the same comparisons over the registered path.

Every rank joins a gloo process group and a baton one and trains the same
model from the same seed on the same data on both; parameters are compared
after every step. Where gloo cannot run a feature on CPU the comparison is
with a single-process reference instead (said in the output and in
docs/python.md). Tolerances: 2 ranks sum two float32 values, which is exact
in any order, so training on 2 ranks matches gloo bit for bit unless a
feature computes differently (each looser tolerance says why).
"""

import datetime
import os
import sys
import threading
import time
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn

import baton.torch  # registers "baton"
import expect

mode = sys.argv[1]
if os.environ.get("TORCH_STACK_REGISTERED"):
    baton.torch.use_registered_memory(min_bytes=int(os.environ["TORCH_STACK_REGISTERED"]))
warnings.filterwarnings("ignore")  # FSDP1's deprecation, DDP's static-graph notes
timeout = datetime.timedelta(seconds=float(os.environ.get("TORCH_TEST_PG_TIMEOUT", "30")))
dist.init_process_group("gloo", timeout=timeout)
rank, size = dist.get_rank(), dist.get_world_size()
gloo = dist.group.WORLD
bgroup = dist.new_group(backend="baton", timeout=timeout)
failures = []
notes = []  # what ran against the single-process reference only, and why


def note(text):
    if rank == 0 and text not in notes:
        notes.append(text)


def close(name, got, want, tol):
    """tol 0: bit for bit; else |got - want| <= tol * (1 + |want|)."""
    got, want = got.detach(), want.detach()
    if got.shape != want.shape:
        failures.append(f"{name}: shape {tuple(got.shape)}, want {tuple(want.shape)}")
        return False
    ok = torch.equal(got, want) if tol == 0 else bool(
        ((got.double() - want.double()).abs() <= tol * (1 + want.double().abs())).all())
    if not ok:
        diff = (got.double() - want.double()).abs().max().item()
        failures.append(f"{name}: differs by {diff:.3g} (tolerance {tol})")
    return ok


def mlp(seed=1, width=32):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(12, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 4))


def batches(steps, n=8, seed=100):
    """Every rank's batches: batches[step][r] = (x, y)."""
    gen = torch.Generator().manual_seed(seed)
    return [[(torch.randn(n, 12, generator=gen), torch.randn(n, 4, generator=gen))
             for _ in range(size)] for _ in range(steps)]


def loss_fn(out, y):
    return nn.functional.mse_loss(out, y)


# ---- FSDP ----

def reference_steps(data, lr):
    """The unsharded model on one process over every rank's batch: its parameters per step."""
    net = mlp()
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    out = []
    for step in data:
        opt.zero_grad()
        # FSDP and DDP average the ranks' gradients: the mean of the per-rank losses.
        sum(loss_fn(net(x), y) for x, y in step).div(size).backward()
        opt.step()
        out.append([p.detach().clone() for p in net.parameters()])
    return out


def step_each(tag, nets, opts, x, y):
    """One SGD step of each net in `nets` on (x, y). A gloo net whose step fails is dropped (the
    caller compares with its single-process reference alone); returns whether gloo's remains."""
    for name in list(nets):
        opts[name].zero_grad()
        try:
            loss_fn(nets[name](x), y).backward()
            opts[name].step()
        except (RuntimeError, NotImplementedError) as e:
            if name != "gloo":
                raise
            note(f"{tag}: gloo fails ({str(e).splitlines()[0][:100]}); "
                 "compared with the single-process reference")
            del nets["gloo"]
    return "gloo" in nets


def fsdp2():
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard
    data = batches(4)
    ref = reference_steps(data, 0.05)
    nets, opts = {}, {}
    for name, group in [("baton", bgroup), ("gloo", gloo)]:
        mesh = DeviceMesh.from_group(group, "cpu")
        net = mlp()
        for layer in net:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(net, mesh=mesh)
        nets[name], opts[name] = net, torch.optim.SGD(net.parameters(), lr=0.05)
    for step, batch in enumerate(data):
        x, y = batch[rank]
        gloo_ok = step_each("fsdp2", nets, opts, x, y)
        for i, p in enumerate(nets["baton"].parameters()):
            # Each rank's shard (dim 0 of the parameter) against gloo's shard, bit for bit,
            # and the whole parameter against the reference (sums in another order).
            if gloo_ok:
                close(f"fsdp2 step {step} param {i} vs gloo",
                      p.to_local(), list(nets["gloo"].parameters())[i].to_local(), 0)
            close(f"fsdp2 step {step} param {i} vs reference", p.full_tensor(), ref[step][i],
                  1e-5)


def fsdp1():
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    data = batches(4, seed=200)
    ref = reference_steps(data, 0.05)
    nets, opts = {}, {}
    for name, group in [("baton", bgroup), ("gloo", gloo)]:
        net = FSDP(mlp(), process_group=group, device_id=torch.device("cpu"),
                   use_orig_params=True)
        nets[name], opts[name] = net, torch.optim.SGD(net.parameters(), lr=0.05)
    for step, batch in enumerate(data):
        x, y = batch[rank]
        gloo_ok = step_each("fsdp1", nets, opts, x, y)
        # The local shard of the flat parameter, bit for bit against gloo's.
        if gloo_ok:
            for i, (p, q) in enumerate(zip(nets["baton"].parameters(),
                                           nets["gloo"].parameters())):
                close(f"fsdp1 step {step} shard {i} vs gloo", p, q, 0)
        with FSDP.summon_full_params(nets["baton"]):
            for i, p in enumerate(nets["baton"].parameters()):
                close(f"fsdp1 step {step} param {i} vs reference", p, ref[step][i], 1e-5)


# ---- pipelining ----

def pipeline():
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    assert size == 2, "pipeline: 2 stages on 2 ranks"
    for schedule_type in [ScheduleGPipe, Schedule1F1B]:
        for name, group in [("baton", bgroup), ("gloo", gloo)]:
            full = mlp(seed=3)
            stages = [full[:2], full[2:]]  # the same parameters as full's
            whole = mlp(seed=3)
            opt = torch.optim.SGD(full.parameters(), lr=0.05)
            whole_opt = torch.optim.SGD(whole.parameters(), lr=0.05)
            stage = PipelineStage(stages[rank], rank, 2, torch.device("cpu"), group=group)
            sched = schedule_type(stage, n_microbatches=4, loss_fn=loss_fn)
            tag = f"{schedule_type.__name__} {name}"
            for step, batch in enumerate(batches(2, n=16, seed=300)):
                x, y = batch[0]  # one batch: the pipeline's input on stage 0, target on 1
                opt.zero_grad()
                losses = []
                if rank == 0:
                    sched.step(x)
                else:
                    sched.step(target=y, losses=losses)
                whole_opt.zero_grad()
                # The schedule averages the microbatches' gradients; equal microbatches: the
                # whole batch's mean loss.
                micro = [loss_fn(whole(xm), ym) for xm, ym in zip(x.chunk(4), y.chunk(4))]
                sum(micro).div(4).backward()
                if rank == 1:
                    for i, (got, want) in enumerate(zip(losses, micro)):
                        close(f"{tag} step {step} loss {i}", got, want, 1e-6)
                mine = list(stages[rank].parameters())
                theirs = list((whole[:2] if rank == 0 else whole[2:]).parameters())
                for i, (p, q) in enumerate(zip(mine, theirs)):
                    close(f"{tag} step {step} grad {i}", p.grad, q.grad, 1e-6)
                opt.step()
                whole_opt.step()
            dist.barrier(group=gloo)


# ---- DDP ----

class Branchy(nn.Module):
    """A model whose second head is used on odd steps only (find_unused_parameters)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.body = nn.Sequential(nn.Linear(12, 32), nn.ReLU())
        self.head = nn.Linear(32, 4)
        self.other = nn.Linear(32, 4)

    def forward(self, x, odd=False):
        h = self.body(x)
        return self.other(h) if odd else self.head(h)


def ddp_variants():
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as plsgd
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
    from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager

    # Single-rank subgroups for post-local SGD: every rank makes each one, for each backend.
    singles = {}
    for name in ["baton", "gloo"]:
        for r in range(size):
            g = dist.new_group([r], backend=name, timeout=timeout)
            if r == rank:
                singles[name] = g

    def run(label, make, steps=6, hook=None, averager=None, odd_steps=False, tol=0):
        nets, opts, avgs = {}, {}, {}
        for name, group in [("baton", bgroup), ("gloo", gloo)]:
            nets[name] = make(group)
            if hook:
                state, fn = hook(name, group)
                nets[name].register_comm_hook(state, fn)
            opts[name] = torch.optim.SGD(nets[name].parameters(), lr=0.05)
            if averager:
                avgs[name] = averager(group)
        for step, batch in enumerate(batches(steps, seed=400)):
            x, y = batch[rank]
            for name in nets:
                opts[name].zero_grad()
                args = (x, odd_steps and step % 2 == 1) if odd_steps else (x,)
                loss_fn(nets[name](*args), y).backward()
                opts[name].step()
                if averager:
                    avgs[name].average_parameters(nets[name].parameters())
            for i, (p, q) in enumerate(zip(nets["baton"].parameters(), nets["gloo"].parameters())):
                close(f"ddp {label} step {step} param {i}", p, q, tol)

    run("static_graph", lambda g: DDP(mlp(), process_group=g, static_graph=True,
                                      bucket_cap_mb=0.001))
    run("find_unused_parameters",
        lambda g: DDP(Branchy(), process_group=g, find_unused_parameters=True), odd_steps=True)

    def powersgd(name, group):
        # start_powerSGD_iter 2: two plain allreduce steps, then compression; the seed makes
        # the random projections the same on both backends.
        return psgd.PowerSGDState(process_group=group, matrix_approximation_rank=2,
                                  start_powerSGD_iter=2, min_compression_rate=0.5,
                                  random_seed=7), psgd.powerSGD_hook
    # PowerSGD's orthogonalisation and matrix products on the allreduced factors: the same
    # float32 operations on the same values, so bit for bit too.
    run("powerSGD", lambda g: DDP(mlp(width=64), process_group=g), hook=powersgd)

    def local_sgd(name, group):
        return plsgd.PostLocalSGDState(process_group=group, subgroup=singles[name],
                                       start_localSGD_iter=2), plsgd.post_localSGD_hook
    # After 2 global steps each rank steps alone; the averager averages the models every
    # 2 steps from step 2.
    run("post_localSGD", lambda g: DDP(mlp(), process_group=g), steps=8, hook=local_sgd,
        averager=lambda g: PeriodicModelAverager(period=2, warmup_steps=2, process_group=g))


# ---- DTensor ----

def dtensor():
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import (DTensor, Partial, Replicate, Shard, distribute_tensor)
    backend = os.environ.get("TORCH_STACK_DTENSOR_BACKEND", "baton")  # gloo: to compare
    meshes = [("1-D", DeviceMesh.from_group(bgroup if backend == "baton" else gloo, "cpu"))]
    if size == 4:
        # A 2 x 2 mesh: rows {0,1},{2,3} and columns {0,2},{1,3}.
        rows = [dist.new_group(r, backend=backend, timeout=timeout) for r in ([0, 1], [2, 3])]
        cols = [dist.new_group(c, backend=backend, timeout=timeout) for c in ([0, 2], [1, 3])]
        meshes.append(("2-D", DeviceMesh.from_group(
            # Mesh dim 0 runs down the columns, dim 1 along the rows.
            [cols[rank % 2], rows[rank // 2]], "cpu", mesh=torch.arange(4).reshape(2, 2),
            mesh_dim_names=("dp", "tp"))))
    for dims, mesh in meshes:
        nd = mesh.ndim
        for shape in [(8, 6), (7, 5), (1, 3)]:  # even, uneven, fewer rows than ranks
            for dtype in [torch.float32, torch.bfloat16]:
                torch.manual_seed(11)
                full = torch.randn(shape).to(dtype)
                tag = f"dtensor {dims} {shape} {dtype}"
                placements = [[Shard(0)], [Replicate()], [Shard(1)]]
                if nd == 2:
                    placements = [[Shard(0), Replicate()], [Replicate(), Replicate()],
                                  [Shard(1), Shard(0)], [Shard(0), Shard(1)],
                                  [Replicate(), Shard(0)], [Shard(0), Shard(0)]]
                for src in placements:
                    d = distribute_tensor(full, mesh, src)
                    close(f"{tag} {src} full_tensor", d.full_tensor(), full, 0)
                    for dst in placements:
                        r = d.redistribute(mesh, dst)
                        close(f"{tag} {src}->{dst}", r.full_tensor(), full, 0)
                # Partial: each rank holds a share; redistribute sums them.
                shares = [torch.randn(shape, generator=torch.Generator().manual_seed(20 + r))
                          for r in range(size)]
                want = torch.stack([s.double() for s in shares]).sum(0)
                local = shares[rank].to(dtype)
                if nd == 2:
                    # Partial over both mesh dims: the sum over all 4 ranks.
                    p = DTensor.from_local(local, mesh, [Partial(), Partial()])
                else:
                    p = DTensor.from_local(local, mesh, [Partial()])
                tol = 0 if dtype == torch.float32 and size <= 2 else (
                    1e-5 if dtype == torch.float32 else 2e-2)
                for dst in [[Replicate()] * nd, [Shard(0)] * nd, [Shard(1), Replicate()][:nd]]:
                    got = p.redistribute(mesh, dst).full_tensor()
                    close(f"{tag} Partial->{dst}", got, want.to(dtype), tol)
                # A matmul on sharded operands: the sharding propagation's collectives.
                a = distribute_tensor(full, mesh, [Shard(0)] + [Replicate()] * (nd - 1))
                b = distribute_tensor(full.t().contiguous(), mesh,
                                      [Replicate()] * (nd - 1) + [Shard(1)])
                close(f"{tag} matmul", (a @ b).full_tensor().double(),
                      full.double() @ full.t().double(), 1e-5 if dtype == torch.float32 else 5e-2)


# ---- bf16/fp16, timeouts, abort, shutdown ----

def low_precision():
    R = dist.ReduceOp
    gloo_refuses = set()
    for dtype in [torch.bfloat16, torch.float16]:
        eps = torch.finfo(dtype).eps
        for n in [1, 33, 4097]:
            gen = torch.Generator().manual_seed(n)
            # Values exact in dtype: the float64 reference then sees the same inputs.
            ins = [torch.randn(size * n, generator=gen).to(dtype) for _ in range(size)]
            x = ins[rank]
            stack = torch.stack([t.double() for t in ins])
            tag = f"{dtype} x {n}"
            # A sum of `size` values each rounded at most once per addition: size ulps.
            tol = size * eps
            cases = {
                "all_reduce sum": (lambda g: _ar(x.clone(), R.SUM, g), stack.sum(0)),
                "all_reduce avg": (lambda g: _ar(x.clone(), R.AVG, g), stack.mean(0)),
                "all_reduce max": (lambda g: _ar(x.clone(), R.MAX, g), stack.max(0).values),
                "all_reduce min": (lambda g: _ar(x.clone(), R.MIN, g), stack.min(0).values),
                "reduce_scatter_tensor": (lambda g: _rs(x, g),
                                          stack.sum(0)[rank * n:(rank + 1) * n]),
                "reduce_scatter": (lambda g: _rs_list(x, g),
                                   stack.sum(0)[rank * n:(rank + 1) * n]),
                "all_gather": (lambda g: torch.cat(_ag(x, g)), stack.reshape(-1)),
                "all_gather_into_tensor": (lambda g: _ag_tensor(x, g), stack.reshape(-1)),
                "broadcast": (lambda g: _bc(x.clone(), g), stack[size - 1]),
                "all_to_all_single": (lambda g: _a2a(x, g),
                                      stack[:, rank * n:(rank + 1) * n].reshape(-1)),
            }
            for name, (fn, want) in cases.items():
                exact = name.startswith(("all_gather", "broadcast", "all_to_all",
                                         "all_reduce max", "all_reduce min"))
                close(f"{name} {tag} vs float64", fn(bgroup), want.to(dtype).to(torch.float64)
                      if exact else want, 0 if exact else tol)
                try:
                    fn(gloo)
                except (RuntimeError, ValueError) as e:
                    gloo_refuses.add(f"{name} {dtype}: {str(e).splitlines()[0][:70]}")
    if rank == 0:
        print("bf16/fp16: gloo refuses " + ("\n  ".join([""] + sorted(gloo_refuses))
                                             if gloo_refuses else "none of them (this torch)"))


def _ar(t, op, g):
    dist.all_reduce(t, op=op, group=g)
    return t.double()


def _rs(x, g):
    out = torch.empty(x.numel() // size, dtype=x.dtype)
    dist.reduce_scatter_tensor(out, x.clone(), group=g)
    return out.double()


def _rs_list(x, g):
    out = torch.empty(x.numel() // size, dtype=x.dtype)
    dist.reduce_scatter(out, list(x.clone().chunk(size)), group=g)
    return out.double()


def _ag(x, g):
    outs = [torch.empty_like(x) for _ in range(size)]
    dist.all_gather(outs, x, group=g)
    return [o.double() for o in outs]


def _ag_tensor(x, g):
    out = torch.empty(size * x.numel(), dtype=x.dtype)
    dist.all_gather_into_tensor(out, x, group=g)
    return out.double()


def _bc(t, g):
    dist.broadcast(t, src=size - 1, group=g)
    return t.double()


def _a2a(x, g):
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x.clone(), group=g)
    return out.double()


def expect_error(name, words, fn, within=None):
    start = time.monotonic()
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - any exception type torch raises
        took = time.monotonic() - start
        if rank == 1:
            print(f"{name}: after {took:.1f} s: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
        if not all(w in str(e) for w in words):
            failures.append(f"{name}: message {str(e)[:300]!r} lacks {words}")
        if within is not None and took > within:
            failures.append(f"{name}: failed after {took:.1f} s, not within {within} s")
        return
    failures.append(f"{name}: no exception")


def threads_and_fds():
    return threading.active_count(), len(os.listdir("/proc/self/task")), len(os.listdir(
        "/proc/self/fd"))


def timeouts_and_abort():
    # The group's timeout (new_group/init_process_group): a collective rank 0 never joins
    # fails on the others after it, naming the rank.
    short = dist.new_group(backend="baton", timeout=datetime.timedelta(seconds=2))
    if rank != 0:
        expect_error("group timeout 2 s", ["baton allreduce", "Timed out"],
                     lambda: dist.all_reduce(torch.ones(3), group=short), within=12)
    dist.barrier(group=gloo)
    # The waiter's own timeout, Work.wait(timeout), shorter than the group's 60 s.
    long = dist.new_group(backend="baton", timeout=datetime.timedelta(seconds=60))
    if rank != 0:
        work = dist.all_reduce(torch.ones(3), group=long, async_op=True)
        expect_error("Work.wait(timeout=1 s)", ["imed out"],
                     lambda: work.wait(timeout=datetime.timedelta(seconds=1)), within=8)
    # The allreduce rank 0 left behind on `long` ends after the group's 60 s; the group is
    # aborted instead so nobody waits for it.
    dist.barrier(group=gloo)
    long.abort()
    if rank != 0:  # the call in flight then fails at once
        expect_error("in flight at abort", ["baton allreduce"], lambda: work.wait(), within=10)
    # The options' own timeout (AllreduceOptions.timeout, which torch's Python calls leave
    # unset: the group's own allreduce takes it) under the group's 60 s. A call with it that
    # every rank joins works; one rank 0 skips fails on the others after its 1 s; the group is
    # then failed on every rank, as after the group's own timeout (docs/python.md).
    own = dist.new_group(backend="baton", timeout=datetime.timedelta(seconds=60))
    opts = dist.AllreduceOptions()
    opts.timeout = datetime.timedelta(seconds=1)
    t = torch.ones(3)
    own.allreduce([t], opts).wait()
    close("allreduce with its own timeout", t, torch.full((3,), float(size)), 0)
    dist.all_reduce(t, group=own)  # the group's timeout again
    close("allreduce after it", t, torch.full((3,), float(size * size)), 0)
    if rank != 0:
        start = time.monotonic()
        expect_error("options' timeout 1 s", ["baton allreduce"],
                     lambda: own.allreduce([torch.ones(3)], opts).wait(), within=10)
        if time.monotonic() - start < 0.9:
            failures.append("options' timeout 1 s: failed before 1 s")
    dist.barrier(group=gloo)
    expect_error("after the options' timeout", ["baton allreduce"],
                 lambda: dist.all_reduce(torch.ones(3), group=own), within=10)
    dist.barrier(group=gloo)
    # Rank 0 aborts while the others wait in a collective it never joins: theirs fail at
    # once (Baton tells the peers), not after the group's 60 s.
    aborted = dist.new_group(backend="baton", timeout=datetime.timedelta(seconds=60))
    dist.all_reduce(torch.ones(2), group=aborted)
    dist.barrier(group=gloo)
    if rank == 0:
        time.sleep(1.0)  # the peers are in their all_reduce by now
        dist.distributed_c10d._abort_process_group(aborted)
    else:
        expect_error("peer aborted", ["baton allreduce"],
                     lambda: dist.all_reduce(torch.ones(1 << 10), group=aborted), within=15)
    dist.barrier(group=gloo)
    # destroy_process_group (the backend's shutdown) and abort free the communicator: its
    # threads and sockets; after a few rounds of each none are left over.
    base = None
    for i in range(4):
        g = dist.new_group(backend="baton", timeout=timeout)
        t = torch.ones(1000)
        dist.all_reduce(t, group=g)
        close(f"round {i} allreduce", t, torch.full((1000,), float(size)), 0)
        # A rank's allreduce may return while a peer still receives its last bytes; abort
        # cuts them off (the peer's call fails): everyone first.
        dist.barrier(group=gloo)
        if i % 2:
            g.abort()  # ProcessGroup.abort: the backend's abort
        else:
            dist.destroy_process_group(g)
        dist.barrier(group=gloo)
        time.sleep(0.2)  # closed sockets leave /proc/self/fd
        counts = threads_and_fds()
        if i == 1:
            base = counts
        elif i > 1 and (counts[1] > base[1] or counts[2] > base[2]):
            failures.append(f"round {i}: {counts[1]} threads, {counts[2]} fds after freeing "
                            f"(round 1: {base[1]}, {base[2]})")


def calls_in_callbacks():
    """Calls made inside a future's callback, which runs on the backend's completion thread
    (PowerSGD's hook does this): they complete there instead of waiting for that thread."""
    t = torch.full((5,), float(rank + 1))
    s = float(sum(r + 1 for r in range(size)))

    def callback(fut):
        # A list allgather (copied out once it ran), a list reduce_scatter (inputs flattened
        # when queued), an allreduce whose own future is waited on, all inside the callback.
        outs = [torch.empty(5) for _ in range(size)]
        dist.all_gather(outs, fut.value()[0], group=bgroup)
        out = torch.empty(5)
        dist.reduce_scatter(out, outs, group=bgroup)
        inner = dist.all_reduce(out.clone(), group=bgroup, async_op=True).get_future().wait()[0]
        return [out, inner]

    got = dist.all_reduce(t, group=bgroup, async_op=True).get_future().then(callback).wait()
    close("callback reduce_scatter", got[0], torch.full((5,), size * s), 0)
    close("callback allreduce", got[1], torch.full((5,), size * size * s), 0)


def train():
    fsdp2()
    fsdp1()
    pipeline()
    ddp_variants()


def lowp():
    low_precision()
    calls_in_callbacks()
    timeouts_and_abort()


start = time.monotonic()
if os.environ.get("TORCH_STACK_TRACEBACK_AFTER"):  # debugging a hang: every thread's stack
    import faulthandler
    faulthandler.dump_traceback_later(float(os.environ["TORCH_STACK_TRACEBACK_AFTER"]), exit=True)
{"train": train, "dtensor": dtensor, "lowp": lowp, "fsdp2": fsdp2, "fsdp1": fsdp1,
 "pipeline": pipeline, "ddp": ddp_variants, "low_precision": low_precision,
 "timeouts": timeouts_and_abort}[mode]()
dist.barrier(group=gloo)
dist.destroy_process_group()
if rank == 0 and notes:
    print("against the single-process reference only:\n  " + "\n  ".join(notes))
expect.finish(failures, rank, f"{mode} ok ({time.monotonic() - start:.1f} s)")
