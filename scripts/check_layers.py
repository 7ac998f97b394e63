#!/usr/bin/env python3
"""Checks that src/ keeps its layers (docs/design.md, "Layers").

  scripts/check_layers.py [--root DIR] [--counts]

Reads every #include "folder/file.h" of src/ and fails (exit 1) when a folder includes one it may
not (a layer above it, or beside it without leave), or when files include each other in a cycle.
--counts prints the number of includes from each folder to each other folder (a matrix), also for
trees that predate the layers, which then only get the counts.
"""
import argparse
import collections
import os
import re
import sys

# What each folder of src/ may include besides itself, include/baton.h and the system: the layer
# table of docs/design.md. Bottom up.
ALLOWED = {
    "base": set(),
    "kernels": {"base"},
    "bootstrap": {"base"},
    "topology": {"base"},
    "transport": {"base", "kernels", "bootstrap"},
    "algorithms": {"base"},
    "tuning": {"base", "topology", "algorithms"},
    "exec": {"base", "kernels", "transport", "algorithms"},
    # comm: kernels for the calibration's reduce-copy probe.
    "comm": {"base", "kernels", "topology", "bootstrap", "transport", "algorithms", "tuning",
             "exec"},
    "cuda": {"base", "kernels", "algorithms", "comm"},
    "launch": {"base", "algorithms", "tuning", "comm", "cuda"},
    "api": {"base", "topology", "bootstrap", "algorithms", "comm", "cuda", "launch"},
    # batonrun: base, topology and header-only pieces of bootstrap beside
    # libbaton.so; baton-topo: the internal library.
    "tools": {"base", "topology", "bootstrap", "algorithms", "tuning"},
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE = (".h", ".cc", ".cu")


def folder_of(path):
    """The top folder of a path relative to src/ ("algorithms" for algorithms/ring.h)."""
    return path.split("/", 1)[0] if "/" in path else ""


def read_includes(src):
    """{file: [included file]} for every source file under src, paths relative to src."""
    files = {}
    for dirpath, _, names in os.walk(src):
        for name in names:
            if not name.endswith(SOURCE):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, src)
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            files[rel] = [inc for inc in INCLUDE.findall(text)
                          if os.path.exists(os.path.join(src, inc))]
    return files


def find_cycle(files):
    """A list of files that include each other in a cycle, or None."""
    state = {}
    stack = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in files.get(node, []):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(files):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    parser.add_argument("--counts", action="store_true", help="print the folder include matrix")
    args = parser.parse_args()
    src = os.path.join(args.root, "src")
    files = read_includes(src)

    counts = collections.Counter()
    for f, incs in files.items():
        for inc in incs:
            a, b = folder_of(f), folder_of(inc)
            if a != b:
                counts[(a, b)] += 1
    if args.counts:
        folders = sorted({a for a, _ in counts} | {b for _, b in counts})
        width = max(len(x) for x in folders) + 1
        print("includes from (row) to (column)")
        print(" " * width + "".join(f"{x[:6]:>7}" for x in folders))
        for a in folders:
            row = "".join(f"{counts[(a, b)] or '.':>7}" for b in folders)
            print(f"{a:<{width}}{row}")
        print(f"{sum(counts.values())} includes between {len(folders)} folders")

    problems = []
    known = set(ALLOWED)
    layered = {folder_of(f) for f in files} <= known | {""}
    if layered:
        for (a, b), n in sorted(counts.items()):
            if b not in ALLOWED.get(a, set()):
                examples = [f"{f} -> {inc}" for f, incs in sorted(files.items())
                            if folder_of(f) == a for inc in incs if folder_of(inc) == b]
                problems.append(f"{a}/ may not include {b}/ ({n}x), e.g. {examples[0]}")
    else:
        problems.append("src/ has folders outside the layer table: " +
                        ", ".join(sorted({folder_of(f) for f in files} - known - {""})))
    mutual = sorted(f"{a}/ <-> {b}/" for (a, b) in counts if a < b and (b, a) in counts)
    if mutual:
        problems.append("folders that include each other: " + ", ".join(mutual))
    cycle = find_cycle(files)
    if cycle:
        problems.append("include cycle: " + " -> ".join(cycle))
    for p in problems:
        print("layers: " + p, file=sys.stderr)
    if not problems:
        print(f"layers: ok ({len(files)} files, {sum(counts.values())} includes between folders)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
