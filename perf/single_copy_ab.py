#!/usr/bin/env python3
"""Interleaved A/B of the single-copy path on ordinary buffers (docs/performance.md,
"Single-copy collectives").

Each round runs, one after the other, every configuration at every size: Baton with ordinary
buffers through the slots (BATON_CMA_COLL=0), Baton with ordinary buffers single-copy
(BATON_CMA_COLL=1 BATON_CMA_COLL_MIN_BYTES=1: forced at every size), the defaults ("default"),
Baton with registered buffers (-R 1) and,
when built, Open MPI (build/perf/peers/mpi_<coll>_perf, btl self,vader). Prints per size the
median over rounds of each configuration's bus bandwidth and time (--place: out of place or in
place), and the
ratio single-copy / slots per round, median; out of place and in place (one run gives both).

  perf/single_copy_ab.py --ranks 2 --coll all_reduce --sizes 64K,1M,16M,64M,256M --rounds 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

PLACES = ("out_of_place", "in_place")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def run(argv, env, json_path):
    if os.path.exists(json_path):
        os.unlink(json_path)
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=600, check=False)
    rows = {}
    if os.path.exists(json_path):
        with open(json_path) as f:
            for line in f:
                r = json.loads(line)
                rows[r["size"]] = r
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--coll", default="all_reduce")
    ap.add_argument("--sizes", default="64K,256K,1M,4M,16M,64M,256M")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--configs", default="slots,cma,registered,mpi")
    ap.add_argument("--iters", type=int, default=0, help="0: by size")
    args = ap.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    configs = args.configs.split(",")
    mpi_bin = os.path.join(args.build, "perf", "peers", f"mpi_{args.coll}_perf")
    if "mpi" in configs and not os.path.exists(mpi_bin):
        configs.remove("mpi")
    results = {p: {c: {s: [] for s in sizes} for c in configs} for p in PLACES}
    tmp = tempfile.mkdtemp()
    for rnd in range(args.rounds):
        for size in sizes:
            iters = args.iters or max(3, min(200, (64 << 20) // size * 5 // 4))
            flags = ["-b", str(size), "-e", str(size), "-n", str(iters), "-w", "1"]
            for c in configs:
                env = dict(os.environ, BATON_TIMEOUT="120")
                json_path = os.path.join(tmp, f"{c}.json")
                binary = os.path.join(args.build, "perf", f"{args.coll}_perf")
                extra = []
                if c == "slots":
                    env["BATON_CMA_COLL"] = "0"
                elif c == "cma":  # forced: every size, whatever the kernel's copy speed
                    env["BATON_CMA_COLL"] = "1"
                    env["BATON_CMA_COLL_MIN_BYTES"] = "1"
                elif "=" in c:  # NAME=VALUE: an experiment's variable, with the path forced
                    env["BATON_CMA_COLL"] = "1"
                    env["BATON_CMA_COLL_MIN_BYTES"] = "1"
                    for kv in c.split("+"):
                        k, v = kv.split("=", 1)
                        env[k] = v
                elif c == "default":
                    pass
                elif c == "registered":
                    extra = ["-R", "1"]
                if c == "mpi":
                    argv = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca",
                            "mpi_yield_when_idle", "1", "--mca", "btl", "self,vader", "-np",
                            str(args.ranks), mpi_bin] + flags + ["-J", json_path]
                else:
                    argv = [os.path.join(args.build, "src", "batonrun"), "-n", str(args.ranks),
                            binary] + flags + extra + ["-J", json_path]
                rows = run(argv, env, json_path)
                if size in rows:
                    for place in PLACES:
                        o = rows[size][place]
                        results[place][c][size].append((o["bus_bw"], o["time"]))
        print(f"# round {rnd + 1} done", file=sys.stderr, flush=True)
    for place in PLACES:
        print(f"\n{args.coll}, {args.ranks} ranks, {place.replace('_', ' ')}")
        res = results[place]
        both = "slots" in configs and any(c in configs for c in ("cma", "default"))
        single = "cma" if "cma" in configs else "default"
        head = "| size | " + " | ".join(f"{c} busbw (GB/s) / time (us)" for c in configs)
        if both:
            head += f" | {single} / slots time"
        print(head + " |")
        print("|" + " --- |" * (len(configs) + 1 + both))
        for size in sizes:
            cells = []
            for c in configs:
                v = res[c][size]
                if not v:
                    cells.append("-")
                    continue
                cells.append(f"{statistics.median(b for b, _ in v):.2f} / "
                             f"{statistics.median(t for _, t in v):.0f}")
            line = f"| {size >> 20 if size >= 1 << 20 else size} {'MiB' if size >= 1 << 20 else 'B'} | " + " | ".join(cells)
            if both:
                pairs = list(zip(res[single][size], res["slots"][size]))
                line += " | " + (f"{statistics.median(a[1] / b[1] for a, b in pairs):.2f}"
                                 if pairs else "-")
            print(line + " |", flush=True)


if __name__ == "__main__":
    main()
