"""examples/python/ddp_fashion_mnist.py, a short run on "baton" and on "gloo".

    example_test.py EXAMPLE RANKS STEPS

Both runs start from the same seed and see the same batches (Fashion-MNIST
when Debian's dataset-fashion-mnist is installed, else --synthetic data); each
must finish with its replicas agreeing, and the two runs' final loss and
parameter sums must agree up to the rounding of different reduction orders.
"""

import math
import os
import subprocess
import sys

example, ranks, steps = sys.argv[1], sys.argv[2], sys.argv[3]
launch = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launch.py")
data = "/usr/share/datasets/fashion-mnist"
extra = [] if os.path.exists(os.path.join(data, "train-images-idx3-ubyte.gz")) else \
    ["--synthetic", "4096"]
results = {}
for backend in ["baton", "gloo"]:
    cmd = [sys.executable, launch, "-n", ranks, "--timeout", "150", example, "--backend", backend,
           "--max-steps", steps] + extra
    run = subprocess.run(cmd, capture_output=True, text=True, check=False)
    sys.stdout.write(run.stdout)
    sys.stderr.write(run.stderr)
    if run.returncode != 0:
        sys.exit(f"FAIL: {backend} run exited with {run.returncode}: {' '.join(cmd)}")
    lines = run.stdout.splitlines()
    if not any("replicas agree" in line for line in lines):
        sys.exit(f"FAIL: {backend}: no 'replicas agree' line")
    final = [line.split() for line in lines if line.startswith("final loss")]
    if len(final) != 1:
        sys.exit(f"FAIL: {backend}: expected one 'final loss' line")
    results[backend] = [float(final[0][2]), float(final[0][4]), float(final[0][5])]
for name, b, g in zip(["loss", "parameter sum", "parameter |sum|"], results["baton"],
                      results["gloo"]):
    if not math.isclose(b, g, rel_tol=1e-4, abs_tol=1e-5):
        sys.exit(f"FAIL: {name}: baton {b!r}, gloo {g!r}")
print(f"example: baton and gloo agree after {steps} steps on {ranks} ranks "
      f"({'synthetic data' if extra else 'Fashion-MNIST'}): {results}")
