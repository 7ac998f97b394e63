"""DDP or FSDP2 training steps on a "baton" group: tensors in registered memory
(baton.torch.use_registered_memory) against torch's own allocator, interleaved.

    PYTHONPATH=build/python .venv/bin/python tests/python/launch.py -n 2 \\
        perf/python/torch_train_registered.py [--fsdp]

Two copies of one MLP (--width, --depth: 4 * width^2 * depth bytes of float32
gradients) each wrapped in DDP with gradient_as_bucket_view (its 25 MiB
buckets), or with --fsdp in FSDP2's fully_shard per layer (each layer's
parameters gathered, its gradients reduce-scattered), trained with SGD on the
same random batches: one
while use_registered_memory is on (its buckets, gradients and activations of
at least 256 KiB in registered memory), the other while it is off (torch's
allocator), --steps steps of each in turn per round, the order swapped every
round. Rank 0 prints the slowest rank's median step time over --rounds rounds,
in ms, with registered / ordinary, and how far apart the two copies'
parameters ended (the same arithmetic in another memory: 0 on 2 ranks, where
a sum of two is exact in any order; rounding where the paths sum 3 or more
ranks in different orders).
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import baton.torch

p = argparse.ArgumentParser()
p.add_argument("--width", type=int, default=2048)
p.add_argument("--depth", type=int, default=4)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--steps", type=int, default=5)
p.add_argument("--rounds", type=int, default=7)
p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
p.add_argument("--fsdp", action="store_true", help="FSDP2 (fully_shard per layer), not DDP")
args = p.parse_args()

torch.set_num_threads(args.threads)
dist.init_process_group("baton")
rank, size = dist.get_rank(), dist.get_world_size()


def mlp():
    torch.manual_seed(0)
    layers = []
    for _ in range(args.depth):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def build(registered):
    baton.torch.use_registered_memory(registered)
    if args.fsdp:
        from torch.distributed.fsdp import fully_shard
        model = mlp()
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    else:
        model = DDP(mlp(), gradient_as_bucket_view=True)
    return model, torch.optim.SGD(model.parameters(), lr=1e-3)


kinds = {"registered": build(True), "ordinary": build(False)}
gen = torch.Generator().manual_seed(1 + rank)


def step(kind, x):
    model, opt = kinds[kind]
    baton.torch.use_registered_memory(kind == "registered")
    opt.zero_grad(set_to_none=False)
    model(x).square().mean().backward()
    opt.step()


batches = [torch.randn(args.batch, args.width, generator=gen) for _ in range(args.steps)]
for kind in kinds:  # warm-up: DDP rebuilds its buckets after the first step
    for x in batches[:2]:
        step(kind, x)
times = {kind: [] for kind in kinds}
for r in range(args.rounds):
    order = list(kinds) if r % 2 == 0 else list(reversed(kinds))
    for kind in order:
        dist.barrier()
        start = time.perf_counter()
        for x in batches:
            step(kind, x)
        times[kind].append((time.perf_counter() - start) / args.steps * 1e3)

medians = torch.tensor([statistics.median(times[k]) for k in kinds], dtype=torch.float64)
dist.all_reduce(medians, op=dist.ReduceOp.MAX)
a, b = (k[0] for k in kinds.values())
# FSDP2's parameters are DTensors: their local shards. Sums in another order (the
# registered path's rank order against the rings') may round differently on 3+ ranks.
diff = max((getattr(x, "_local_tensor", x) - getattr(y, "_local_tensor", y)).abs().max().item()
           for x, y in zip(a.parameters(), b.parameters()))
stats = baton.torch.registered_memory_stats()
if rank == 0:
    grads = 4 * sum(q.numel() for q in a.parameters())
    print(f"{'FSDP2' if args.fsdp else 'DDP'}, {size} ranks, {grads / 2**20:.1f} MiB of "
          f"gradients, batch {args.batch}, {args.threads} thread(s)")
    print(f"step ms: registered {medians[0]:.2f}  ordinary {medians[1]:.2f}  "
          f"registered/ordinary {medians[0] / medians[1]:.3f}")
    print(f"parameters of the two copies differ by at most {diff:.3g}; registered blocks "
          f"{stats['blocks_in_use']} "
          f"in use, {stats['blocks_cached']} cached, {stats['reused']} of "
          f"{stats['allocations']} allocations reused")
dist.destroy_process_group()
