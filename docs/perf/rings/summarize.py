"""Summarizes docs/perf/rings/ab.sh output: per rank count, mode (each round labelled by the
latency floor measured at its start: fast < 0.1 us, else slow) and size, the median time of the
reference configuration and the median per-round ratio of every other configuration to it.

  summarize.py FILE [REFERENCE]   (REFERENCE: a configuration as ab.sh printed it; default: the
                                   previous library, LD_LIBRARY_PATH=/tmp/base/build/src)
"""
import collections
import re
import statistics as st
import sys

path = sys.argv[1] if len(sys.argv) > 1 else "docs/perf/rings/ab-2026-11-27.txt"
reference = sys.argv[2] if len(sys.argv) > 2 else "LD_LIBRARY_PATH=/tmp/base/build/src"
rounds = collections.defaultdict(dict)  # (nr, round, fast, size) -> cfg -> time
configs = []
lines = open(path).read().splitlines()
end_fast = {}  # round -> the mode at its end, where ab.sh measured it
for line in lines:
    m = re.match(r"round (\d+) end-floor ([\d.]+)", line.strip())
    if m:
        end_fast[m.group(1)] = float(m.group(2)) < 0.1
for line in lines:
    m = re.match(r"round (\d+) floor ([\d.]+) nr (\d+) cfg (\S+) (.*)", line.strip())
    if not m:
        continue
    rnd, floor, nr, cfg, rest = m.groups()
    if end_fast.get(rnd, float(floor) < 0.1) != (float(floor) < 0.1):
        continue  # the mode changed during the round
    if cfg not in configs:
        configs.append(cfg)
    for kv in rest.split():
        size, t = kv.split(":")
        rounds[(nr, rnd, float(floor) < 0.1, int(size))][cfg] = float(t)
others = [c for c in configs if c != reference]
agg = collections.defaultdict(lambda: collections.defaultdict(list))
for (nr, rnd, fast, size), times in rounds.items():
    if reference not in times or any(c not in times for c in others):
        continue  # an unfinished round
    agg[(nr, fast, size)]["ref"].append(times[reference])
    for c in others:
        agg[(nr, fast, size)][c].append(times[c] / times[reference])
print(f"reference: {reference}; ratios: " + ", ".join(others))
for key in sorted(agg):
    nr, fast, size = key
    a = agg[key]
    ratios = "  ".join(f"{st.median(a[c]):.2f}" for c in others)
    print(f"ranks {nr} {'fast' if fast else 'slow'} {size:>9}: rounds {len(a['ref']):2d} "
          f"reference {st.median(a['ref']):8.1f} us  {ratios}")
