#!/usr/bin/env python3
"""Checks a merged Baton timeline (docs/tracing.md) with the standard library only.

Usage: check_trace.py FILE --ranks N [--allreduce-counts C,C,...] [--calls-each K]
                      [--trainer-steps S]

Always: valid JSON with a traceEvents list; exactly N process tracks (pids 0..N-1), each
named by a process_name record; every complete event has a numeric ts and a dur >= 0; on
each thread of each track, events nest (each one ends before the one it starts in ends) and
Baton's events of one thread start in call order; every rank's collectives carry seq numbers
1, 2, 3, ... in order and all ranks have the same list of (collective, count, datatype, seq).

--allreduce-counts: every rank holds at least K (--calls-each) float allreduces of each count.
--trainer-steps: every rank holds S trainer "step" events, each enclosing one forward,
backward, "finish allreduces" and optimizer event in that order, the first bucket launched
inside backward, and as many gradient allreduces (op avg) as bucket launches.
"""
import argparse
import collections
import json
import sys

# Trace files store exact decimal microseconds; parsed as doubles near today's epoch they keep
# about a quarter of a microsecond.
SLACK_US = 0.5


def fail(message):
    print(f"check_trace: {message}", file=sys.stderr)
    sys.exit(1)


def check_nesting(events, where):
    ends = []  # the ends of the events enclosing the current one
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        end = e["ts"] + e["dur"]
        while ends and ends[-1] <= e["ts"] + SLACK_US:
            ends.pop()
        if ends and end > ends[-1] + SLACK_US:
            fail(f"{where}: {e['name']} at {e['ts']} ends after the event it starts in")
        ends.append(end)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--allreduce-counts", default="")
    parser.add_argument("--calls-each", type=int, default=1)
    parser.add_argument("--trainer-steps", type=int, default=0)
    args = parser.parse_args()

    try:
        with open(args.file) as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{args.file}: not valid JSON: {e}")
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list) or not events:
        fail("no traceEvents")

    named = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    complete = [e for e in events if e.get("ph") == "X"]
    pids = {e["pid"] for e in complete}
    if pids != set(range(args.ranks)) or not pids <= named:
        fail(f"tracks {sorted(pids)} (named {sorted(named)}), expected 0..{args.ranks - 1}")
    for e in complete:
        if not isinstance(e.get("ts"), (int, float)) or not isinstance(e.get("dur"), (int, float)):
            fail(f"event without numeric ts/dur: {e}")
        if e["dur"] < 0:
            fail(f"negative duration: {e}")

    threads = collections.defaultdict(list)
    for e in complete:
        threads[(e["pid"], e["tid"])].append(e)
    for (pid, tid), evs in threads.items():
        check_nesting(evs, f"rank {pid} thread {tid}")
        baton = [e for e in evs if e.get("cat") == "baton"]
        for a, b in zip(baton, baton[1:]):
            if b["ts"] + SLACK_US < a["ts"]:
                fail(f"rank {pid} thread {tid}: {b['name']} #{b['args']['seq']} starts before "
                     f"{a['name']} #{a['args']['seq']}, which it follows in the file")

    calls = {}
    for pid in range(args.ranks):
        mine = sorted((e for e in complete if e["pid"] == pid and e.get("cat") == "baton"
                       and e["name"] not in ("send", "recv")), key=lambda e: e["args"]["seq"])
        seqs = [e["args"]["seq"] for e in mine]
        if seqs != list(range(1, len(seqs) + 1)):
            fail(f"rank {pid}: collectives numbered {seqs[:20]}..., expected 1, 2, 3, ...")
        by_time = sorted(mine, key=lambda e: e["ts"])
        if [e["args"]["seq"] for e in by_time] != seqs:
            fail(f"rank {pid}: collectives did not run in seq order")
        calls[pid] = [(e["name"], e["args"].get("count"), e["args"].get("datatype"),
                       e["args"]["seq"]) for e in mine]
        for e in mine:
            a = e["args"]
            if e["name"] not in ("barrier", "internal") and (not a.get("algorithm") or
                                                          "bytes" not in a):
                fail(f"rank {pid}: {e['name']} #{a['seq']} without algorithm or bytes")
    for pid in range(1, args.ranks):
        if calls[pid] != calls[0]:
            fail(f"rank {pid} ran other collectives than rank 0")

    if args.allreduce_counts:
        for pid in range(args.ranks):
            got = collections.Counter(c for n, c, t, _ in calls[pid]
                                      if n == "allreduce" and t == "float")
            for count in map(int, args.allreduce_counts.split(",")):
                if got[count] < args.calls_each:
                    fail(f"rank {pid}: {got[count]} float allreduces of {count}, "
                         f"expected at least {args.calls_each}")

    if args.trainer_steps:
        for pid in range(args.ranks):
            mine = [e for e in complete if e["pid"] == pid]
            trainer = [e for e in mine if e.get("cat") == "trainer"]
            steps = [e for e in trainer if e["name"] == "step"]
            if len(steps) != args.trainer_steps:
                fail(f"rank {pid}: {len(steps)} trainer steps, expected {args.trainer_steps}")
            launches = 0
            for s in steps:
                inside = sorted((e for e in trainer if e is not s and s["ts"] <= e["ts"] and
                                 e["ts"] + e["dur"] <= s["ts"] + s["dur"] + SLACK_US),
                                key=lambda e: e["ts"])
                phases = [e["name"] for e in inside if e["name"] != "launch bucket"]
                if phases != ["forward", "backward", "finish allreduces", "optimizer"]:
                    fail(f"rank {pid}: step {s['args']} holds {phases}")
                backward = next(e for e in inside if e["name"] == "backward")
                buckets = [e for e in inside if e["name"] == "launch bucket"]
                launches += len(buckets)
                first = next((e for e in buckets if e["args"]["bucket"] == 0), None)
                if first is None or not (backward["ts"] <= first["ts"] and
                                         first["ts"] + first["dur"] <=
                                         backward["ts"] + backward["dur"] + SLACK_US):
                    fail(f"rank {pid}: step {s['args']}: bucket 0 not launched inside backward")
            gradients = [e for e in mine if e.get("cat") == "baton" and e["name"] == "allreduce"
                         and e["args"].get("op") == "avg"]
            if len(gradients) != launches:
                fail(f"rank {pid}: {len(gradients)} gradient allreduces for {launches} buckets")

    print(f"check_trace: {args.file}: {len(complete)} events on {args.ranks} tracks: ok")


if __name__ == "__main__":
    main()
