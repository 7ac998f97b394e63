"""Starts N ranks of a Python script in torchrun's environment and waits for them.

    launch.py -n 4 [--timeout 120] [--killed RANK] script.py args...

RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT (a
free port) as torchrun sets them. Succeeds when every rank exits 0 (rank
--killed must instead die by SIGKILL, which the script sends itself); exits 77
(skipped, for meson) when every rank does. A rank still running at --timeout
fails the run, and every rank is then killed.
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, required=True)
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--killed", type=int, default=-1)
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    a = parser.parse_args()
    port = str(free_port())
    procs = []
    for rank in range(a.n):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(a.n), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(a.n), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        # A rank that aborts or crashes prints every thread's Python stack: a
        # rare failure in CI then says where it happened.
        env.setdefault("PYTHONFAULTHANDLER", "1")
        procs.append(subprocess.Popen([sys.executable, a.script] + a.args, env=env))
    deadline = time.monotonic() + a.timeout
    ok = True
    while any(p.poll() is None for p in procs):
        if time.monotonic() > deadline:
            print(f"launch.py: ranks still running after {a.timeout} s; killing them",
                  file=sys.stderr)
            for p in procs:
                if p.poll() is None:
                    p.kill()
            ok = False
            break
        time.sleep(0.1)
    if ok and all(p.wait() == 77 for p in procs):
        return 77
    for rank, p in enumerate(procs):
        rc = p.wait()
        want = -signal.SIGKILL if rank == a.killed else 0
        if rc != want:
            print(f"launch.py: rank {rank} exited with {rc}, expected {want}", file=sys.stderr)
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
