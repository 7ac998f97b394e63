"""Data-parallel training of a small MLP on Fashion-MNIST with DDP over Baton.

    batonrun -n 4 .venv/bin/python examples/python/ddp_fashion_mnist.py
    ... --backend gloo                      # the same job on torch's gloo backend
    torchrun --nproc-per-node 4 examples/python/ddp_fashion_mnist.py   # or mpirun -np 4

PYTHONPATH=build/python finds the baton package. Ranks come from torchrun's
RANK/WORLD_SIZE, batonrun's BATON_RANK/BATON_WORLD_SIZE or Open MPI's
OMPI_COMM_WORLD_*; the process group's store is a TCPStore at
MASTER_ADDR:MASTER_PORT (default 127.0.0.1:29512, one host). The data is
Debian's dataset-fashion-mnist (gzip IDX files); --synthetic N trains on N
random examples instead (tests/python/example_test.py, where it is absent).
"""

import argparse
import datetime
import gzip
import os
import statistics
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def launcher_env():
    for rank_var, size_var in [("RANK", "WORLD_SIZE"), ("BATON_RANK", "BATON_WORLD_SIZE"),
                               ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                               ("SLURM_PROCID", "SLURM_NTASKS")]:
        if rank_var in os.environ and size_var in os.environ:
            return int(os.environ[rank_var]), int(os.environ[size_var])
    return 0, 1


def read_idx(path, magic):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    got = int.from_bytes(raw[0:4], "big")
    if got != magic:
        raise SystemExit(f"{path}: magic {got:#x}, expected {magic:#x}")
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    try:
        images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"), 0x803)
        labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"), 0x801)
    except FileNotFoundError as e:
        raise SystemExit(f"{e} (install dataset-fashion-mnist or pass --data DIR)") from e
    x = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / 255.0)
    return (x - 0.2860) / 0.3530, torch.from_numpy(labels.astype(np.int64))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="baton", choices=["baton", "gloo"])
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: all)")
    p.add_argument("--batch", type=int, default=64, help="examples per rank per step")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--ordinary-memory", action="store_true",
                   help="baton: leave tensors in torch's allocator (default: registered memory)")
    p.add_argument("--synthetic", type=int, default=0, metavar="N",
                   help="N random training examples (and N/4 test ones) instead of the dataset")
    args = p.parse_args()

    rank, size = launcher_env()
    if args.backend == "baton":
        import baton.torch  # registers the backend
        if not args.ordinary_memory:
            # Before the model: DDP's gradient buckets land in memory the ranks of a
            # host read in place (docs/python.md, "Registered memory for every tensor").
            baton.torch.use_registered_memory()
    torch.set_num_threads(1)  # the ranks share the cores
    store = dist.TCPStore(os.environ.get("MASTER_ADDR", "127.0.0.1"),
                          int(os.environ.get("MASTER_PORT", "29512")), size, rank == 0,
                          timeout=datetime.timedelta(seconds=60))
    dist.init_process_group(args.backend, store=store, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=60))

    if args.synthetic:
        g = torch.Generator().manual_seed(args.seed + 1)  # the same data on every rank
        x_train, y_train = torch.randn(args.synthetic, 784, generator=g), \
            torch.randint(0, 10, (args.synthetic,), generator=g)
        x_test, y_test = torch.randn(args.synthetic // 4, 784, generator=g), \
            torch.randint(0, 10, (args.synthetic // 4,), generator=g)
    else:
        x_train, y_train = load(args.data, "train")
        x_test, y_test = load(args.data, "test")
    torch.manual_seed(args.seed)  # the same initial model on every rank (DDP broadcasts it too)
    model = DDP(nn.Sequential(nn.Linear(784, args.hidden), nn.ReLU(),
                              nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                              nn.Linear(args.hidden, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    gen = torch.Generator().manual_seed(args.seed)
    step_times = []
    step = 0
    for epoch in range(args.epochs):
        order = torch.randperm(len(x_train), generator=gen)  # same order everywhere
        per_step = args.batch * size
        for start in range(0, len(order) - per_step + 1, per_step):
            idx = order[start + rank * args.batch:start + (rank + 1) * args.batch]
            t0 = time.perf_counter()
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x_train[idx]), y_train[idx])
            loss.backward()  # DDP's bucketed allreduce over the backend
            opt.step()
            step_times.append(time.perf_counter() - t0)
            step += 1
            if rank == 0 and step % 100 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
            if args.max_steps and step >= args.max_steps:
                break
        if args.max_steps and step >= args.max_steps:
            break

    with torch.no_grad():
        correct = (model.module(x_test).argmax(1) == y_test).sum().item()
    flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
    digest = torch.tensor([flat.double().sum().item(), flat.double().abs().sum().item()])
    replicas = [torch.empty_like(digest) for _ in range(size)]
    dist.all_gather(replicas, digest)
    if rank == 0:
        steady = step_times[len(step_times) // 10:] or step_times
        print(f"backend {args.backend}, {size} ranks, {step} steps: median step "
              f"{statistics.median(steady) * 1e3:.2f} ms, test accuracy {correct / len(y_test):.4f}, "
              f"replicas {'agree' if all(torch.equal(r, replicas[0]) for r in replicas) else 'DIFFER'}")
        # Compared between backends by tests/python/example_test.py.
        print(f"final loss {loss.item():.9g} parameters {digest[0].item():.9g} "
              f"{digest[1].item():.9g}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
