"""8. batch-norm: the LeNet-5-size CNN without batch norm, with per-rank batch norm (each rank's
statistics over its own batch) and with SyncBN (--sync-bn: statistics over every rank's batch, as
torch's SyncBatchNorm), at small and ordinary per-rank batches: per-rank BN over a few samples
normalises with noisy statistics, which SyncBN repairs at the price of allreduces in every
forward and backward pass."""
from matplotlib.ticker import MaxNLocator

from .common import Result

RANKS = 4
VARIANTS = [("no BN", []), ("per-rank BN", ["--batch-norm"]),
            ("SyncBN", ["--batch-norm", "--sync-bn"])]


def run(lab):
    epochs = 2 if lab.quick else 3
    if lab.quick:
        # Without BN the CNN needs a small rate on the synthetic set (docs/trainer.md).
        data = ["--synthetic", "1600", "--lr", "0.02", "--lr-scaling", "none"]
    else:
        # The default rate is meant for 64 samples: at per-rank batch 8 the rate scaled from
        # one rank's batch would be 8x too high (every model diverges).
        data = ["--base-batch", "64"]
    runs, rows = [], []
    for batch in (8, 64):
        for name, flags in VARIANTS:
            args = data + ["--model", "cnn", "--batch", str(batch), "--epochs", str(epochs)] + flags
            r = lab.run(f"batch {batch}, {name}", RANKS, args)
            r.extra = {"batch": batch, "variant": name}
            runs.append(r)
            last = r.last
            rows.append([batch, name, r.value("test_acc"), r.value("test_loss"),
                         r.value("train_acc"), last.get("samples_per_s"),
                         last.get("comm_wait_frac")])
    caption = (f"{RANKS} ranks, allreduce, --model cnn (LeNet-5 size), {epochs} epochs of "
               f"{lab.train_samples():,} {'synthetic' if lab.quick else 'Fashion-MNIST'} training "
               f"samples at per-rank batch 8 (global 32) and 64 (global 256), lr 0.05 per 64 "
               f"samples scaled linearly by the global batch (0.025 and 0.2)"
               f"{' (quick: lr 0.02, unscaled)' if lab.quick else ''}; SyncBN allreduces the "
               f"statistics of both convolutions in every forward and backward pass")
    header = ["per-rank batch", "model", "test_acc", "test_loss", "train_acc", "samples/s",
              "comm wait"]
    return Result(caption, header, rows, runs)


def plot(fig, result):
    for i, batch in enumerate((8, 64)):
        ax = fig.add_subplot(1, 2, i + 1)
        for r in (r for r in result.runs if r.extra["batch"] == batch):
            ax.plot([e["epoch"] for e in r.epochs], [e["test_acc"] for e in r.epochs],
                    marker="o", ms=3, label=r.extra["variant"])
        ax.set_title(f"per-rank batch {batch}", fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch")
        ax.set_ylabel("test accuracy")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
