#!/usr/bin/env python3
"""Draws a merged Baton timeline (docs/tracing.md) as a PNG: one band per rank, with a row for
the trainer's phases and a row per thread of Baton calls, as coloured bars.

  scripts/plot_trace.py [--step K] TRACE.json OUT.png

Top panel: the whole timeline. Bottom panel: a zoom on trainer step K of rank 0 (default: the
middle step), so that the gradient allreduces can be seen overlapping backward. Without trainer
events the zoom shows the middle tenth of the run.
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.patches as mpatches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

PHASE_COLOURS = {
    "forward": "#4c72b0",
    "backward": "#dd8452",
    "finish allreduces": "#8c8c8c",
    "optimizer": "#55a868",
    "launch bucket": "#000000",
    "end of epoch": "#c7c7c7",
}
CALL_COLOURS = {"allreduce": "#c44e52", "broadcast": "#8172b3", "internal": "#937860"}
OTHER_CALL = "#da8bc3"


def rows_of(events):
    """(rank, row label) -> events; rows ordered trainer first, then Baton threads."""
    rows = {}
    thread_names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events
                    if e.get("ph") == "M" and e.get("name") == "thread_name"}
    for e in events:
        if e.get("ph") != "X" or e["name"] == "step":
            continue
        label = thread_names.get((e["pid"], e["tid"]), f"thread {e['tid']}")
        rows.setdefault((e["pid"], label), []).append(e)
    return rows


def draw(ax, rows, t0, lo, hi):
    order = sorted(rows, key=lambda k: (k[0], k[1] != "trainer", k[1]))
    ticks, labels = [], []
    for y, key in enumerate(order):
        for e in rows[key]:
            start, end = (e["ts"] - t0) / 1e3, (e["ts"] + e["dur"] - t0) / 1e3
            if end < lo or start > hi:
                continue
            colour = (PHASE_COLOURS.get(e["name"], "#cccccc") if e.get("cat") == "trainer"
                      else CALL_COLOURS.get(e["name"], OTHER_CALL))
            height = 0.3 if e["name"] == "launch bucket" else 0.8
            ax.barh(-y, max(end - start, (hi - lo) / 2000), left=start, height=height,
                    color=colour, edgecolor="white", linewidth=0.4)
        ticks.append(-y)
        rank, label = key
        labels.append(f"rank {rank}: {label.replace('Baton calls ', 'Baton ')}")
    ax.set_yticks(ticks)
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_xlim(lo, hi)
    ax.set_xlabel("ms")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step", type=int, default=-1)
    parser.add_argument("trace")
    parser.add_argument("out")
    args = parser.parse_args()
    events = json.load(open(args.trace))["traceEvents"]
    complete = [e for e in events if e.get("ph") == "X"]
    t0 = min(e["ts"] for e in complete)
    t1 = max(e["ts"] + e["dur"] for e in complete)
    rows = rows_of(events)
    steps = sorted((e for e in complete if e["name"] == "step" and e["pid"] == 0),
                   key=lambda e: e["ts"])
    if steps:
        step = steps[args.step if args.step >= 0 else len(steps) // 2]
        lo = (step["ts"] - t0) / 1e3 - 0.05 * step["dur"] / 1e3
        hi = (step["ts"] + step["dur"] - t0) / 1e3 + 0.05 * step["dur"] / 1e3
        zoom_title = f"step {step['args'].get('step', '?')} of rank 0"
    else:
        lo, hi = 0.45 * (t1 - t0) / 1e3, 0.55 * (t1 - t0) / 1e3
        zoom_title = "the middle tenth"

    fig, (whole, zoom) = plt.subplots(2, 1, figsize=(12, 2.2 + 0.55 * len(rows)))
    draw(whole, rows, t0, 0, (t1 - t0) / 1e3)
    whole.set_title("the whole timeline", fontsize=9)
    draw(zoom, rows, t0, lo, hi)
    zoom.set_title(f"zoom: {zoom_title}", fontsize=9)
    handles = [mpatches.Patch(color=c, label=n) for n, c in PHASE_COLOURS.items()]
    handles += [mpatches.Patch(color=c, label=f"Baton {n}") for n, c in CALL_COLOURS.items()]
    handles.append(mpatches.Patch(color=OTHER_CALL, label="Baton, other calls"))
    fig.legend(handles=handles, loc="upper center", ncol=5, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
