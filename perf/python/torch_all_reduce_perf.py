"""all_reduce_perf through torch.distributed: the nccl-tests sweep of perf/driver for a torch
backend, so that perf/compare.py can put PyTorch's gloo, the "baton" backend and DeepSpeed's
shared-memory allreduce on the same table and plot as the C libraries.

    RANK=.. WORLD_SIZE=.. MASTER_ADDR=.. MASTER_PORT=.. python3 torch_all_reduce_perf.py \\
        --backend gloo|baton|deepspeed [-b 8] [-e 64M] [-f 2] [-n 20] [-w 2] [-c 1] [-J out.jsonl]

Each rank is one process in torchrun's environment (tests/python/launch.py or perf/compare.py
start them). Per size, as perf/driver does: warm-up calls, then the timed calls of the
"out-of-place" and the in-place pass, each between barriers, the time per call averaged over the
ranks, and with -c 1 a check of one call's result against the sum computed here from every
rank's input (small integers in float32: exact in any order). torch.distributed's all_reduce and
DeepSpeed's inference_all_reduce work in place only, so out of place each call first copies the
input into the output, as a program that keeps its input does (and as perf/peers does for
Gloo's in-place algorithms). float32 and sum only: what perf/compare.py sweeps.

gloo is torch's own (torch.distributed's "gloo", the default group); baton is a
new_group(backend="baton") (PYTHONPATH must reach build/python); baton-direct is that group's
blocking allreduce without torch.distributed's dispatch (baton.torch.all_reduce), as DeepSpeed
calls its op; deepspeed is
deepspeed.comm.inference_all_reduce (its SHM op, built with ninja on first use; LOCAL_SIZE is set
to the world size as its launcher would).
"""

import argparse
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from sweep_util import parse_size  # noqa: E402  perf/'s size syntax (8, 64K, 16M)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=["gloo", "baton", "baton-direct", "deepspeed"],
                   required=True)
    p.add_argument("-b", "--minbytes", type=parse_size, default=8)
    p.add_argument("-e", "--maxbytes", type=parse_size, default=32 << 20)
    p.add_argument("-f", "--stepfactor", type=int, default=2)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup_iters", type=int, default=2)
    p.add_argument("-c", "--check", type=int, default=1)
    p.add_argument("-d", "--datatype", default="float")
    p.add_argument("-o", "--op", default="sum")
    p.add_argument("-J", "--output_file", default=None, help="nccl-tests JSON lines (rank 0)")
    a = p.parse_args()
    if a.datatype != "float" or a.op != "sum":
        p.error("only -d float -o sum (what perf/compare.py sweeps)")
    if a.minbytes < 4 or a.maxbytes < a.minbytes or a.stepfactor < 2 or a.iters < 1:
        p.error("need 4 <= -b <= -e, -f >= 2 and -n >= 1")
    return a


def make_call(backend):
    """(label, call(tensor)) of one backend's blocking in-place float sum allreduce."""
    if backend == "gloo":
        return "torch gloo", lambda t: dist.all_reduce(t)
    if backend in ("baton", "baton-direct"):
        import baton.torch  # registers the backend
        group = dist.new_group(backend="baton")
        if backend == "baton-direct":
            return "baton.torch direct", lambda t: baton.torch.all_reduce(t, group=group)
        return "torch baton", lambda t: dist.all_reduce(t, group=group)
    os.environ.setdefault("LOCAL_SIZE", os.environ.get("WORLD_SIZE", "1"))
    import deepspeed
    import deepspeed.comm.comm as ds_comm
    deepspeed.init_distributed(dist_backend="gloo")  # takes the default group made above
    if ds_comm.cdb.shm_comm_op is None:
        raise RuntimeError("DeepSpeed's shared-memory allreduce op did not build")
    return "DeepSpeed SHM", lambda t: ds_comm.inference_all_reduce(t)


def period(rank, seed):
    """One period of rank `rank`'s input: small integers, different per rank, position and
    seed, so that their float sums are exact in any order."""
    return (torch.arange(17) * 7 + rank * 13 + seed * 31) % 17


def tiled(values, n):
    """`values` repeated to n float32 elements (element i is values[i % len(values)])."""
    return values.to(torch.float32).repeat(-(-n // len(values)))[:n]


def fill(t, rank, seed):
    t.copy_(tiled(period(rank, seed), t.numel()))


def expected(n, nranks, seed):
    return tiled(sum(period(r, seed) for r in range(nranks)), n)


def mean_over_ranks(value):
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t)
    return t.item() / dist.get_world_size()


def sum_over_ranks(value):
    t = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(t)
    return int(t.item())


def timed_pass(call, send, recv, iters, check, rank, nranks, seed):
    """(us per call averaged over the ranks, wrong elements on all ranks or None); out of
    place when send is not None."""
    def one():
        if send is not None:
            recv.copy_(send)
        call(recv)

    one()  # one untimed call, then a barrier, so that every rank starts timing together
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        one()
    us = mean_over_ranks((time.perf_counter() - start) / iters * 1e6)
    if not check:
        return us, None
    fill(recv if send is None else send, rank, seed)
    one()
    wrong = int((recv != expected(recv.numel(), nranks, seed)).sum().item())
    return us, sum_over_ranks(wrong)


def main():
    a = parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank, nranks = dist.get_rank(), dist.get_world_size()
    label, call = make_call(a.backend)
    out = open(a.output_file, "w", encoding="utf-8") if a.output_file and rank == 0 else None
    if rank == 0:
        print(f"# {label}: all_reduce float sum through torch.distributed, {nranks} ranks, "
              f"torch {torch.__version__}; out of place: a copy, then the in-place call")
        print(f"#{'size':>11} {'count':>12} {'type':>6} {'redop':>6} {'root':>6}"
              f" {'time':>8} {'algbw':>7} {'busbw':>7} {'#wrong':>6}"
              f" {'time':>8} {'algbw':>7} {'busbw':>7} {'#wrong':>6}", flush=True)
    size, seed = a.minbytes, 0
    while size <= a.maxbytes:
        count = size // 4
        send, recv = torch.empty(count), torch.empty(count)
        fill(send, rank, 0)
        for _ in range(a.warmup_iters):
            recv.copy_(send)
            call(recv)
        record = {"collective": "AllReduce", "size": count * 4, "count": count, "type": "float",
                  "redop": "sum", "root": -1}
        columns = []
        for name in ("out_of_place", "in_place"):
            seed += 1
            fill(send, rank, seed)
            us, wrong = timed_pass(call, send if name == "out_of_place" else None, recv, a.iters,
                                   a.check, rank, nranks, seed)
            alg_bw = count * 4 / us / 1e3
            bus_bw = alg_bw * 2 * (nranks - 1) / nranks
            record[name] = {"time": us, "alg_bw": alg_bw, "bus_bw": bus_bw, "nwrong": wrong}
            columns.append(f" {us:8.2f} {alg_bw:7.2f} {bus_bw:7.2f} "
                           f"{'N/A' if wrong is None else wrong:>6}")
        record["actual_iterations"] = a.iters
        if rank == 0:
            print(f"{count * 4:>12} {count:>12} {'float':>6} {'sum':>6} {-1:>6}" +
                  "".join(columns), flush=True)
            if out:
                out.write(json.dumps(record) + "\n")
                out.flush()
        size *= a.stepfactor
    dist.barrier()
    if out:
        out.close()
    if a.backend == "deepspeed":
        # DeepSpeed's op leaves a thread that std::terminate()s the process as it exits (1 of 3
        # runs of 4 ranks here, after every row was written): the results are out, so leave.
        sys.stdout.flush()
        os._exit(0)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
