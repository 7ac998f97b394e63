"""What the machine gives a benchmark run, measured beside it: the STREAM add bandwidth of all
cores (the memory roofline's BW), the cache-line exchange floor between cores (the VM's latency
mode, docs/performance.md) and one TCP stream's rate between two simulated hosts. Shared by
perf/compare.py and perf/lib_ab.py, so both read the machine the same way."""
import os
import shlex
import statistics
import subprocess
import sys

from sweep_util import log, python_with


def stream_bandwidth(build, runs=3):
    """(GB/s, label, command) of STREAM add on all cores at once: the median of `runs` runs'
    best repetitions (this VM's memory bandwidth moves between spells, and one run can land in
    another spell than the next: docs/performance.md, "Every peer on a fast day"). Without
    build/perf/stream_all_cores, a numpy add on one core, labelled so; (None, "none", cmd) when
    neither runs."""
    bench = os.path.join(build, "perf", "stream_all_cores")
    if os.access(bench, os.X_OK):
        cmd = [bench, "64", str(os.cpu_count() or 1), "7"]
        try:
            bests = []
            for _ in range(runs):
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                                     check=True).stdout
                # "STREAM add, T threads, 64 MiB arrays: best X GB/s, median Y GB/s"
                bests.append(float(out.split("best")[1].split("GB/s")[0]))
            return (statistics.median(bests),
                    f"STREAM add of all {os.cpu_count()} cores (stream_all_cores, the "
                    f"median of {runs} runs' best)", cmd)
        except (subprocess.SubprocessError, ValueError, IndexError) as e:
            log(f"note: stream_all_cores failed ({e}); using the numpy fallback")
    code = ("import numpy as np, time\n"
            "n = 64 << 20 >> 2\n"
            "a = np.ones(n, np.float32); b = np.ones(n, np.float32); c = np.empty_like(a)\n"
            "best = 1e9\n"
            "for _ in range(7):\n"
            "    t = time.perf_counter(); np.add(a, b, out=c); best = min(best, time.perf_counter() - t)\n"
            "print(3 * 4 * n / best / 1e9)\n")
    cmd = [python_with("numpy"), "-c", code]
    try:
        value = float(subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                                     check=True).stdout)
        return value, "STREAM-like add with numpy on one core (fallback: stream_all_cores " \
                      "not built)", cmd
    except (subprocess.SubprocessError, ValueError) as e:
        log(f"note: no STREAM measurement ({e})")
        return None, "none", cmd


def latency_floor(build, ranks, rounds=1000000, reps=5):
    """(us, command) of the cache-line exchange floor of a small allreduce among `ranks`
    threads on as many cores (perf/shm_latency_floor; the median of `reps`), or (None, reason)
    where it cannot run: not built, or more ranks than cores (waiting threads would need the
    cores they spin on)."""
    bench = os.path.join(build, "perf", "shm_latency_floor")
    if not os.access(bench, os.X_OK):
        return None, "shm_latency_floor not built"
    if ranks > (os.cpu_count() or 1):
        return None, f"{ranks} ranks on {os.cpu_count()} cores"
    cmd = [bench, str(ranks), str(rounds), str(reps)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                             check=True).stdout
        # "shm latency floor, T threads, R rounds: best X us, median Y us per round ..."
        return float(out.split("median")[1].split("us")[0]), shlex.join(cmd)
    except (subprocess.SubprocessError, ValueError, IndexError) as e:
        log(f"note: shm_latency_floor failed ({e})")
        return None, "shm_latency_floor failed"


def tcp_stream_rate(tag, port, seconds=2.0):
    """GB/s of one TCP stream from host 0 to host 1 of the namespaces TAG-h0, TAG-h1
    (scripts/netns.sh), or None."""
    receiver = ("import socket, sys, time\n"
                "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                f"s.bind(('10.77.0.2', {port})); s.listen(1); print('ready', flush=True)\n"
                "c, _ = s.accept(); total = 0; buf = bytearray(1 << 20); start = None\n"
                "while True:\n"
                "    n = c.recv_into(buf)\n"
                "    if not n: break\n"
                "    if start is None: start = time.perf_counter()\n"
                "    else: total += n\n"
                "print(total / (time.perf_counter() - start) / 1e9)\n")
    sender = ("import socket, time\n"
              f"s = socket.create_connection(('10.77.0.2', {port}))\n"
              "buf = b'x' * (1 << 20); end = time.perf_counter() + " + str(seconds) + "\n"
              "while time.perf_counter() < end: s.sendall(buf)\n"
              "s.close()\n")
    rx = subprocess.Popen(["ip", "netns", "exec", f"{tag}-h1", sys.executable, "-c", receiver],
                          stdout=subprocess.PIPE, text=True)
    try:
        if rx.stdout.readline().strip() != "ready":
            return None
        subprocess.run(["ip", "netns", "exec", f"{tag}-h0", sys.executable, "-c", sender],
                       timeout=seconds + 30, check=True)
        out, _ = rx.communicate(timeout=30)
        return float(out.strip())
    except (subprocess.SubprocessError, ValueError):
        return None
    finally:
        if rx.poll() is None:
            rx.kill()
            rx.wait()
