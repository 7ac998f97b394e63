"""The trainer's experiment families (docs/trainer.md, "Experiments"). Each is a module with
run(lab) -> common.Result and plot(fig, result); FAMILIES maps the command-line name to it, in
the order `all` runs them. A new family is one module and one line here."""
from . import (comm_cost, ema, large_batch, local_sgd, staleness, stragglers, sync_vs_async)

FAMILIES = {
    "sync-vs-async": sync_vs_async,
    "staleness": staleness,
    "stragglers": stragglers,
    "large-batch": large_batch,
    "local-sgd": local_sgd,
    "ema": ema,
    "comm-cost": comm_cost,
}
