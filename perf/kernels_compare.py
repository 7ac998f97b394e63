#!/usr/bin/env python3
"""Summarizes a perf/kernels_bench JSON run: Highway kernels against the old back ends.

  perf/kernels_compare.py kernels.json [--sizes 16384,524288,67108864] [--condensed]

For every BM_Reduce/<type>/<op> (and BM_ReduceNT/<type>/sum) it prints the median bandwidth of
each pair (old_avx2 -> avx2, old_avx512 -> avx512 and avx3_dl, portable -> sse4), the ratio
new/old, and the new best target's bandwidth as a fraction of BM_StreamAdd at the same size
(the roofline kernels_bench has always reported); for BM_ScaleCopy and BM_ScaleReduce (which had
no vector path before) each Highway target against portable. Medians come from the run's own aggregates
(--benchmark_repetitions); a run without repetitions uses the single figures. --condensed prints
one row per datatype and op instead: the ratios at each size, and the best target's bandwidth
and fraction of STREAM add (the table of docs/design.md).
"""
import argparse
import collections
import json
import statistics
import sys

BENCHES = ["BM_Reduce", "BM_ReduceNT", "BM_ScaleCopy", "BM_ScaleReduce"]
TYPES = ["float", "double", "half", "bfloat16", "f8e4m3", "f8e5m2", "int8", "uint8", "int32",
         "uint32", "int64", "uint64"]
OPS = ["sum", "prod", "max", "min", "avg", "-"]
PAIRS = [("old_avx512", "avx3_dl"), ("old_avx512", "avx512"), ("old_avx2", "avx2"),
         ("portable", "sse4")]
SCALE_PAIRS = [("portable", "avx3_dl"), ("portable", "avx512"), ("portable", "avx2"),
               ("portable", "sse4")]


def order(key):
    """Sort key of a (bench, type, op): the order kernels_bench registers them in."""
    bench, dt, op = key
    return (BENCHES.index(bench) if bench in BENCHES else 99,
            TYPES.index(dt) if dt in TYPES else 99, OPS.index(op) if op in OPS else 99)


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
    parser.add_argument("--condensed", action="store_true")
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
    keys.sort(key=order)
    impls = {s[3] for s in runs}
    reduce_pairs = [p for p in PAIRS if p[0] in impls and p[1] in impls]
    scale_pairs = [p for p in SCALE_PAIRS if p[0] in impls and p[1] in impls]
    if args.condensed:
        condensed(runs, keys, stream, sizes, reduce_pairs, scale_pairs)
        return 0
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


def condensed(runs, keys, stream, sizes, reduce_pairs, scale_pairs):
    """One row per (bench, type, op): each pair's ratio at every size, then the best new
    target's GB/s and fraction of STREAM add at every size."""
    def label(size):
        return f"{size >> 20}M" if size >= 1 << 20 else f"{size >> 10}K"

    for scale in (False, True):
        pairs = scale_pairs if scale else reduce_pairs
        head = ["bench", "type", "op"]
        for old, new in pairs:
            head.append(f"{new} / {old} ({', '.join(label(s) for s in sizes)})")
        head.append(f"best GB/s ({', '.join(label(s) for s in sizes)})")
        head.append(f"of STREAM add ({', '.join(label(s) for s in sizes)})")
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for bench, dt, op in keys:
            if bench.startswith("BM_Scale") != scale:
                continue
            bench_sizes = [s for s in sizes if any(k[:3] == (bench, dt, op) and k[4] == s
                                                   for k in runs)]
            if not bench_sizes:
                continue
            cells = [bench.replace("BM_", ""), dt, op]
            for old, new in pairs:
                ratios = []
                for size in sizes:
                    o = runs.get((bench, dt, op, old, size))
                    n = runs.get((bench, dt, op, new, size))
                    ratios.append(f"{n / o:.2f}" if o and n else "-")
                cells.append(" ".join(ratios))
            best = [max((runs.get((bench, dt, op, new, size)) or 0) for _, new in pairs)
                    for size in sizes]
            cells.append(" ".join(f"{b:.1f}" if b else "-" for b in best))
            cells.append(" ".join(f"{b / stream[s]:.2f}" if b and stream.get(s) else "-"
                                  for b, s in zip(best, sizes)))
            print("| " + " | ".join(cells) + " |")
        print()


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
