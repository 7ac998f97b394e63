"""The case studies (examples/python/word2vec.py, transformer_lm.py) in --quick mode on "baton".

    cases_test.py EXAMPLES_DIR RANKS

Runs each on RANKS ranks in a scratch directory and checks what they wrote:
finite losses that fall, the three word2vec synchronisations (dense allreduce,
sparse allgatherv, parameter server) ending with the same weights up to
rounding, DDP and FSDP giving the same loss curve, replicas agreeing over the
ranks, and the table and plot files. Skips (77) without Debian's fortunes.
"""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

examples, ranks = sys.argv[1], sys.argv[2]
if not os.path.isdir("/usr/share/games/fortunes"):
    print("skipped: no /usr/share/games/fortunes (apt-get install fortunes; scripts/setup.sh does)")
    sys.exit(77)
launch = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launch.py")
scratch = tempfile.mkdtemp(prefix="baton_cases_")


def fail(msg):
    sys.exit(f"FAIL: {msg}")


def run(script, out):
    cmd = [sys.executable, launch, "-n", ranks, "--timeout", "150",
           os.path.join(examples, script), "--quick", "--backends", "baton", "--out", out]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=scratch)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr[-4000:])
    if r.returncode != 0:
        fail(f"{script} exited with {r.returncode}: {' '.join(cmd)}")
    for ext in [".md", ".json", ".png"]:
        if not os.path.getsize(os.path.join(scratch, out + ext)):
            fail(f"{script}: {out + ext} is empty")
    with open(os.path.join(scratch, out + ".md"), encoding="utf-8") as f:
        md = f.read()
    if "|---" not in md or "baton" not in md:
        fail(f"{script}: no table in {out}.md")
    with open(os.path.join(scratch, out + ".json"), encoding="utf-8") as f:
        return json.load(f)


def falling(name, curve):
    values = [v for _, v in curve]
    if not all(math.isfinite(v) for v in values):
        fail(f"{name}: a loss is not finite: {values}")
    if not values[-1] < values[0] - 0.05:
        fail(f"{name}: the loss does not fall: {values}")


w2v = run("word2vec.py", "w2v")
if not w2v["agree"]:
    fail("word2vec: the replicas differ between ranks")
for name, c in w2v["configs"].items():
    falling(f"word2vec {name} (held-out)", [(s, h) for s, _, h in c["curve"]])
scale = w2v["scale"]
for name, diff in w2v["max_abs_diff"].items():  # each against baton/dense
    if not diff <= 1e-5 * max(scale, 1.0):
        fail(f"word2vec: {name} ends {diff} away from baton/dense (weights up to {scale})")
dense, sparse = w2v["configs"]["baton/dense"], w2v["configs"]["baton/sparse"]
if not sparse["sent_kib"] < dense["sent_kib"]:
    fail(f"word2vec: sparse sends {sparse['sent_kib']} KiB a step, dense {dense['sent_kib']}")
if not w2v["neighbours"]:
    fail("word2vec: no nearest neighbours")

tf = run("transformer_lm.py", "tf")
if not tf["agree"]:
    fail("transformer: the DDP replicas differ between ranks")
runs = tf["runs"]
for name, r in runs.items():
    falling(f"transformer {name} (training)", r["train"])
    falling(f"transformer {name} (held-out)", r["held"])
ddp, fsdp = runs["baton/ddp adam warm-up"]["train"], runs["baton/fsdp adam warm-up"]["train"]
worst = max(abs(a[1] - b[1]) for a, b in zip(ddp, fsdp))
if not worst < 1e-3:
    fail(f"transformer: DDP and FSDP losses differ by up to {worst}")
if "baton/ddp lamb warm-up" not in runs:
    fail("transformer: no LAMB run")
shutil.rmtree(scratch)
print(f"cases: word2vec (dense/sparse/ps within {max(w2v['max_abs_diff'].values()):.1e}) and the "
      f"Transformer (DDP/FSDP within {worst:.1e}) on {ranks} ranks of baton")
