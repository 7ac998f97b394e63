"""6. ema: an exponential moving average of the parameters (--ema DECAY) beside the trained
model, under a constant rate and a cosine decay."""
from matplotlib.ticker import MaxNLocator

from .common import Result

DECAYS = ["off", "0.99", "0.999", "0.9999"]


def run(lab):
    epochs = 2 if lab.quick else 4
    base = lab.data_args() + ["--epochs", str(epochs), "--warmup", "0"]
    runs, rows = [], []
    for sched in ("constant", "cosine"):
        for d in DECAYS[:2] if lab.quick else DECAYS:
            extra = ["--lr-schedule", sched] + ([] if d == "off" else ["--ema", d])
            r = lab.run(f"{sched}, ema {d}", 2, base + extra)
            r.extra = {"decay": d, "schedule": sched}
            runs.append(r)
            ema = None if d == "off" else r.value("ema_test_acc")
            rows.append([sched, d, r.value("test_acc"), ema,
                         None if ema is None else ema - r.value("test_acc")])
    steps = runs[0].value("step", 0) if runs else 0
    caption = (f"2 ranks, allreduce, {epochs} epochs of {lab.train_samples():,} "
               f"{'synthetic' if lab.quick else 'Fashion-MNIST'} training samples (batch 64 per "
               f"rank, {steps:.0f} steps in all), lr 0.1 (0.05 x 2 ranks), no warm-up; the EMA is "
               f"evaluated on the test set after each epoch")
    header = ["lr schedule", "EMA decay", "test_acc", "EMA test_acc", "EMA - model"]
    return Result(caption, header, rows, runs)


def plot(fig, result):
    for i, sched in enumerate(("constant", "cosine")):
        ax = fig.add_subplot(1, 2, i + 1)
        part = [r for r in result.runs if r.extra["schedule"] == sched]
        if part:
            r0 = part[0]
            ax.plot([e["epoch"] for e in r0.epochs], [e["test_acc"] for e in r0.epochs],
                    marker="o", color="k", label="model")
        for r in part[1:]:
            ax.plot([e["epoch"] for e in r.epochs], [e.get("ema_test_acc") for e in r.epochs],
                    marker="o", ms=3, label=f"EMA {r.extra['decay']}")
        ax.set_title(f"lr {sched}", fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch")
        ax.set_ylabel("test accuracy")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
