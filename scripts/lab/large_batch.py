"""4. large-batch: the global batch from 64 to 16K (2 ranks x batch x accumulation), the rate
scaled by none, sqrt or linear from batch 64, with or without a warm-up, by SGD, LARS and LAMB,
under the same epochs and under the same number of steps: test accuracy and train-test gap."""
import math

from .common import Result

RANKS = 2
# global batch: (per-rank batch, accumulation)
SIZES = {64: (32, 1), 512: (64, 4), 4096: (512, 4), 16384: (1024, 8)}
QUICK_SIZES = {64: (32, 1), 256: (32, 4)}
# (optimizer, --lr at batch 64, trainer options)
OPTIMIZERS = {"sgd": 0.05, "lars": 2.0, "lamb": 0.0035}
# The grid that fits 5 minutes: SGD with every scaling (none without warm-up: it would ramp from
# --lr to --lr; sqrt with it; linear with and without); LARS with linear scaling and LAMB with
# sqrt scaling (the papers' rules), with warm-up. 12 steps divide evenly at every size.
SAME_EPOCHS = [("sgd", "none", False), ("sgd", "sqrt", True), ("sgd", "linear", False),
               ("sgd", "linear", True), ("lars", "linear", True), ("lamb", "sqrt", True)]
SAME_STEPS = [("sgd", "linear", True), ("lars", "linear", True), ("lamb", "sqrt", True)]


def run(lab):
    sizes = QUICK_SIZES if lab.quick else SIZES
    train = lab.train_samples()
    epochs = 2 if lab.quick else 1
    steps_budget = 6 if lab.quick else 12
    runs, rows = [], []
    grids = (("same epochs", SAME_EPOCHS), ("same steps", SAME_STEPS))
    if lab.quick:
        grids = (("same epochs", SAME_EPOCHS[3:]), ("same steps", SAME_STEPS[:1]))
    # At the base batch every scaling gives --lr and a warm-up ramps from --lr to --lr: the same
    # run, trained once and shown in each of its rows.
    done = {}
    for budget, grid in grids:
        for opt, scaling, warm in grid:
            for gb, (b, acc) in sizes.items():
                per_epoch = (train // RANKS) // (b * acc)
                if budget == "same epochs":
                    ep, max_steps, total = epochs, None, per_epoch * epochs
                else:
                    ep = math.ceil(steps_budget / per_epoch)
                    max_steps = math.ceil(steps_budget / ep)
                    total = ep * min(per_epoch, max_steps)
                warmup = max(1, total // 4) if warm else 0
                args = lab.data_args() + [
                    "--epochs", str(ep), "--batch", str(b), "--accumulate", str(acc),
                    "--base-batch", "64", "--optimizer", opt, "--lr", str(OPTIMIZERS[opt]),
                    "--lr-scaling", scaling, "--warmup", str(warmup)]
                if max_steps is not None and max_steps < per_epoch:
                    args += ["--max-steps", str(max_steps)]
                label = f"{budget}, {opt}, {scaling}, {'warm-up' if warm else 'no warm-up'}, {gb}"
                key = (budget, opt, gb) if gb == 64 else label
                r = done.get(key)
                if r is None:
                    r = done[key] = lab.run(label, RANKS, args)
                    r.extra = {"budget": budget, "opt": opt, "scaling": scaling, "warm": warm,
                               "global": gb}
                    runs.append(r)
                rows.append([budget, opt, scaling, "yes" if warm else "no", gb,
                             f"{RANKS}x{b}x{acc}", r.value("step", 0),
                             r.config.get("lr_peak", float("nan")), r.value("test_acc"),
                             r.value("train_acc") - r.value("test_acc")])
    caption = (f"{RANKS} ranks x per-rank batch x accumulation on {train:,} "
               f"{'synthetic' if lab.quick else 'Fashion-MNIST'} training samples; same epochs = "
               f"{epochs} epoch(s), same steps = {steps_budget} updates whatever the batch; rates "
               f"at batch 64: sgd 0.05, lars 2 (trust 0.001), lamb 0.0035, scaled to the global "
               f"batch; warm-up = linear over the first quarter of the run's steps, then cosine; "
               f"the grid (to fit 5 minutes; sgd at batch 64 is one run, the same in every row): sgd none (a warm-up would be the same run), sgd "
               f"sqrt + warm-up, sgd linear with and without warm-up, lars linear + warm-up, "
               f"lamb sqrt + warm-up; same steps only for the three linear/sqrt with warm-up; "
               f"gap = the last epoch's training accuracy (running, over the "
               f"epoch, so below the end-of-epoch model's in short runs) - test accuracy")
    header = ["budget", "optimizer", "lr scaling", "warm-up", "global batch", "ranks x batch x acc",
              "steps", "peak lr", "test_acc", "train-test gap"]
    return Result(caption, header, rows, runs)


def plot(fig, result):
    for i, budget in enumerate(("same epochs", "same steps")):
        ax = fig.add_subplot(1, 2, i + 1)
        keys = []
        for row in result.rows:
            k = tuple(row[1:4])
            if row[0] == budget and k not in keys:
                keys.append(k)
        for opt, scaling, warm in keys:
            part = [r for r in result.rows if r[0] == budget and tuple(r[1:4]) == (opt, scaling, warm)]
            ax.plot([r[4] for r in part], [r[8] for r in part], marker="o", ms=3,
                    ls="-" if warm == "yes" else ":",
                    label=f"{opt} {scaling}{' +wu' if warm == 'yes' else ''}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("global batch")
        ax.set_ylabel("test accuracy")
        ax.set_ylim(0, 1)
        ax.set_title(budget, fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
