"""3. stragglers: one worker 2x or 4x slower, or any worker's step 5x slower with probability
0.1 (by sleeping), under each way of training: step-time percentiles, samples/s, accuracy."""
from .common import Result

SCENARIOS = [("none", []), ("rank 1 at 2x", ["--straggle", "1:2"]),
             ("rank 1 at 4x", ["--straggle", "1:4"]),
             ("random 10% at 5x", ["--straggle-random", "0.1:5"])]
MODES = [("sync allreduce", 4, []), ("sync PS, B=0", 5, ["--mode", "ps"]),
         ("sync PS, B=1", 5, ["--mode", "ps", "--backup-workers", "1"]),
         ("async PS", 5, ["--mode", "ps", "--async"]),
         ("SSP S=4", 5, ["--mode", "ps", "--async", "--staleness", "4"]),
         ("local SGD K=8", 4, ["--mode", "local", "--average-every", "8"])]


def run(lab):
    epochs = 1
    subset = 48000
    # A straggler sleeps in proportion to its compute, so the batch is large enough (256) that
    # compute, not the 4 processes' turns on 2 cores, is most of a step.
    batch = 64 if lab.quick else 256
    base = lab.data_args(subset) + ["--epochs", str(epochs), "--batch", str(batch)]
    runs, rows = [], []
    scenarios = SCENARIOS[::2] if lab.quick else SCENARIOS
    modes = [MODES[i] for i in (0, 2, 5)] if lab.quick else MODES
    for scen, sargs in scenarios:
        for mode, ranks, margs in modes:
            r = lab.run(f"{mode}, {scen}", ranks, base + margs + sargs)
            runs.append(r)
            rows.append([scen, mode, 1e3 * r.value("step_p50_s"), 1e3 * r.value("step_p99_s"),
                         r.value("samples_per_s"), r.value("test_acc")])
    caption = (f"4 workers (PS: + 1 server rank) on 2 cores, {epochs} epoch of "
               f"{lab.train_samples(subset):,} {'synthetic' if lab.quick else 'Fashion-MNIST'} "
               f"training samples, batch {batch} per worker (lr 0.05 x 4 for allreduce and sync PS, "
               f"0.05 for async PS, SSP and local SGD); a straggler sleeps (F - 1) x its own "
               f"compute time before a step; rank 1 is a worker in every mode; step p50/p99 = "
               f"the median and 99th percentile of the time between a rank's step ends, the "
               f"largest over the ranks")
    header = ["straggler", "mode", "step p50 ms", "step p99 ms", "samples/s", "test_acc"]
    return Result(caption, header, rows, runs)


def plot(fig, result):
    ax = fig.add_subplot(1, 2, 1)
    ax2 = fig.add_subplot(1, 2, 2)
    scenarios = list(dict.fromkeys(r[0] for r in result.rows))
    xs = list(range(len(scenarios)))
    for mode in dict.fromkeys(r[1] for r in result.rows):
        part = [r for r in result.rows if r[1] == mode]
        ax.plot(xs, [r[4] for r in part], marker="o", label=mode)
        ax2.plot(xs, [r[5] for r in part], marker="o", label=mode)
    for a, yl in ((ax, "samples/s"), (ax2, "test accuracy")):
        a.set_xticks(xs)
        a.set_xticklabels(scenarios, fontsize=7)
        a.set_ylabel(yl)
        a.grid(alpha=0.3)
    ax.legend(fontsize=7)
