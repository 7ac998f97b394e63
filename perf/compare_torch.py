"""The torch.distributed libraries of perf/compare.py: PyTorch's own gloo, DeepSpeed's
shared-memory allreduce, and Baton through its torch backend, each run by
perf/python/torch_all_reduce_perf.py (the nccl-tests sweep of perf/driver, in Python) with one
process per rank in torchrun's environment. Split from compare.py, which runs the C libraries
the same way through their binaries."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "perf", "python", "torch_all_reduce_perf.py")

# Library key -> the script's --backend.
BACKENDS = {"baton_torch": "baton", "baton_torch_direct": "baton-direct",
            "torch_gloo": "gloo", "deepspeed": "deepspeed"}

# The module each needs to import (each imports torch).
_IMPORTS = {"baton_torch": "baton.torch", "baton_torch_direct": "baton.torch",
            "torch_gloo": "torch.distributed", "deepspeed": "deepspeed"}


def python_env(build):
    """The environment additions every torch rank gets: the build's baton package first."""
    path = os.path.join(build, "python")
    old = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": path + (os.pathsep + old if old else "")}


def missing(keys, python, build):
    """{key: why} of the libraries in `keys` this interpreter cannot run, in one probe."""
    if not keys:
        return {}
    if not os.access(python, os.X_OK):
        return {k: f"{python} not found (scripts/setup.sh makes the venv with torch)"
                for k in keys}
    probe = ("import importlib, sys\n"
             "for key, module in zip(sys.argv[1::2], sys.argv[2::2]):\n"
             "    try:\n"
             "        importlib.import_module(module)\n"
             "    except Exception as e:\n"
             "        print('missing:', key, type(e).__name__, str(e)[:120].replace(chr(10), ' '))\n")
    argv = [python, "-c", probe]
    for k in keys:
        argv += [k, _IMPORTS[k]]
    env = dict(os.environ, **python_env(build))
    try:
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return {k: "importing torch took over 300 s" for k in keys}
    if out.returncode != 0:
        return {k: f"{python} failed: {out.stderr.strip()[-200:]}" for k in keys}
    why = {}
    for line in out.stdout.splitlines():  # DeepSpeed prints its own lines as it imports
        if not line.startswith("missing: "):
            continue
        key, _, reason = line[len("missing: "):].partition(" ")
        why[key] = f"cannot import {_IMPORTS[key]} ({reason})"
    return why


def commands(key, config, bin_args, python, build, env, port, pin, netns=None):
    """[(argv, env)] of one run: a process per rank, rank i on core pin(i) (an empty list for
    none), in namespace netns(i) for simulated hosts."""
    n = config["ranks"]
    master = "127.0.0.1" if netns is None else "10.77.0.1"
    procs = []
    for i in range(n):
        e = dict(env, RANK=str(i), WORLD_SIZE=str(n), LOCAL_RANK="0" if netns else str(i),
                 LOCAL_WORLD_SIZE="1" if netns else str(n), MASTER_ADDR=master,
                 MASTER_PORT=str(port), **python_env(build))
        if netns is not None:
            e.update(GLOO_SOCKET_IFNAME="eth0", BATON_SOCKET_IFNAME="eth0",
                     BATON_NET_MBPS=str(round(config["rate_GBps"] * 8000)))
        argv = pin(i) + [python, SCRIPT, "--backend", BACKENDS[key]] + bin_args
        procs.append(((["ip", "netns", "exec", netns(i)] if netns else []) + argv, e))
    return procs
