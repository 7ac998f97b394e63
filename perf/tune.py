#!/usr/bin/env python3
"""Baton's automatic algorithm choice against every algorithm forced, side by side.

  perf/tune.py [--build DIR] [--configs shm2,shm4,net4x2-1g,net8-1g,net4-10g]
               [--collective all_reduce] [--sizes 8,...,64M] [--reps 3] [--out DIR]

Runs build/perf/<collective>_perf -y 1 once with the automatic choice and once with each
algorithm the collective has forced (-A), taking turns (the order rotated on each repetition) so
that drift of a shared machine spreads over all of them; each figure is the median of --reps
repetitions. The model's predictions come from a run with BATON_DEBUG_SUBSYS=TUNING, which makes
rank 0 log the table the communicator computed.

Configurations (--configs, comma separated):
  shmN          N ranks on this host (batonrun binds them; with more ranks than cores,
                --bind-to core shares the cores round robin, so that every run has the same
                placement: left to the scheduler, 4 ranks on 2 cores land in a fast or a slow
                mode per launch, 4.6 or 7.2 us at 8 B for the very same schedule).
  loN           N simulated hosts of one rank on the loopback interface, without network
                namespaces or shaping: BATON_HOSTID per host, BATON_TRANSPORT=tcp,
                BATON_SOCKET_IFNAME=lo, BATON_BIND=core (the TCP path between "hosts").
  netHxR-RATE   H simulated hosts with R ranks each (scripts/netns.sh: network namespaces on a
  netH-RATE     bridge, eth0 shaped by tbf at RATE, e.g. 1g, 10g); one batonrun per namespace,
                --bind-to none with BATON_BIND=core: the "hosts" share this machine's cores, so
                the library binds each rank by its index among the machine's ranks; and
                BATON_NET_MBPS=RATE, since veth reports 10 Gbit/s whatever tbf shapes it to.
                Needs root.

Writes --out (default perf-results/tune): tune.md (one table per configuration: size, the
median time of each forced algorithm and of the automatic choice, the best forced one, auto/best,
and the predicted time of each algorithm), tune.json, raw/ (every run). Exit status 0 when every
run succeeded with correct results.
"""
import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sweep_util import (SweepRunner, human_size, log, parse_config,  # noqa: E402
                        parse_size, size_groups)

DEFAULT_CONFIGS = "shm2,shm4,net4x2-1g,net8-1g,net4-10g"
DEFAULT_SIZES = ",".join(str(1 << k) for k in range(3, 27, 2))  # 8 B .. 64 MiB, x4
# The BATON_ALGO names of each collective's algorithms (algorithms/collective.h).
ALGORITHMS = {
    "all_reduce": ["ring", "rhd", "tree", "hier"],
    "broadcast": ["ring", "tree", "binomial", "hier"],
    "reduce": ["ring", "tree", "binomial", "hier"],
    "all_gather": ["ring", "rhd", "hier"],
    "reduce_scatter": ["ring", "rhd"],
}
TABLE_NAME = {"all_reduce": "allreduce", "broadcast": "broadcast", "reduce": "reduce",
              "all_gather": "allgather", "reduce_scatter": "reducescatter"}


