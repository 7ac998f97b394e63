#!/usr/bin/env python3
"""Plot nccl-tests JSON lines (perf binaries' -J output) as busbw and latency vs size.

  perf/plot.py [--label NAME]... [--roofline GBPS] [--roofline-label TEXT]
            [--title TEXT] [--inplace] -o OUT FILE.jsonl [FILE.jsonl ...]

Writes OUT.png and OUT.svg: two log-log panels, bus bandwidth (GB/s) and time (us) against the
message size, one line per input file (a library or algorithm). A line's label is the matching
--label (given once per file, in order), else the "label" field of the file's records (perf/compare.py
writes one), else the file name. With several records per size in one file (several types, ops or
roots), the plot shows the first. --roofline draws the physical limit as a horizontal line on
the bandwidth panel. Out-of-place results are plotted unless --inplace.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.ticker import FuncFormatter  # noqa: E402


def human_size(value, _pos=None):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= scale:
            return f"{value / scale:g} {unit}"
    return f"{value:g} B"


def load(path, inplace):
    """(label from the file or None, sorted [(size, busbw, time_us)]) from one JSON lines file."""
    label = None
    points = {}
    key = "in_place" if inplace else "out_of_place"
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
                result = record[key]
                size = int(record["size"])
                busbw = float(result["bus_bw"])
                time_us = float(result.get("time", result.get("cpu_time")))
            except (ValueError, KeyError, TypeError) as e:
                raise SystemExit(f"{path}:{number}: not an nccl-tests JSON record ({e})")
            label = label or record.get("label")
            if size > 0:
                points.setdefault(size, (size, busbw, time_us))
    if not points:
        raise SystemExit(f"{path}: no records with a size above 0")
    return label, [points[s] for s in sorted(points)]


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", help="JSON lines files (-J output)")
    parser.add_argument("-o", "--out", required=True, help="output path without extension")
    parser.add_argument("--label", action="append", default=[],
                        help="label of the next file's line (repeat, in file order)")
    parser.add_argument("--roofline", type=float, help="physical limit in GB/s")
    parser.add_argument("--roofline-label", default="roofline", help="legend of the roofline")
    parser.add_argument("--title", default="", help="figure title")
    parser.add_argument("--inplace", action="store_true", help="plot in-place results")
    args = parser.parse_args(argv)
    if len(args.label) > len(args.files):
        parser.error(f"{len(args.label)} labels for {len(args.files)} files")

    # One legend under both plots: with ten libraries a legend inside a plot hides its lines.
    rows = -(-(len(args.files) + bool(args.roofline)) // 3)
    legend_in = 0.28 * rows + 0.2
    fig, (bw_ax, lat_ax) = plt.subplots(1, 2, figsize=(12, 4.8 + legend_in))
    for i, path in enumerate(args.files):
        file_label, points = load(path, args.inplace)
        label = (args.label[i] if i < len(args.label) else
                 file_label or os.path.splitext(os.path.basename(path))[0])
        sizes = [p[0] for p in points]
        bw_ax.plot(sizes, [max(p[1], 1e-6) for p in points], marker="o", label=label)
        lat_ax.plot(sizes, [p[2] for p in points], marker="o", label=label)
    if args.roofline:
        bw_ax.axhline(args.roofline, color="black", linestyle="--",
                      label=f"{args.roofline_label} ({args.roofline:.3g} GB/s)")
    for ax, ylabel in ((bw_ax, "bus bandwidth (GB/s)"), (lat_ax, "time per call (us)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(human_size))
        ax.set_xlabel("message size")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.tick_params(axis="x", labelrotation=45)
    fig.legend(*bw_ax.get_legend_handles_labels(), loc="lower center", ncol=3,
               fontsize="small", frameon=False)
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout(rect=(0, legend_in / (4.8 + legend_in), 1, 1))
    out_dir = os.path.dirname(args.out)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    for ext in ("png", "svg"):
        fig.savefig(f"{args.out}.{ext}", dpi=110)
    print(f"wrote {args.out}.png and {args.out}.svg")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
