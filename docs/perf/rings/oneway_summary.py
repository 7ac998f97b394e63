"""Summarizes docs/perf/rings/oneway.sh output: per mode (a round's latency floor at its start:
slow above 0.12 us; rounds whose mode changed by their end are dropped), rank count and size, the
median time of each library (4 ranks: the automatic choice, us per call; 2 ranks: all_reduce_perf's
out-of-place time) and the median per-round ratio of each to the first.

  oneway_summary.py FILE NAME,NAME...
"""
import collections
import statistics as st
import sys


def mode(floor):
    return "slow" if floor > 0.12 else "fast"


rounds, current = [], []
for line in open(sys.argv[1]):
    f = line.split()
    if not f:
        continue
    if f[0].startswith("end-floor="):
        if current and mode(current[0][0]) == mode(float(f[0][len("end-floor="):])):
            rounds.append(current)
        current = []
        continue
    floor, lib = float(f[0][len("floor="):]), f[1][len("lib="):]
    if f[2] == "nr=2":
        for pair in f[3:]:
            size, us = pair.split(":")
            current.append((floor, lib, 2, int(size), float(us)))
    elif len(f) >= 6:
        current.append((floor, lib, 4, int(f[2]), float(f[3])))

libs = sys.argv[2].split(",")
times, ratios = collections.defaultdict(list), collections.defaultdict(list)
for r in rounds:
    m, by = mode(r[0][0]), {}
    for _, lib, nr, size, us in r:
        by[(lib, nr, size)] = us
        times[(m, nr, size, lib)].append(us)
    for (lib, nr, size), us in by.items():
        if lib != libs[0] and (libs[0], nr, size) in by:
            ratios[(m, nr, size, lib)].append(us / by[(libs[0], nr, size)])
print("| mode | ranks | size | rounds | " + " | ".join(libs) + " | " +
      " | ".join(f"{l} / {libs[0]}" for l in libs[1:]) + " |")
print("|" + " --- |" * (4 + 2 * len(libs) - 1))
for key in sorted({k[:3] for k in times}):
    cells = [f"{st.median(times[key + (l,)]):.1f}" if times[key + (l,)] else "-" for l in libs]
    rat = [f"{st.median(ratios[key + (l,)]):.2f}" if ratios[key + (l,)] else "-" for l in libs[1:]]
    print(f"| {key[0]} | {key[1]} | {key[2]} | {len(times[key + (libs[0],)])} | " +
          " | ".join(cells + rat) + " |")
