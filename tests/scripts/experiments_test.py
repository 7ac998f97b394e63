#!/usr/bin/python3
"""scripts/experiments.py in quick mode: every family runs (synthetic data, seconds each) and
writes a captioned Markdown table of numbers, a PNG and JSON that parses, with values in sane
ranges and each family's own invariants (SSP's clock gap <= S, the large-batch rate rules, local
SGD's averages falling with K, the cost model's predictions positive).
Usage: experiments_test.py BUILD_DIR"""
import json
import math
import os
import subprocess
import sys
import tempfile

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
build = sys.argv[1]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def number(cell):
    if isinstance(cell, (int, float)):
        return float(cell)
    return None


with tempfile.TemporaryDirectory() as out:
    p = subprocess.run([sys.executable, os.path.join(root, "scripts", "experiments.py"), "all",
                        "--quick", "--out", out, "--build", build],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=170)
    sys.stderr.write(p.stderr[-3000:])
    check(p.returncode == 0, f"experiments.py exit {p.returncode}")
    sys.path.insert(0, os.path.join(root, "scripts"))
    from lab import FAMILIES
    first = {n: open(os.path.join(out, n + ".md")).read() for n in FAMILIES
             if os.path.exists(os.path.join(out, n + ".md"))}
    again = subprocess.run([sys.executable, os.path.join(root, "scripts", "experiments.py"), "all",
                            "--replot", "--out", out], capture_output=True, text=True)
    check(again.returncode == 0 and all(open(os.path.join(out, n + ".md")).read() == md
                                        for n, md in first.items()),
          f"--replot draws the same tables again: {again.stderr[-500:]}")
    bad = subprocess.run([sys.executable, os.path.join(root, "scripts", "experiments.py"),
                          "bogus", "--out", out], capture_output=True, text=True)
    check(bad.returncode == 2 and "unknown family 'bogus'" in bad.stderr, "bad name: exit 2")
    for name in FAMILIES:
        md_path, png, js = (os.path.join(out, name + ext) for ext in (".md", ".png", ".json"))
        if not check(all(os.path.exists(f) for f in (md_path, png, js)), f"{name}: outputs"):
            continue
        with open(png, "rb") as f:
            check(f.read(8) == b"\x89PNG\r\n\x1a\n" and os.path.getsize(png) > 5000,
                  f"{name}: png")
        raw = json.load(open(js))
        md = open(md_path).read()
        check(f"### {name}" in md and md in p.stdout, f"{name}: table printed")
        check(raw["quick"] and len(raw["caption"]) > 40 and raw["caption"] in md,
              f"{name}: caption")
        if raw["skipped"]:
            check(name == "comm-cost" and os.geteuid() != 0 and "Skipped: " in md,
                  f"{name}: skipped ({raw['skipped']})")
            print(f"ok - {name}: skipped: {raw['skipped']}")
            continue
        rows, header = raw["rows"], raw["header"]
        table = [l for l in md.splitlines() if l.startswith("| ")]
        check(len(rows) >= 4 and len(table) == len(rows) + 2, f"{name}: table rows")
        check(all(len(r) == len(header) for r in rows), f"{name}: row widths")
        numeric = [number(c) for r in rows for c in r if number(c) is not None]
        check(len(numeric) >= 2 * len(rows) and all(math.isfinite(v) or math.isnan(v)
                                                    for v in numeric), f"{name}: numbers")
        runs = raw["runs"]
        check(runs and all(r["ok"] and r["epochs"] and r["config"] for r in runs),
              f"{name}: every run finished: {[r['error'] for r in runs if not r['ok']]}")
        for r in runs:
            for e in r["epochs"]:
                check(0 <= e["test_acc"] <= 1 and e["samples_per_s"] > 0 and e["step"] > 0 and
                      0 <= e["comm_wait_frac"] <= 1.0001 and (e["loss_step_std"] is None or e["loss_step_std"] >= 0) and
                      e["step_p99_s"] >= e["step_p50_s"] >= 0, f"{name}: {r['label']}: {e}")
        col = {h: i for i, h in enumerate(header)}
        if name == "sync-vs-async":
            sync = rows[0]
            check(sync[col["test_acc ep1"]] > 0.5, f"{name}: sync learns: {sync}")
            check(all(r[col["staleness max"]] == 0 for r in rows if r[0].startswith("sync")) and
                  any(r[col["staleness max"]] > 0 for r in rows if r[0].startswith("async")),
                  f"{name}: staleness only asynchronous")
        elif name == "staleness":
            for r in rows:
                if r[0] != "unbounded":
                    check(r[col["clock gap max"]] <= int(r[0]), f"{name}: gap <= S: {r}")
            check({r[1] for r in rows} == {"yes", "no (0.9)"}, f"{name}: both momenta")
        elif name == "stragglers":
            for r in rows:
                check(r[col["step p50 ms"]] > 0 and r[col["samples/s"]] > 0, f"{name}: {r}")
        elif name == "large-batch":
            for r in rows:
                gb, scaling, opt = r[col["global batch"]], r[col["lr scaling"]], r[col["optimizer"]]
                base = {"sgd": 0.05, "lars": 2.0, "lamb": 0.0035}[opt]
                want = base * {"none": 1, "sqrt": math.sqrt(gb / 64), "linear": gb / 64}[scaling]
                check(abs(r[col["peak lr"]] - want) < 1e-6 * want, f"{name}: peak lr {r}")
            same_steps = {r[col["steps"]] for r in rows if r[0] == "same steps"}
            check(len(same_steps) == 1, f"{name}: same steps {same_steps}")
        elif name == "local-sgd":
            ks = [r for r in rows if r[0].startswith("K=")]
            av = [r[col["averages/epoch"]] for r in ks]
            check(av == sorted(av, reverse=True) and av[0] > av[-1], f"{name}: averages {av}")
        elif name == "ema":
            check(all((r[col["EMA test_acc"]] is None) == (r[1] == "off") for r in rows),
                  f"{name}: EMA column")
        elif name == "comm-cost":
            for r in rows:
                check(r[col["comm ms/step"]] > 0, f"{name}: measured {r}")
                if "overlap, buckets" not in r[1]:
                    check(r[col["predicted ms"]] > 0, f"{name}: predicted {r}")
        print(f"ok - {name}: {len(rows)} rows, {len(runs)} runs, "
              f"{raw['extra'].get('family_seconds')} s")
for f in failures:
    print(f"not ok - {f}")
sys.exit(1 if failures else 0)
