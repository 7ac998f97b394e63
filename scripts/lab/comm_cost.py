"""7. comm-cost: the gradient exchange's time per step on 4 simulated hosts (network namespaces,
tbf-shaped links, scripts/netns.sh) at 100 Mbit/s and 1 Gbit/s, for each --algo and the
parameter server, beside the prediction of Baton's cost model (baton-topo --json, the tuning
layer's model) for the gradient's size; fp16 gradients and bucket sizes as extra rows."""
import json
import math
import os
import random
import subprocess

from .common import Result

HOSTS = 4
RATES = [("100mbit", 100), ("1gbit", 1000)]
ALGOS = ["ring", "rhd", "tree", "hier", "auto"]


def skip_reason(root):
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    if not os.access(os.path.join(root, "scripts", "netns.sh"), os.X_OK):
        return "scripts/netns.sh missing"
    if subprocess.run(["which", "tc"], capture_output=True).returncode != 0:
        return "tc (iproute2) missing"
    return ""


def predictions(lab, mbps):
    """allreduce candidates per size (bytes -> {algo: us}) from the cost model."""
    topo = os.path.join(lab.build, "src", "baton-topo")
    out = subprocess.run([topo, "--json", "--ranks", "1", "--hosts", str(HOSTS), "--nic-mbps",
                          str(mbps)], capture_output=True, text=True, check=True,
                         env=dict(os.environ, BATON_ALGO=""))
    table = {}
    for a in json.loads(out.stdout)["algorithms"]:
        if a["collective"] == "allreduce":
            table[a["bytes"]] = dict(a["candidates"], auto=a["predicted_us"])
    return table


def predict(table, nbytes, algo):
    """The model's time in seconds for nbytes, log-log between the two sizes around it."""
    sizes = sorted(table)
    lo = max([s for s in sizes if s <= nbytes], default=sizes[0])
    hi = min([s for s in sizes if s >= nbytes], default=sizes[-1])
    a, b = table[lo].get(algo), table[hi].get(algo)
    if a is None or b is None:
        return float("nan")
    if lo == hi:
        return a * 1e-6
    t = (math.log(nbytes) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return math.exp(math.log(a) + t * (math.log(b) - math.log(a))) * 1e-6


def run(lab):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    pbytes = lab.param_bytes()
    steps = 5 if lab.quick else 20
    caption = (f"{HOSTS} hosts x 1 rank in network namespaces (scripts/netns.sh, each host's link "
               f"shaped by tbf), the {pbytes / 1e6:.3f} MB float32 gradient of the "
               f"{'784-32-10' if lab.quick else '784-512-256-10'} model, {steps} steps of batch 64 "
               f"per rank, all {HOSTS} processes on this 2-core machine; comm ms/step = "
               f"comm_wait_frac x the epoch's training time / steps (the time ranks were blocked "
               f"on communication; with --no-overlap that is the whole allreduce); predicted = "
               f"Baton's cost model (baton-topo --json --hosts {HOSTS} --nic-mbps M, log-log "
               f"between its sizes) for the gradient's bytes; the PS row's prediction is the "
               f"server's link: {HOSTS - 1} gradients in and {HOSTS - 1} models out at the rate")
    header = ["link", "run", "comm ms/step", "predicted ms", "measured / predicted",
              "step p50 ms", "samples/s"]
    reason = skip_reason(root)
    if reason:
        return Result(caption, header, [], [], skipped=reason)
    tag = f"lab{os.getpid() % 10000000}"
    netns = os.path.join(root, "scripts", "netns.sh")
    rows, runs = [], []
    for rate, mbps in RATES[1:] if lab.quick else RATES:
        subprocess.run([netns, "down", tag, str(HOSTS)], capture_output=True)
        up = subprocess.run([netns, "up", tag, str(HOSTS), rate], capture_output=True, text=True)
        if up.returncode != 0:
            subprocess.run([netns, "down", tag, str(HOSTS)], capture_output=True)
            return Result(caption, header, rows, runs,
                          skipped=f"scripts/netns.sh up failed: {up.stderr.strip()[-200:]}")
        try:
            table = predictions(lab, mbps)
            setups = [(f"allreduce --algo {a}, no overlap", ["--algo", a, "--no-overlap"],
                       predict(table, pbytes, a)) for a in ALGOS]
            setups += [("fp16 gradients, auto, no overlap", ["--fp16-allreduce", "--no-overlap"],
                        predict(table, pbytes // 2, "auto")),
                       ("overlap, buckets 25 MB (first 1 MB)", [], None),
                       ("overlap, buckets 0.25 MB", ["--bucket-cap-mb", "0.25",
                                                     "--first-bucket-mb", "0.25"], None),
                       ("sync PS (1 server, 3 workers)", ["--mode", "ps"],
                        (HOSTS - 1) * pbytes * 8 / (mbps * 1e6))]
            if lab.quick:
                setups = [setups[i] for i in (0, 4, 5, 7, 8)]
            for label, extra, pred in setups:
                args = lab.data_args() + ["--epochs", "1", "--max-steps", str(steps)] + extra
                r = lab.run(f"{rate}: {label}", HOSTS, args,
                            launch=lambda path, a=args: launch(lab, tag, a, path))
                runs.append(r)
                n = r.value("step", 0) or float("nan")
                comm = r.value("comm_wait_frac") * r.value("seconds") / n
                rows.append([rate, label, 1e3 * comm, None if pred is None else 1e3 * pred,
                             None if pred is None else comm / pred,
                             1e3 * r.value("step_p50_s"), r.value("samples_per_s")])
        finally:
            subprocess.run([netns, "down", tag, str(HOSTS)], capture_output=True)
    return Result(caption, header, rows, runs)


def launch(lab, tag, args, json_path):
    """One rank per namespace host, rank 0's host the root (as examples/trainer/scaling.sh)."""
    port = 20000 + random.randrange(20000)
    env = dict(os.environ, BATON_SOCKET_IFNAME="eth0", BATON_TIMEOUT="120")
    procs = []
    for i in range(HOSTS):
        cmd = ["ip", "netns", "exec", f"{tag}-h{i}", lab.batonrun, "-n", "1", "--world-size",
               str(HOSTS), "--rank-offset", str(i), "--root", f"10.77.0.1:{port}", lab.train,
               "--no-progress", "--blas-threads", "1", *args]
        if i == 0:
            cmd += ["--json", json_path]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    rc, out = 0, ""
    for p in procs:
        try:
            o, _ = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            p.kill()
            o, _ = p.communicate()
            rc = rc or 124
        rc = rc or p.returncode
        out += o
    return rc, out


def plot(fig, result):
    rates = list(dict.fromkeys(r[0] for r in result.rows))
    for i, rate in enumerate(rates):
        ax = fig.add_subplot(1, len(rates), i + 1)
        part = [r for r in result.rows if r[0] == rate]
        ys = list(range(len(part)))
        ax.barh([y - 0.2 for y in ys], [r[2] for r in part], height=0.4, label="measured")
        ax.barh([y + 0.2 for y in ys], [r[3] or 0 for r in part], height=0.4, label="predicted")
        ax.set_yticks(ys)
        ax.set_yticklabels([r[1] for r in part], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("ms per step")
        ax.set_title(rate, fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3, axis="x")
