"""5. local-sgd: averaging the model every K steps against allreduce bytes, with post-local SGD
(synchronous first) and K that grows as the loss flattens (--adaptive-k)."""
from matplotlib.ticker import MaxNLocator

from .common import Result

KS = [1, 2, 4, 8, 16, 64]
RANKS = 4


def run(lab):
    epochs = 2 if lab.quick else 4
    base = lab.data_args() + ["--epochs", str(epochs)]
    setups = [(f"K={k}", ["--average-every", str(k)]) for k in ([1, 8] if lab.quick else KS)]
    setups += [("post-local (1 epoch sync, then K=8)", ["--post-local", "1", "--average-every", "8"]),
               ("adaptive K from 2", ["--adaptive-k", "--average-every", "2"])]
    runs, rows = [], []
    mb = lab.param_bytes() / 1e6
    for label, extra in setups:
        r = lab.run(label, RANKS, base + ["--mode", "local"] + extra)
        runs.append(r)
        averages = [e.get("averages", 0) for e in r.epochs]
        per_epoch = sum(averages) / len(averages) if averages else float("nan")
        rows.append([label, " ".join(str(int(e.get("average_every", 0))) for e in r.epochs),
                     per_epoch, per_epoch * mb, r.value("test_acc"), r.value("samples_per_s")])
    caption = (f"Local SGD on {RANKS} ranks, {epochs} epochs of {lab.train_samples():,} "
               f"{'synthetic' if lab.quick else 'Fashion-MNIST'} training samples, batch 64 per "
               f"rank, lr 0.05 (one rank's batch: unscaled); averages = allreduces of the model "
               f"(or, in synchronous epochs, of the gradients) per epoch; MB/epoch = averages x "
               f"the {mb:.2f} MB float32 model, the payload each rank hands the allreduce (a ring "
               f"moves 2 (n-1)/n of it per rank each way); K per epoch as the run used it "
               f"(0: synchronous)")
    header = ["run", "K per epoch", "averages/epoch", "allreduce MB/epoch", "test_acc",
              "samples/s"]
    return Result(caption, header, rows, runs)


def plot(fig, result):
    ax = fig.add_subplot(1, 2, 1)
    for row in result.rows:
        ax.scatter([max(row[3], 1e-3)], [row[4]])
        ax.annotate(row[0].split(" (")[0], (max(row[3], 1e-3), row[4]), fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("allreduce MB per epoch per rank")
    ax.set_ylabel("test accuracy")
    ax.grid(alpha=0.3)
    ax2 = fig.add_subplot(1, 2, 2)
    for r in result.runs:
        if r.epochs:
            ax2.plot([e["epoch"] for e in r.epochs], [e["test_acc"] for e in r.epochs],
                     marker="o", ms=3, label=r.label.split(" (")[0])
    ax2.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("test accuracy")
    ax2.legend(fontsize=7)
    ax2.grid(alpha=0.3)
