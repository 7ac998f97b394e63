"""What every experiment family shares: launching baton-train under batonrun, reading its JSON
lines, and writing NAME.md (a captioned table), NAME.png (matplotlib) and NAME.json (raw)."""
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

# Fashion-MNIST's model (784-512-256-10): parameters and float32 gradient bytes.
HIDDEN = (512, 256)


def param_count(hidden, features=784, classes=10):
    sizes = [features, *hidden, classes]
    return sum(a * b + b for a, b in zip(sizes, sizes[1:]))


@dataclass
class Run:
    """One baton-train job: its configuration line, its epoch records, its wall time."""
    label: str
    args: list
    config: dict
    epochs: list
    wall_s: float
    ok: bool
    error: str = ""
    extra: dict = field(default_factory=dict)  # the family's own labels of the run (plots)

    @property
    def last(self):
        return self.epochs[-1] if self.epochs else {}

    def value(self, key, default=float("nan")):
        v = self.last.get(key, default)
        return default if v is None else v

    def first(self, key):
        """The first epoch record's value of key (e.g. target_reached_seconds), else None."""
        for r in self.epochs:
            if key in r:
                return r[key]
        return None


@dataclass
class Result:
    """What a family hands back: a caption, a table and the raw runs (the plot is drawn by the
    family's plot(result, path) function)."""
    caption: str
    header: list
    rows: list
    runs: list = field(default_factory=list)
    skipped: str = ""
    extra: dict = field(default_factory=dict)


class Lab:
    """The trainer's launcher for one family: quick (synthetic data) or real (Fashion-MNIST)."""

    def __init__(self, build, quick, log=sys.stderr):
        self.build = build
        self.quick = quick
        self.log = log
        self.batonrun = os.path.join(build, "src", "batonrun")
        self.train = os.path.join(build, "examples", "trainer", "baton-train")
        for f in (self.batonrun, self.train):
            if not os.access(f, os.X_OK):
                raise SystemExit(f"experiments: {f} missing (build first: ninja -C {build})")
        self.hidden = (32,) if quick else HIDDEN
        self.runs = []

    def data_args(self, subset=None):
        """The data: a small synthetic set in quick mode, else Fashion-MNIST (its first `subset`
        training samples when given)."""
        if self.quick:
            return ["--synthetic", "1600", "--hidden", ",".join(map(str, self.hidden))]
        return ["--train-subset", str(subset)] if subset else []

    def train_samples(self, subset=None):
        return 1600 if self.quick else (subset or 60000)

    def param_bytes(self):
        return 4 * param_count(self.hidden)

    def _command(self, ranks, args, json_path):
        return [self.batonrun, "-n", str(ranks), self.train, "--no-progress", "--blas-threads",
                "1", "--json", json_path, *args]

    def run(self, label, ranks, args, timeout=240, env=None, launch=None):
        """Trains under batonrun with `ranks` ranks (or via `launch(json_path)`, which returns the
        exit status, for other launches); returns a Run (ok False with the error on failure)."""
        fd, path = tempfile.mkstemp(prefix="lab", suffix=".json")
        os.close(fd)
        start = time.monotonic()
        error = ""
        try:
            if launch is not None:
                rc, out = launch(path)
            else:
                e = dict(os.environ, BATON_SOCKET_IFNAME="lo", BATON_TIMEOUT="120")
                e.update(env or {})
                p = subprocess.run(self._command(ranks, args, path), env=e, timeout=timeout,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                rc, out = p.returncode, p.stdout
            if rc != 0:
                error = f"exit {rc}: " + " | ".join(out.strip().splitlines()[-3:])
        except subprocess.TimeoutExpired:
            error = f"timed out after {timeout} s"
        wall = time.monotonic() - start
        config, epochs = {}, []
        try:
            with open(path) as f:
                for line in f:
                    if not line.strip():
                        continue
                    # A diverged run's loss is printed as nan (or -nan, inf): not JSON.
                    try:
                        rec = json.loads(re.sub(r"(?<=[:\[ ])-?nan\b", "NaN",
                                                re.sub(r"(?<=[:\[ ])(-?)inf\b", r"\1Infinity",
                                                       line)))
                    except json.JSONDecodeError as e:
                        error = error or f"bad JSON line ({e}): {line[:120]}"
                        continue
                    if "config" in rec:
                        config = rec["config"]
                    elif "epoch" in rec:
                        epochs.append(rec)
        finally:
            os.unlink(path)
        if not error and not epochs:
            error = "no epoch records"
        run = Run(label, list(args), config, epochs, wall, not error, error)
        last = run.last
        print(f"  {label}: {'ok' if run.ok else 'FAILED ' + error} ({wall:.1f} s"
              f"{', test_acc %.4f' % last['test_acc'] if 'test_acc' in last else ''})",
              file=self.log, flush=True)
        self.runs.append(run)
        return run


def fmt(v, digits=4):
    """A table cell: numbers rounded, NaN/None as a dash."""
    if v is None:
        return "–"
    if isinstance(v, str):
        return v
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return "nan" if math.isnan(v) else "inf"
    if isinstance(v, int):
        return f"{v:,}"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.1f}"
    if abs(v) >= 10:
        return f"{v:.2f}"
    return f"{v:.{digits}f}"


