"""The library table of perf/compare.py and the report it writes from the measurements: per-size
medians of the repetitions, the markdown tables (busbw, time, ratios to each peer, against the
roofline and the latency floor) and the back-to-back lines. Split from compare.py, which runs the
sweeps."""
import statistics

from sweep_util import human_size

# Library key -> (label, binary under the build directory, extra flags). Baton runs with
# -y 1: synchronous calls, as MPI_Allreduce and Gloo's run() are (the default host stream
# adds a thread hand-off, ~3 us per call, that the peers do not pay).
LIBRARIES = {
    "baton": ("Baton", "perf/all_reduce_perf", ["-y", "1"]),
    "baton_reg": ("Baton registered", "perf/all_reduce_perf", ["-y", "1", "-R", "1"]),
    "baton_base": ("Baton baseline", "perf/all_reduce_perf", ["-y", "1"]),
    "mpi": ("Open MPI", "perf/peers/mpi_all_reduce_perf", []),
    "gloo_rc": ("Gloo ring_chunked", "perf/peers/gloo_all_reduce_perf", ["-A", "ring_chunked"]),
    "gloo_hd": ("Gloo halving_doubling", "perf/peers/gloo_all_reduce_perf",
                ["-A", "halving_doubling"]),
    "impi": ("Intel MPI", "perf/peers/impi_all_reduce_perf", []),
    "mpich": ("MPICH", "perf/peers/mpich_all_reduce_perf", []),
    "oneccl": ("oneCCL", "perf/peers/oneccl_all_reduce_perf", []),
    # Through torch.distributed (perf/compare_torch.py): the script is in the source tree.
    "baton_torch": ("Baton via torch.distributed", "perf/python/torch_all_reduce_perf.py", []),
    "baton_torch_direct": ("Baton baton.torch.all_reduce", "perf/python/torch_all_reduce_perf.py",
                           []),
    "torch_gloo": ("PyTorch gloo", "perf/python/torch_all_reduce_perf.py", []),
    "deepspeed": ("DeepSpeed SHM", "perf/python/torch_all_reduce_perf.py", []),
}
PEERS = ["baton_base", "mpi", "gloo_rc", "gloo_hd", "impi", "mpich", "oneccl", "torch_gloo",
         "deepspeed"]
# Libraries whose allreduce works in place only: out of place their runs copy first.
IN_PLACE_ONLY = {"gloo_rc", "gloo_hd", "baton_torch", "baton_torch_direct", "torch_gloo",
                 "deepspeed"}
# Libraries that run Baton's own binaries under batonrun.
BATONS = {"baton", "baton_reg", "baton_base"}
# Registered buffers map the peers' memory: one host only. Intel MPI, MPICH and oneCCL come
# from PyPI into venvs under .venv-peers/ (scripts/setup.sh) and run on one host only, as
# DeepSpeed's shared-memory op does.
SHM_ONLY = {"baton_reg", "impi", "mpich", "oneccl", "deepspeed"}
# The venv under --peers-venv that holds each PyPI peer (its library, and the MPIs' mpiexec).
PEER_VENVS = {"impi": "impi", "mpich": "mpich", "oneccl": "oneccl"}


