#!/usr/bin/env python3
"""Interleaved A/B of Baton builds or settings under the same perf binary, against the memory
roofline measured in the same run (docs/performance.md, "Ordinary buffers: waves, stages and
streaming stores").

Each round runs every configuration at every size, one launch each, then (with --stream)
build/perf/stream_all_cores. A configuration is NAME or NAME:SPEC, SPEC a comma-separated list
of ENV=VALUE, `lib=DIR` (a directory holding another build's libbaton.so.0, put first on
LD_LIBRARY_PATH; the binaries find libbaton through their RUNPATH, which that overrides),
`reg` (registered buffers, -R 1) and `queued` (calls queued on a host stream, -y 0). Prints
per size and configuration the median time per call over the rounds (out of place and in
place), its ratio to the first configuration, and with --stream the median busbw as a fraction
of the roofline BW (p-1)/p^2.

  perf/lib_ab.py --ranks 2 --sizes 16M,64M,256M --rounds 5 --stream \\
      old:lib=/tmp/base/build/src new reg:reg

The rounds take the configurations in turns forwards and backwards (what runs right after the
STREAM measurement or another build is not always the same one). With --hosts N the ranks are N
simulated hosts of one rank (scripts/netns.sh, links shaped to --rate Mbit/s, rank i on core i
mod cores, as perf/compare.py runs them). Each row also says in how many rounds the first
configuration was no slower than that one out of place.
"""
import argparse
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import machine_probes  # noqa: E402
from sweep_util import SimulatedHosts  # noqa: E402


def parse_config(text):
    name, _, spec = text.partition(":")
    env, flags = {}, []
    for item in filter(None, spec.split(",")):
        if item == "reg":
            flags += ["-R", "1"]
        elif item == "queued":
            flags += ["-y", "0"]
        elif item.startswith("lib="):
            env["LD_LIBRARY_PATH"] = item[4:]
        elif "=" in item:
            key, value = item.split("=", 1)
            env[key] = value
        else:
            sys.exit(f"lib_ab.py: cannot read {item!r} in {text!r}")
    return name, env, flags


def launch(args, net, env, perf_argv):
    """Rank 0's output of one run: one batonrun, or one per simulated host (--hosts)."""
    batonrun = os.path.join(args.build, "src", "batonrun")
    if not args.hosts:
        argv = [batonrun, "-n", str(args.ranks)]
        if args.ranks <= os.cpu_count():
            argv += ["--bind-to", "core"]
        return subprocess.run(argv + perf_argv, env=env, capture_output=True, text=True,
                              timeout=900).stdout
    # As perf/compare.py runs Baton there (--pin): host i on core i mod cores.
    shaped = dict(env, BATON_NET_MBPS=str(args.rate))
    shaped.setdefault("BATON_BIND", "auto")
    ranks = net.baton_ranks(batonrun, perf_argv, shaped, net.next_port(),
                            pin=lambda h: ["taskset", "-c", str(h % os.cpu_count())])
    procs = [subprocess.Popen(argv, env=e, stdout=subprocess.PIPE if h == 0 else subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, text=True)
             for h, (argv, e) in enumerate(ranks)]
    out = procs[0].communicate(timeout=900)[0]
    for proc in procs[1:]:
        proc.wait(timeout=900)
    return out


def run_sizes(args, net, env, flags, size):
    perf_argv = [os.path.join(args.build, "perf", f"{args.coll}_perf"), "-b", size, "-e", size,
                 "-n", str(args.iters), "-w", "3", "-y", "1"] + flags
    out = launch(args, net, env, perf_argv)
    for line in out.splitlines():
        f = line.split()
        if len(f) > 12 and f[0].isdigit():
            if f[8] != "0" or f[12] != "0":
                print(f"WRONG RESULTS: {' '.join(perf_argv)}: {line}", file=sys.stderr)
            return float(f[5]), float(f[7]), float(f[9]), float(f[11])
    print(f"no result from {' '.join(perf_argv)}", file=sys.stderr)
    return None


def stream_bw(args):
    return machine_probes.stream_bandwidth(args.build, runs=1)[0]


def latency_floor(args):
    """The VM's mode: one line's exchange between two cores, us (about 0.04 in its fast mode,
    0.2 in its slow one; docs/performance.md)."""
    return machine_probes.latency_floor(args.build, 2, 200000, 3)[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--coll", default="all_reduce")
    ap.add_argument("--sizes", default="16M,64M,256M")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--stream", action="store_true",
                    help="measure the roofline, and the latency floor (the VM's mode), every round")
    ap.add_argument("--hosts", type=int, default=0,
                    help="simulated hosts of one rank each in network namespaces (root)")
    ap.add_argument("--rate", type=int, default=10000, help="their links' rate, Mbit/s")
    ap.add_argument("configs", nargs="+")
    args = ap.parse_args()
    configs = [parse_config(c) for c in args.configs]
    sizes = args.sizes.split(",")
    results, streams, floors = {}, [], []
    net = SimulatedHosts("ab")
    if args.hosts:
        net.netns_up(args.hosts, f"{args.rate}mbit")
    try:
        for rnd in range(args.rounds):
            if args.stream:
                floors.append(latency_floor(args))
            for name, extra, flags in (configs if rnd % 2 == 0 else configs[::-1]):
                env = dict(os.environ)
                env.update(extra)
                for size in sizes:
                    r = run_sizes(args, net, env, flags, size)
                    # None keeps the rounds aligned for the count of rounds won.
                    results.setdefault((name, size), []).append(r)
            if args.stream:
                bw = stream_bw(args)
                if bw is not None:
                    streams.append(bw)
        if args.stream:
            floors.append(latency_floor(args))
    finally:
        net.netns_down()
    p = args.hosts or args.ranks
    roof = statistics.median(streams) * (p - 1) / (p * p) if streams else None
    if roof:
        print(f"STREAM add, all cores: median of the rounds' best {statistics.median(streams):.1f} "
              f"GB/s (rounds {min(streams):.1f}-{max(streams):.1f}); roofline {roof:.2f} GB/s")
    if floors:
        print("latency floor (shm_latency_floor 2, us) as each round began, and after the last: "
              + " ".join("-" if f is None else f"{f:.3f}" for f in floors))
    print("| size | config | out of place us | ratio | in place us | ratio | first no slower, out of place |"
          + (" oop busbw / roofline | in place busbw / roofline |" if roof else ""))
    print("| --- " * (7 + (2 if roof else 0)) + "|")
    for size in sizes:
        base, first = None, results.get((configs[0][0], size), [])
        for name, _, _ in configs:
            v = [x for x in results.get((name, size), []) if x is not None]
            if not v:
                continue
            oop = statistics.median(x[0] for x in v)
            inp = statistics.median(x[2] for x in v)
            base = base or (oop, inp)
            pairs = [(a, b) for a, b in zip(first, results[(name, size)])
                     if a is not None and b is not None]
            won = sum(a[0] <= b[0] for a, b in pairs)
            row = (f"| {size} | {name} | {oop:.4g} | {oop / base[0]:.2f} | {inp:.4g} | "
                   f"{inp / base[1]:.2f} | {won} of {len(pairs)} |")
            if roof:
                row += (f" {statistics.median(x[1] for x in v) / roof:.2f} |"
                        f" {statistics.median(x[3] for x in v) / roof:.2f} |")
            print(row)


if __name__ == "__main__":
    main()
