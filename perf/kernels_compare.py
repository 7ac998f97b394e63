#!/usr/bin/env python3
"""Summarizes a perf/kernels_bench JSON run: Highway kernels against the old back ends.

  perf/kernels_compare.py kernels.json [--sizes 16384,524288,67108864] [--markdown]

For every BM_Reduce/<type>/<op> (and BM_ReduceNT/<type>/sum) it prints the median bandwidth of
each pair (old_avx2 -> avx2, old_avx512 -> avx512 and avx3_dl, portable -> sse4), the ratio
new/old, and the new best target's bandwidth as a fraction of BM_StreamAdd at the same size
(the roofline kernels_bench has always reported); for BM_ScaleCopy and BM_ScaleReduce (which had
no vector path before) each Highway target against portable. Medians come from the run's own aggregates
(--benchmark_repetitions); a run without repetitions uses the single figures.
"""
import argparse
import collections
import json
import statistics
import sys

PAIRS = [("old_avx512", "avx3_dl"), ("old_avx512", "avx512"), ("old_avx2", "avx2"),
         ("portable", "sse4")]
SCALE_PAIRS = [("portable", "avx3_dl"), ("portable", "avx512"), ("portable", "avx2"),
               ("portable", "sse4")]


def load(path):
    with open(path) as f:
        data = json.load(f)
    samples = collections.defaultdict(list)
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" or b.get("error_occurred"):
            continue
        samples[b["run_name"]].append(b["bytes_per_second"] / 1e9)
    return {name: statistics.median(v) for name, v in samples.items()}, data.get("context", {})


def split(name):
    """(bench, type, op, impl, size) of a kernel benchmark's name, else None."""
    parts = name.split("/")
    if parts[0] in ("BM_Reduce", "BM_ReduceNT") and len(parts) == 5:
        return parts[0], parts[1], parts[2], parts[3], int(parts[4])
    if parts[0] in ("BM_ScaleCopy", "BM_ScaleReduce") and len(parts) == 4:
        return parts[0], parts[1], "-", parts[2], int(parts[3])
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("json")
    parser.add_argument("--sizes", default="16384,524288,67108864")
    args = parser.parse_args()
    med, context = load(args.json)
    sizes = [int(s) for s in args.sizes.split(",")]
    stream = {s: med.get(f"BM_StreamAdd/{s}") for s in sizes}
    runs = {}
    keys = []
    for name, value in med.items():
        s = split(name)
        if s is None:
            continue
        runs[s] = value
        if s[:3] not in keys:
            keys.append(s[:3])
    impls = {s[3] for s in runs}
    reduce_pairs = [p for p in PAIRS if p[0] in impls and p[1] in impls]
    scale_pairs = [p for p in SCALE_PAIRS if p[0] in impls and p[1] in impls]
    print(f"# {context.get('host_name', '')} {context.get('num_cpus', '')} CPUs, "
          f"{context.get('mhz_per_cpu', '')} MHz; medians in GB/s (every array once per call)")
    worst = []
    for scale in (False, True):
        pairs = scale_pairs if scale else reduce_pairs
        print()
        print("| bench | type | op | bytes | " +
              " | ".join(f"{o} | {n} | ratio" for o, n in pairs) + " | best / STREAM add |")
        print("|" + "---|" * (5 + 3 * len(pairs)))
        for bench, dt, op in keys:
            if bench.startswith("BM_Scale") != scale:
                continue
            for size in sorted({s[4] for s in runs if s[:3] == (bench, dt, op)}):
                print("| " + " | ".join(row(runs, pairs, stream, worst, bench, dt, op, size)) +
                      " |")
    worst.sort()
    print()
    print("lowest ratios: " + "; ".join(f"{r:.3f} {w}" for r, w in worst[:12]))
    for s in sizes:
        if stream.get(s):
            print(f"STREAM add {s}: {stream[s]:.2f} GB/s, memcpy {med.get(f'BM_Memcpy/{s}', 0):.2f}")
    return 0


def row(runs, pairs, stream, worst, bench, dt, op, size):
    """One table row: each pair's old, new and ratio, then the best new / STREAM add."""
    cells = [bench.replace("BM_", ""), dt, op, str(size)]
    best = None
    for old, new in pairs:
        o = runs.get((bench, dt, op, old, size))
        n = runs.get((bench, dt, op, new, size))
        if o is None or n is None:
            cells += ["", "", ""]
            continue
        ratio = n / o
        worst.append((ratio, f"{bench}/{dt}/{op}/{size} {new} vs {old}"))
        cells += [f"{o:.2f}", f"{n:.2f}", f"{ratio:.2f}"]
        best = n if best is None else max(best, n)
    s = stream.get(size)
    cells.append(f"{best / s:.2f}" if best and s else "")
    return cells


if __name__ == "__main__":
    sys.exit(main())