def median_record(records, label):
    """The record whose out-of-place time is the median, with ranges and the label added."""
    ordered = sorted(records, key=lambda r: float(r["out_of_place"]["time"]))
    mid = dict(ordered[(len(ordered) - 1) // 2])
    mid["label"] = label
    return mid


def summarize(results, label_of):
    """lib -> size -> figures (medians over repetitions, ranges, checks)."""
    summary = {}
    for lib, by_size in results.items():
        summary[lib] = {}
        for size, records in sorted(by_size.items()):
            busbw = [float(r["out_of_place"]["bus_bw"]) for r in records]
            times = [float(r["out_of_place"]["time"]) for r in records]
            ip_busbw = [float(r["in_place"]["bus_bw"]) for r in records]
            wrong = sum(int(r[k]["nwrong"] or 0) for r in records
                        for k in ("out_of_place", "in_place"))
            summary[lib][size] = {
                "busbw": statistics.median(busbw), "busbw_min": min(busbw),
                "busbw_max": max(busbw), "time_us": statistics.median(times),
                "time_min": min(times), "time_max": max(times),
                "times_us": times,  # per repetition, in the order they ran
                "inplace_busbw": statistics.median(ip_busbw), "reps": len(records),
                "nwrong": wrong, "label": label_of[lib]}
    return summary


def back_to_back(summary, other="mpi"):
    """Per size: Baton's and `other`'s time (Open MPI's, or the baseline build's) in each
    repetition (they ran next to each other), and in how many Baton was no slower."""
    name = LIBRARIES[other][0]
    lines = [f"Repetition by repetition (time per call, us, Baton / {name}):\n"]
    for size in sorted(summary["baton"]):
        b = summary["baton"][size].get("times_us", [])
        m = summary.get(other, {}).get(size, {}).get("times_us", [])
        pairs = list(zip(b, m))
        if not pairs:
            continue
        wins = sum(1 for x, y in pairs if x <= y)
        lines.append(f"- {human_size(size)}: " + ", ".join(f"{x:.3g}/{y:.3g}" for x, y in pairs) +
                     f"; Baton no slower in {wins} of {len(pairs)}")
    return "\n".join(lines)


def rivals(libs):
    """The other libraries among `libs`, in PEERS' order (the baseline build is Baton's own)."""
    return [p for p in PEERS if p != "baton_base" and p in libs]


def back_to_back_fastest(summary):
    """Per size: Baton's time against the fastest peer's in each repetition (the libraries of
    one repetition ran in one round), and in how many Baton was no slower than all of them."""
    peers = rivals(summary)
    if len(peers) < 2:
        return ""
    lines = ["Repetition by repetition against the fastest peer of each (time per call, us, "
             "Baton / fastest peer):\n"]
    for size in sorted(summary["baton"]):
        b = summary["baton"][size].get("times_us", [])
        cells, wins = [], 0
        for i, x in enumerate(b):
            times = [(summary[p][size]["times_us"][i], LIBRARIES[p][0]) for p in peers
                     if size in summary[p] and i < len(summary[p][size].get("times_us", []))]
            if not times:
                continue
            y, name = min(times)
            wins += x <= y
            cells.append(f"{x:.3g}/{y:.3g} ({name})")
        if cells:
            lines.append(f"- {human_size(size)}: " + ", ".join(cells) +
                         f"; Baton no slower in {wins} of {len(cells)}")
    return "\n".join(lines)


def fmt(value, digits=3):
    if value is None:
        return "–"
    if value == 0:
        return "0"
    return f"{value:.{digits}g}"


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


# Sizes up to this many bytes are compared with the latency floor: above it the bytes matter.
FLOOR_MAX_BYTES = 64


def markdown_table(config, summary, libs, sizes, roofline, floor_us=None):
    peers = [p for p in PEERS if p in libs]
    others = rivals(libs)
    names = {lib: LIBRARIES[lib][0] for lib in libs}
    head = (["size"] + [f"busbw {names[l]}" for l in libs] +
            [f"Baton/{names[p]} busbw" for p in peers] + [f"time {names[l]} (us)" for l in libs] +
            [f"Baton/{names[p]} time" for p in peers] +
            (["Baton/fastest peer time"] if len(others) > 1 else []) +
            [f"{names[l]}/roofline" for l in libs if l.startswith("baton")] +
            (["Baton/latency floor time"] if floor_us else []) + ["check"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def get(lib, size, key):
        return summary.get(lib, {}).get(size, {}).get(key)

    for size in sizes:
        row = [human_size(size)]
        row += [fmt(get(l, size, "busbw")) for l in libs]
        row += [fmt(ratio(get("baton", size, "busbw"), get(p, size, "busbw")), 2) for p in peers]
        row += [fmt(get(l, size, "time_us")) for l in libs]
        row += [fmt(ratio(get("baton", size, "time_us"), get(p, size, "time_us")), 2)
                for p in peers]
        if len(others) > 1:
            times = [(get(p, size, "time_us"), names[p]) for p in others
                     if get(p, size, "time_us") is not None]
            best = min(times) if times else (None, "")
            row.append(f"{fmt(ratio(get('baton', size, 'time_us'), best[0]), 2)} ({best[1]})"
                       if best[0] else "–")
        row += [fmt(ratio(get(l, size, "busbw"), roofline), 2) if roofline else "–"
                for l in libs if l.startswith("baton")]
        if floor_us:
            row.append(fmt(ratio(get("baton", size, "time_us"), floor_us), 2)
                       if size <= FLOOR_MAX_BYTES else "–")
        wrong = [get(l, size, "nwrong") for l in libs]
        if any(w is None for w in wrong):
            row.append("missing")
        else:
            row.append("ok" if all(w == 0 for w in wrong) else "FAILED")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)
