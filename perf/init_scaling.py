#!/usr/bin/env python3
"""Communicator creation time against the number of ranks, beside Open MPI.

Runs build/perf/init_scaling (fork N ranks: init + one allreduce + destroy)
on shared memory and on TCP, and `mpirun` of build/perf/peers/mpi_init_scaling
(Open MPI over TCP: launch, MPI_Init, one allreduce, MPI_Finalize) for the
same sizes. Runs are interleaved (every size and variant once per round) so
that a noisy machine spreads its noise evenly; medians are printed.

  perf/init_scaling.py --sizes 8,16,32,64,128 --rounds 5 [--build build]
  perf/init_scaling.py --variants shm,tcp --before ../before/build   # before/after

With --before, every Baton variant also runs from that build (another
checkout's, e.g. main's), interleaved with this one's as "VARIANT-before".

Raises the soft RLIMIT_NOFILE to the hard limit: every rank holds sockets.
"""
import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import time


def run_baton(build, n, transport, timeout):
    env = dict(os.environ)
    env["BATON_TRANSPORT"] = transport
    out = subprocess.run([os.path.join(build, "perf", "init_scaling"), "-n", str(n)],
                         env=env, capture_output=True, text=True, timeout=timeout)
    m = re.search(r"wall_s=([\d.]+) init_s=([\d.]+) allreduce_s=([\d.]+).*ok=(\d)", out.stdout)
    if out.returncode != 0 or not m or m.group(4) != "1":
        raise RuntimeError(f"baton {transport} n={n} failed:\n{out.stdout}{out.stderr[-2000:]}")
    return float(m.group(1)), float(m.group(2))


def run_mpi(build, n, timeout):
    cmd = ["mpirun", "--oversubscribe", "-np", str(n), "--mca", "btl", "tcp,self"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd.append(os.path.join(build, "perf", "peers", "mpi_init_scaling"))
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - t0
    if out.returncode != 0:
        raise RuntimeError(f"mpirun n={n} failed:\n{out.stdout}{out.stderr[-2000:]}")
    return wall, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--sizes", default="8,16,32,64,128")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--variants", default="shm,tcp,mpi")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--before", help="another build to compare with (its init_scaling)")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    sizes = [int(s) for s in args.sizes.split(",")]
    variants = args.variants.split(",")
    if "mpi" in variants and (shutil.which("mpirun") is None or not os.path.exists(
            os.path.join(args.build, "perf", "peers", "mpi_init_scaling"))):
        print("no mpirun or mpi_init_scaling: skipping Open MPI")
        variants.remove("mpi")
    if args.before:
        variants = [w for v in variants
                    for w in ([v] if v == "mpi" else [v + "-before", v])]
    walls = {(v, n): [] for v in variants for n in sizes}
    inits = {(v, n): [] for v in variants for n in sizes}
    for r in range(args.rounds):
        for n in sizes:
            for v in variants:
                before = v.endswith("-before")
                wall, init = (run_mpi(args.build, n, args.timeout) if v == "mpi" else
                              run_baton(args.before if before else args.build, n,
                                        v.removesuffix("-before"), args.timeout))
                walls[(v, n)].append(wall)
                if init is not None:
                    inits[(v, n)].append(init)
                print(f"round {r} {v} n={n}: wall {wall:.3f} s"
                      + (f", slowest init {init:.3f} s" if init is not None else ""), flush=True)
    print(f"\nmedians of {args.rounds} rounds (s): job wall time [slowest rank's init]")
    print("ranks " + "".join(f"{v:>20}" for v in variants))
    for n in sizes:
        cells = []
        for v in variants:
            cell = f"{statistics.median(walls[(v, n)]):.3f}"
            if inits[(v, n)]:
                cell += f" [{statistics.median(inits[(v, n)]):.3f}]"
            cells.append(f"{cell:>20}")
        print(f"{n:>5} " + "".join(cells))


if __name__ == "__main__":
    main()
