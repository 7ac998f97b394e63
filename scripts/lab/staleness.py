"""2. staleness: asynchronous PS with bounded staleness S (SSP) from 0 to unbounded, with the
trainer's momentum compensation (explicit momentum lowered by 1 - 1/W for W workers, the
implicit momentum of asynchrony; the default) and without it (--momentum 0.9 kept)."""
import math

from .common import Result

BOUNDS = ["0", "1", "2", "4", "8", "16", "unbounded"]
WORKERS = 4


def diverged(run):
    loss = run.value("loss")
    return not run.ok or math.isnan(loss) or loss > 2.0


def run(lab):
    epochs = 1 if lab.quick else 2
    subset = 20000
    base = lab.data_args(subset) + ["--epochs", str(epochs), "--mode", "ps", "--async"]
    runs, rows = [], []
    bounds = ["0", "4", "unbounded"] if lab.quick else BOUNDS
    for comp in (True, False):
        for s in bounds:
            extra = [] if s == "unbounded" else ["--staleness", s]
            if not comp:
                extra += ["--momentum", "0.9"]
            label = f"S={s}, {'compensated' if comp else 'momentum 0.9'}"
            r = lab.run(label, WORKERS + 1, base + extra)
            r.extra = {"S": s, "compensated": comp}
            runs.append(r)
            rows.append([s, "yes" if comp else "no (0.9)", r.value("test_acc"),
                         r.value("loss"), r.value("loss_step_std"), r.value("staleness_mean"),
                         r.value("staleness_max"), r.value("clock_gap_max"),
                         "yes" if diverged(r) else "no"])
    caption = (f"Asynchronous PS, {WORKERS} workers + 1 server (5 processes on 2 cores), "
               f"{epochs} epoch(s) of {lab.train_samples(subset):,} "
               f"{'synthetic' if lab.quick else 'Fashion-MNIST'} training samples, batch 64, "
               f"lr 0.05; compensated: explicit momentum 0.9 - (1 - 1/{WORKERS}) = 0.15 (the "
               f"trainer's default with --async); diverged = last epoch's training loss NaN or "
               f"above 2.0 (chance is 2.30); staleness in updates between a gradient's pull and "
               f"its apply, clock gap = the most pushes a worker ran ahead (bounded by S)")
    header = ["S", "momentum compensation", "test_acc", "train loss", "loss jitter",
              "staleness mean", "staleness max", "clock gap max", "diverged"]
    return Result(caption, header, rows, runs)


def plot(fig, result):
    bounds = list(dict.fromkeys(r[0] for r in result.rows))
    xs = list(range(len(bounds)))
    ax = fig.add_subplot(1, 2, 1)
    ax2 = fig.add_subplot(1, 2, 2)
    for comp, name in ((True, "compensated"), (False, "momentum 0.9")):
        part = [r for r in result.rows if (r[1] == "yes") == comp]
        ax.plot(xs, [r[2] for r in part], marker="o", label=name)
        ax2.plot(xs, [r[5] for r in part], marker="o", label=f"{name}: mean")
        ax2.plot(xs, [r[6] for r in part], marker="x", ls="--", label=f"{name}: max")
    for a, yl in ((ax, "test accuracy"), (ax2, "staleness (updates)")):
        a.set_xticks(xs)
        a.set_xticklabels(bounds)
        a.set_xlabel("staleness bound S")
        a.set_ylabel(yl)
        a.legend(fontsize=7)
        a.grid(alpha=0.3)