class Runner(SweepRunner):
    def __init__(self, args):
        super().__init__("tune", args)
        self.binary = os.path.join(self.build, "perf", args.collective + "_perf")

    def commands(self, config, flags, env):
        """[(argv, env)] of the processes of one run."""
        args = [self.binary, "-y", "1"] + flags
        if config["kind"] == "shm":
            bind = ["--bind-to", "core"] if config["per_host"] > (os.cpu_count() or 1) else []
            return [([self.batonrun, "-n", str(config["per_host"])] + bind + args, env)]
        port = self.next_port()
        if config["kind"] == "lo":
            n = config["hosts"]
            return [([self.batonrun, "-n", "1", "--bind-to", "none", "--world-size", str(n),
                      "--rank-offset", str(h), "--root", f"127.0.0.1:{port}"] + args,
                     dict(env, BATON_HOSTID=f"tune-lo-h{h}", BATON_TRANSPORT="tcp",
                          BATON_SOCKET_IFNAME="lo", BATON_BIND="core"))
                    for h in range(n)]
        # BATON_BIND=core: every rank by its index among the machine's ranks.
        return self.baton_ranks(self.batonrun, args, dict(env, BATON_BIND="core"), port,
                                config["per_host"])

    def run(self, config, flags, name, env_extra=None):
        """Runs one sweep; returns (JSON records, the log's text) or (None, text)."""
        json_path = os.path.join(self.raw, name + ".jsonl")
        log_path = os.path.join(self.raw, name + ".log")
        if os.path.exists(json_path):
            os.remove(json_path)
        env = dict(os.environ, BATON_TIMEOUT="120", **(env_extra or {}))
        procs = []
        start = time.monotonic()
        with open(log_path, "w", encoding="utf-8") as logf:
            for argv, e in self.commands(config, flags + ["-J", json_path], env):
                logf.write("$ " + shlex.join(argv) + "\n")
                logf.flush()
                procs.append(subprocess.Popen(argv, env=e, stdout=logf, stderr=subprocess.STDOUT,
                                              start_new_session=True))
            codes = []
            for p in procs:
                try:
                    codes.append(p.wait(timeout=max(1.0, self.args.timeout -
                                                    (time.monotonic() - start))))
                except subprocess.TimeoutExpired:
                    codes.append("timeout")
                    for q in procs:
                        if q.poll() is None:
                            os.killpg(q.pid, signal.SIGKILL)
                            q.wait()
        with open(log_path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        records = []
        if os.path.exists(json_path):
            with open(json_path, encoding="utf-8") as f:
                records = [json.loads(line) for line in f if line.strip()]
        if any(c != 0 for c in codes) or not records:
            self.failures.append(f"{name}: exit {codes} (see {log_path})")
            log(f"  FAILED {name}: exit {codes} (log: {log_path})")
            return None, text
        return records, text

    def iterations(self, config, sizes):
        if config["kind"] == "shm":
            latency, bandwidth = 5e-6, 2e9
        elif config["kind"] == "lo":
            latency, bandwidth = 50e-6, 1e9
        else:
            latency, bandwidth = 100e-6, config["rate_GBps"] * 1e9
        per_call = max(latency + 2 * s / bandwidth for s in sizes)
        return max(3, min(200, int(self.args.budget / per_call)))


def parse_tune_config(name):
    """sweep_util's configurations, and loN: N loopback "hosts" of one rank each."""
    m = re.fullmatch(r"lo(\d+)", name)
    if m and 2 <= int(m.group(1)) <= 16:
        n = int(m.group(1))
        return {"name": name, "kind": "lo", "hosts": n, "per_host": 1, "ranks": n}
    return parse_config(name)


def predictions(text, collective):
    """({algorithm: {size: predicted us}}, {size: chosen algorithm}, cost line) from rank 0's
    TUNING log lines (float32, the sizes the table prints: powers of two)."""
    table, choice = {}, {}
    pattern = re.compile(r"TUNING " + re.escape(TABLE_NAME[collective]) +
                         r" (\d+) B: (.*?) -> (\S+)")
    for m in pattern.finditer(text):
        size = int(m.group(1))
        choice[size] = m.group(3).split("/")[0].rstrip(";")
        for item in m.group(2).split(","):
            item = item.strip()
            mm = re.fullmatch(r"(\S+) (\S+) us", item)
            if mm:
                table.setdefault(mm.group(1), {})[size] = float(mm.group(2))
    cost = re.search(r"TUNING cost figures \((.*)\)", text)
    return table, choice, cost.group(1) if cost else ""


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.environ.get("BATON_BUILD", "build"))
    parser.add_argument("--configs", default=DEFAULT_CONFIGS)
    parser.add_argument("--collective", default="all_reduce", choices=sorted(ALGORITHMS))
    parser.add_argument("--algorithms", default="",
                        help="comma separated: the forced algorithms to run (default: all the "
                             "collective has)")
    parser.add_argument("--sizes", default=DEFAULT_SIZES)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--budget", type=float, default=0.2,
                        help="seconds of timed calls per size and run (default 0.2)")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--calibrate", action="store_true",
                        help="run every variant with BATON_CALIBRATE=1 (a fresh cache per "
                             "configuration, filled by a first untimed run)")
    parser.add_argument("--out", default=os.path.join("perf-results", "tune"))
    args = parser.parse_args(argv)
    try:
        configs = [parse_tune_config(c.strip()) for c in args.configs.split(",") if c.strip()]
        sizes = sorted({parse_size(s) for s in args.sizes.split(",") if s.strip()})
    except (ValueError, argparse.ArgumentTypeError) as e:
        parser.error(str(e))
    runner = Runner(args)
    if args.algorithms:
        ALGORITHMS[args.collective] = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    variants = ["auto"] + ALGORITHMS[args.collective]
    report = {"meta": {"date": datetime.datetime.now().isoformat(timespec="seconds"),
                       "host": socket.gethostname(), "cpus": os.cpu_count(),
                       "command": shlex.join([sys.argv[0]] + argv), "reps": args.reps},
              "configs": []}
    md = [f"# Automatic choice against forced algorithms: {args.collective} (float, sum)\n",
          f"`{report['meta']['command']}` on {report['meta']['host']} ({os.cpu_count()} CPUs), "
          f"{report['meta']['date']}. Time per call (us, out of place), median of {args.reps} "
          f"interleaved repetitions; `pred` is the model's prediction.\n"]

    def on_signal(signum, _frame):
        runner.netns_down()
        raise SystemExit(f"interrupted by signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        for config in configs:
            if config["kind"] == "net":
                if os.geteuid() != 0:
                    log(f"skipping {config['name']}: network namespaces need root")
                    continue
                runner.netns_up(config["hosts"], config["rate"])
            log(f"== {config['name']}")
            times = {v: {} for v in variants}
            predicted, chosen, cost = {}, {}, ""
            base_env = {}
            if config["kind"] == "net":
                # veth reports 10 Gbit/s whatever tbf shapes it to: the cost model is told the
                # shaped rate, as a user of a rate-limited link would (README, BATON_NET_MBPS;
                # perf/compare.py does the same).
                base_env["BATON_NET_MBPS"] = str(round(config["rate_GBps"] * 8000))
            if args.calibrate:
                cache = os.path.join(runner.out, "calibration", config["name"])
                shutil.rmtree(cache, ignore_errors=True)
                os.makedirs(cache)
                # The calibration measures the links' rate itself, shaped or not.
                base_env = {"BATON_CALIBRATE": "1", "BATON_CALIBRATION_CACHE": cache}
                runner.run(config, ["-b", "8", "-e", "8", "-n", "2", "-w", "0"],
                           f"{config['name']}-calibration", base_env)
            try:
                # A sweep runs its sizes with its largest size's count: the groups end
                # before a size that would leave the first few calls (as perf/compare.py's).
                groups = size_groups(sizes, iterations=lambda s: runner.iterations(config, [s]))
                order = list(variants)
                for rep in range(args.reps):
                    for g, (b, e, f, group) in enumerate(groups):
                        flags = ["-b", str(b), "-e", str(e), "-f", str(f), "-n",
                                 str(runner.iterations(config, group)), "-w", "2", "-c", "1",
                                 "-d", "float", "-o", "sum"]
                        for v in order:
                            extra = [] if v == "auto" else ["-A", v]
                            logged = v == "auto" and rep == 0 and g == 0
                            env = dict(base_env)
                            if logged:
                                env.update({"BATON_DEBUG": "INFO", "BATON_DEBUG_SUBSYS": "TUNING"})
                            records, text = runner.run(config, flags + extra,
                                                       f"{config['name']}-{v}-g{g}-r{rep}", env)
                            if logged:
                                predicted, chosen, cost = predictions(text, args.collective)
                            for rec in records or []:
                                if any(int(rec[k]["nwrong"] or 0)
                                       for k in ("out_of_place", "in_place")):
                                    runner.failures.append(f"{config['name']} {v} "
                                                           f"{rec['size']}: wrong results")
                                times[v].setdefault(rec["size"], []).append(
                                    float(rec["out_of_place"]["time"]))
                        order = order[1:] + order[:1]
                    log(f"  repetition {rep + 1} done")
            finally:
                if config["kind"] == "net":
                    runner.netns_down()
            med = {v: {s: statistics.median(t) for s, t in by.items()} for v, by in times.items()}
            rows = []
            head = (["size"] + [f"{v} (us)" for v in variants] +
                    ["best forced", "auto chose", "auto/best", "chosen/best", "auto/chosen"] +
                    [f"pred {a}" for a in ALGORITHMS[args.collective]])
            table = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            for s in sizes:
                forced = {a: med[a].get(s) for a in ALGORITHMS[args.collective]
                          if med[a].get(s) is not None}
                best = min(forced, key=forced.get) if forced else None
                auto = med["auto"].get(s)
                ratio = auto / forced[best] if auto and best else None
                # The forced run of the algorithm the model chose, over the best: how good
                # the choice is, free of the run-to-run noise between the auto run and the
                # forced ones.
                pick = chosen.get(s)
                choice_ratio = (forced[pick] / forced[best]
                                if best and pick in forced else None)
                # The automatic run over the forced run of its own choice: what the automatic
                # path adds (the same schedule, so 1 but for noise).
                auto_chosen = auto / forced[pick] if auto and pick in forced else None
                rows.append({"size": s, "times": {v: med[v].get(s) for v in variants},
                             "best": best, "auto_over_best": ratio, "chosen": pick,
                             "chosen_over_best": choice_ratio, "auto_over_chosen": auto_chosen,
                             "predicted": {a: predicted.get(a, {}).get(s)
                                           for a in ALGORITHMS[args.collective]}})

                def f(x):
                    return "–" if x is None else f"{x:.3g}"
                table.append("| " + " | ".join(
                    [human_size(s)] + [f(med[v].get(s)) for v in variants] +
                    [best or "–", pick or "–", f(ratio), f(choice_ratio), f(auto_chosen)] +
                    [f(predicted.get(a, {}).get(s)) for a in ALGORITHMS[args.collective]]) + " |")
            report["configs"].append({"config": config, "rows": rows, "cost": cost})
            md.append(f"## {config['name']}\n")
            if cost:
                md.append(f"Cost figures: {cost}\n")
            md.append("\n".join(table) + "\n")
            with open(os.path.join(runner.out, "tune.md"), "w", encoding="utf-8") as out:
                out.write("\n".join(md))
            with open(os.path.join(runner.out, "tune.json"), "w", encoding="utf-8") as out:
                json.dump(report, out, indent=1)
    finally:
        runner.netns_down()
    if runner.failures:
        md.append("## Failures\n")
        md += [f"- {x}" for x in runner.failures]
    with open(os.path.join(runner.out, "tune.md"), "w", encoding="utf-8") as out:
        out.write("\n".join(md) + "\n")
    log(f"wrote {runner.out}/tune.md")
    return 1 if runner.failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
