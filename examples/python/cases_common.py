"""What the two case studies (word2vec.py, transformer_lm.py) share: the launch
environment, the process groups, the fortunes corpus, tables and plots.

Importing this module does not import torch: `python3 cases_common.py plot SPEC.json OUT.png`
draws a plot from a spec with Debian's python3-matplotlib when the venv has no matplotlib.
"""

import datetime
import json
import os
import re
import statistics
import subprocess
import sys

FORTUNES = "/usr/share/games/fortunes"


def launcher_env():
    """(rank, size) from torchrun's, batonrun's, Open MPI's or Slurm's variables."""
    for rank_var, size_var in [("RANK", "WORLD_SIZE"), ("BATON_RANK", "BATON_WORLD_SIZE"),
                               ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                               ("SLURM_PROCID", "SLURM_NTASKS")]:
        if rank_var in os.environ and size_var in os.environ:
            return int(os.environ[rank_var]), int(os.environ[size_var])
    return 0, 1


def init_groups(backends):
    """The default group on gloo, and one group over all ranks per backend asked for.

    Both backends live in one job so that their steps can be interleaved: the
    machine's load then falls on both alike.
    """
    import torch
    import torch.distributed as dist
    if "baton" in backends:
        import baton.torch  # noqa: F401 - registers the backend
    torch.set_num_threads(1)  # the ranks share the cores
    rank, size = launcher_env()
    timeout = datetime.timedelta(seconds=120)
    store = dist.TCPStore(os.environ.get("MASTER_ADDR", "127.0.0.1"),
                          int(os.environ.get("MASTER_PORT", "29513")), size, rank == 0,
                          timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=size, timeout=timeout)
    groups = {}
    for b in backends:
        groups[b] = dist.group.WORLD if b == "gloo" else dist.new_group(backend=b, timeout=timeout)
    return rank, size, groups


def fortunes(path=FORTUNES):
    """The fortunes (texts between '%' lines) of every file in Debian's fortunes package."""
    try:
        names = sorted(n for n in os.listdir(path)
                       if "." not in n and os.path.isfile(os.path.join(path, n)))
    except FileNotFoundError as e:
        raise SystemExit(f"{e} (apt-get install fortunes, or pass --corpus DIR)") from e
    if not names:
        raise SystemExit(f"{path}: no fortune files (apt-get install fortunes)")
    out = []
    for n in names:
        with open(os.path.join(path, n), encoding="utf-8", errors="replace") as f:
            text = f.read()
        out += [t.strip() for t in re.split(r"^%\s*$", text, flags=re.M) if t.strip()]
    return out


def median_ms(times, skip=0.1):
    """Median in ms of the steps after the first tenth (warm-up: allocations, connections)."""
    steady = times[int(len(times) * skip):] or times
    return statistics.median(steady) * 1e3


def table(headers, rows):
    """A Markdown table (so it pastes into docs/ as printed)."""
    cells = [[str(c) for c in r] for r in rows]
    width = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, width)) + " |"  # noqa: E731
    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in width) + "|"] +
                     [line(r) for r in cells])


def draw(spec, out):
    """spec: {"title", "panels": [{"title", "xlabel", "ylabel", "kind": "line"|"bar", "log": bool,
    "series": [{"label", "x", "y"}]}]} (bar: one series, x the labels)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = spec["panels"]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.0), squeeze=False)
    for ax, p in zip(axes[0], panels):
        if p.get("kind") == "bar":
            s = p["series"][0]
            ax.bar(range(len(s["y"])), s["y"], color="tab:blue")
            ax.set_xticks(range(len(s["x"])))
            ax.set_xticklabels(s["x"], rotation=35, ha="right", fontsize=8)
        else:
            for s in p["series"]:
                ax.plot(s["x"], s["y"], label=s["label"], linestyle=s.get("style", "-"))
            ax.legend(fontsize=7)
        if p.get("log"):
            ax.set_yscale("log")
        ax.set_title(p["title"], fontsize=10)
        ax.set_xlabel(p.get("xlabel", ""))
        ax.set_ylabel(p.get("ylabel", ""))
        ax.grid(alpha=0.3)
    fig.suptitle(spec.get("title", ""), fontsize=11)
    fig.tight_layout()
    fig.savefig(out, dpi=90)


def plot(spec, out):
    """Draws spec into out (PNG) with matplotlib: the venv's, else Debian's python3-matplotlib
    (scripts/setup.sh installs it) in a child /usr/bin/python3. Returns a note on failure."""
    with open(out + ".json", "w", encoding="utf-8") as f:
        json.dump(spec, f)
    try:
        draw(spec, out)
        return None
    except ImportError:
        pass
    run = subprocess.run(["/usr/bin/python3", os.path.abspath(__file__), "plot", out + ".json",
                          out],
                         capture_output=True, text=True, check=False)
    if run.returncode != 0:
        return f"no plot (no matplotlib here or in /usr/bin/python3): {run.stderr.strip()[-300:]}"
    return None


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "plot":
        with open(sys.argv[2], encoding="utf-8") as f:
            draw(json.load(f), sys.argv[3])
    else:
        sys.exit("usage: cases_common.py plot SPEC.json OUT.png")