def load(out_dir, name):
    """The Result a family wrote to DIR/NAME.json (to draw its table and plot again)."""
    with open(os.path.join(out_dir, name + ".json")) as f:
        raw = json.load(f)
    runs = [Run(r["label"], r["args"], r["config"], r["epochs"], r["wall_s"], r["ok"], r["error"],
                r.get("extra", {})) for r in raw["runs"]]
    return raw["quick"], Result(raw["caption"], raw["header"], raw["rows"], runs, raw["skipped"],
                                raw["extra"])


def markdown(result):
    lines = [f"*{result.caption}*", ""]
    if result.skipped:
        lines.append(f"Skipped: {result.skipped}")
        return "\n".join(lines) + "\n"
    lines.append("| " + " | ".join(result.header) + " |")
    lines.append("| " + " | ".join(["---"] + ["---:"] * (len(result.header) - 1)) + " |")
    for row in result.rows:
        lines.append("| " + " | ".join(fmt(c) for c in row) + " |")
    return "\n".join(lines) + "\n"


def write(name, result, out_dir, plot, quick):
    """DIR/NAME.md, DIR/NAME.json and DIR/NAME.png; returns the Markdown."""
    os.makedirs(out_dir, exist_ok=True)
    md = markdown(result)
    with open(os.path.join(out_dir, name + ".md"), "w") as f:
        f.write(f"### {name}\n\n" + md)
    raw = {"family": name, "quick": quick, "caption": result.caption, "header": result.header,
           "rows": result.rows, "skipped": result.skipped, "extra": result.extra,
           "runs": [{"label": r.label, "args": r.args, "ok": r.ok, "error": r.error,
                     "wall_s": r.wall_s, "extra": r.extra, "config": r.config,
                     "epochs": r.epochs}
                    for r in result.runs]}
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump(raw, f, indent=1, allow_nan=True)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig = plt.figure(figsize=(10, 4.2))
    if result.skipped:
        fig.text(0.5, 0.5, f"{name}: skipped\n{result.skipped}", ha="center", va="center")
    else:
        plot(fig, result)
    fig.suptitle(f"{name}{' (quick)' if quick else ''}", fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, name + ".png"), dpi=80)
    plt.close(fig)
    return md


def curves(ax, runs, key="test_acc", xlabel="epoch", ylabel=None):
    """Each run's key per epoch."""
    for r in runs:
        if r.epochs:
            ax.plot([e["epoch"] for e in r.epochs], [e.get(key, float("nan")) for e in r.epochs],
                    marker="o", ms=3, label=r.label)
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel or key)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)


def bars(ax, labels, values, ylabel):
    ax.barh(range(len(labels)), values)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(ylabel)
    ax.grid(alpha=0.3, axis="x")
