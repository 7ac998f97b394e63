"""1. sync-vs-async: the same 4 workers trained by allreduce, a synchronous and an asynchronous
parameter server, SSP and local SGD: accuracy per epoch, time to a target, samples/s, staleness
and loss jitter."""
from .common import Result, curves, bars

TARGET = 0.85


def run(lab):
    epochs = 1 if lab.quick else 3
    subset = None
    data = lab.data_args(subset) + ["--epochs", str(epochs), "--target-acc",
                                    str(0.5 if lab.quick else TARGET)]
    setups = [
        ("sync allreduce", 4, []),
        ("sync PS", 5, ["--mode", "ps"]),
        ("async PS", 5, ["--mode", "ps", "--async"]),
        ("SSP S=1", 5, ["--mode", "ps", "--async", "--staleness", "1"]),
        ("SSP S=4", 5, ["--mode", "ps", "--async", "--staleness", "4"]),
        ("SSP S=16", 5, ["--mode", "ps", "--async", "--staleness", "16"]),
        ("local SGD K=8", 4, ["--mode", "local", "--average-every", "8"]),
    ]
    if lab.quick:
        setups = [setups[i] for i in (0, 1, 2, 3, 6)]
    runs, rows = [], []
    for label, ranks, extra in setups:
        r = lab.run(label, ranks, data + extra)
        runs.append(r)
        sps = sorted(e["samples_per_s"] for e in r.epochs)
        rows.append([label, *[e["test_acc"] for e in r.epochs], *[None] * (epochs - len(r.epochs)),
                     r.first("target_reached_seconds"),
                     sps[len(sps) // 2] if sps else None,
                     r.value("staleness_mean"), r.value("staleness_max"),
                     r.value("loss_step_std")])
    target = 0.5 if lab.quick else TARGET
    caption = (f"4 workers (the PS runs add a server rank: 5 processes) on this 2-core machine, "
               f"{epochs} epoch(s) of {lab.train_samples(subset):,} "
               f"{'synthetic' if lab.quick else 'Fashion-MNIST'} training samples, batch 64 per "
               f"worker, default lr rules; time to {target} = seconds from the start to the end of "
               f"the first epoch whose test accuracy reached it (– = not reached); samples/s the "
               f"median over epochs; staleness and loss jitter (std of the per-step losses) of the "
               f"last epoch")
    header = ["run", *[f"test_acc ep{e + 1}" for e in range(epochs)], f"s to {target}",
              "samples/s", "staleness mean", "staleness max", "loss jitter"]
    return Result(caption, header, rows, runs)


def plot(fig, result):
    curves(fig.add_subplot(1, 2, 1), result.runs)
    bars(fig.add_subplot(1, 2, 2), [r[0] for r in result.rows],
         [r[-4] or 0 for r in result.rows], "samples/s (median over epochs)")
