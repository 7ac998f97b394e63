#!/usr/bin/python3
"""The trainer as a lab: each experiment family runs baton-train under batonrun and writes
DIR/NAME.md (a captioned table, also printed), DIR/NAME.png and DIR/NAME.json (raw records).

  scripts/experiments.py NAME|all --out DIR [--quick] [--build BUILD_DIR]

Families: scripts/lab/__init__.py's FAMILIES (docs/trainer.md, "Experiments"). --quick runs
each on a small synthetic set in seconds (the tests); without it, on Fashion-MNIST within about
5 minutes a family on a 2-core machine."""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lab import FAMILIES  # noqa: E402
from lab.common import Lab, load, write  # noqa: E402


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", help="a family (" + ", ".join(FAMILIES) + ") or all")
    p.add_argument("--out", required=True, help="directory for NAME.md, NAME.png, NAME.json")
    p.add_argument("--quick", action="store_true", help="seconds each, on synthetic data")
    p.add_argument("--build", default=os.path.join(root, "build"), help="the build directory")
    p.add_argument("--replot", action="store_true",
                   help="no training: the table and plot again from DIR/NAME.json")
    a = p.parse_args()
    if a.name != "all" and a.name not in FAMILIES:
        p.error(f"unknown family '{a.name}' (one of {', '.join(FAMILIES)}, all)")
    names = list(FAMILIES) if a.name == "all" else [a.name]
    failed = []
    for name in names:
        family = FAMILIES[name]
        print(f"== {name}", file=sys.stderr, flush=True)
        start = time.monotonic()
        if a.replot:
            quick, result = load(a.out, name)
            md = write(name, result, a.out, family.plot, quick)
            print(f"### {name}\n\n{md}", flush=True)
            continue
        lab = Lab(a.build, a.quick)
        result = family.run(lab)
        result.extra["family_seconds"] = round(time.monotonic() - start, 1)
        md = write(name, result, a.out, family.plot, a.quick)
        print(f"### {name}\n\n{md}", flush=True)
        print(f"== {name}: {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
        bad = [r.label for r in result.runs if not r.ok]
        if bad:
            failed.append(f"{name}: {', '.join(bad)}")
    if failed:
        print("experiments: failed runs: " + "; ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
