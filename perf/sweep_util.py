"""What perf/compare.py and perf/tune.py share: sizes and rates as the command line gives them,
the grouping of sizes into sweeps, and simulated hosts (scripts/netns.sh) with ports for their
rendezvous."""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NETNS = os.path.join(ROOT, "scripts", "netns.sh")


def python_with(module):
    """A Python interpreter that can import `module` (pyenv's may lack Debian's packages)."""
    for candidate in (sys.executable, "/usr/bin/python3"):
        if candidate and subprocess.run([candidate, "-c", f"import {module}"],
                                        capture_output=True).returncode == 0:
            return candidate
    return sys.executable


def log(message):
    print(message, flush=True)


def parse_size(text):
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"invalid size '{text}' (e.g. 8, 64K, 16M)")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


def human_size(size):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return str(size)


def parse_rate(text):
    """'1g' -> ('1gbit', 0.125 GB/s)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg])(?:bit)?", text.lower())
    if not m:
        raise ValueError(f"invalid rate '{text}' (e.g. 1g, 10g, 500m)")
    bits = float(m.group(1)) * {"k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
    return f"{m.group(1)}{m.group(2)}bit", bits / 8 / 1e9


def geometric_runs(sizes):
    """Splits sorted sizes into runs that one -b/-e/-f sweep covers: [(b, e, f, [sizes])]."""
    runs = []
    i = 0
    while i < len(sizes):
        j = i + 1
        factor = sizes[i + 1] // sizes[i] if i + 1 < len(sizes) else 2
        if i + 1 < len(sizes) and sizes[i + 1] == sizes[i] * factor and factor >= 2:
            while j < len(sizes) and sizes[j] == sizes[j - 1] * factor:
                j += 1
        else:
            factor = 2
        runs.append((sizes[i], sizes[j - 1], factor, sizes[i:j]))
        i = j
    return runs


def size_groups(sizes, limits=(64 << 10, 4 << 20), iterations=None):
    """Sizes grouped by magnitude (each group gets its own iteration count), then into sweeps.

    With iterations (a size's own iteration count), a group also ends before a size whose own
    count is under a quarter of the group's first size's: a sweep runs every size with its largest
    size's count, and 16 MiB timed with 256 MiB's two calls measures little but noise and the
    first calls (a library's own warm-up or choice, for every library alike)."""
    groups = []
    bounds = [0] + list(limits) + [1 << 62]
    for lo, hi in zip(bounds, bounds[1:]):
        chunk = [s for s in sizes if lo < s <= hi]
        while chunk:
            n = len(chunk)
            if iterations is not None:
                first = iterations(chunk[0])
                n = next((i for i, s in enumerate(chunk) if 4 * iterations(s) < first), n)
            groups.extend(geometric_runs(chunk[:n]))
            chunk = chunk[n:]
    return groups


def parse_config(name, ranks_per_host=True):
    """shmN, or netH[xR]-RATE (H hosts of R ranks, 1 when left out; only with ranks_per_host)."""
    m = re.fullmatch(r"shm(\d+)", name)
    if m and int(m.group(1)) >= 2:
        n = int(m.group(1))
        return {"name": name, "kind": "shm", "hosts": 1, "per_host": n, "ranks": n}
    m = re.fullmatch(r"net(\d+)(?:x(\d+))?-(\S+)", name)
    if m and 2 <= int(m.group(1)) <= 64 and (ranks_per_host or m.group(2) is None):
        rate, gbps = parse_rate(m.group(3))
        hosts, per_host = int(m.group(1)), int(m.group(2) or 1)
        return {"name": name, "kind": "net", "hosts": hosts, "per_host": per_host,
                "ranks": hosts * per_host, "rate": rate, "rate_GBps": gbps}
    expected = "netH[xR]-RATE" if ranks_per_host else "netN-RATE"
    raise ValueError(f"invalid configuration '{name}': expected shmN (N >= 2) or {expected} "
                     "(2 <= hosts <= 64, RATE like 1g, 10g, 500m)")


class SimulatedHosts:
    """Network namespaces 10.77.0.0/24 made by scripts/netns.sh (TAG-h0 .. TAG-hN-1), torn down
    by netns_down(), and a port counter for the rendezvous of successive runs."""

    def __init__(self, prefix):
        self.prefix = prefix
        self.tag = None
        self.hosts = 0
        # Rendezvous ports stay below the kernel's ephemeral range: on loopback a port in it
        # can be the local end of another run's connection, and the root's bind then fails.
        self.port_limit = 32767
        try:
            with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="utf-8") as f:
                self.port_limit = max(21000, int(f.read().split()[0]) - 1)
        except (OSError, ValueError, IndexError):
            pass
        self.port = 20000 + os.getpid() % (self.port_limit - 20000)

    def next_port(self):
        self.port = 20000 if self.port >= self.port_limit else self.port + 1
        return self.port

    def netns_up(self, hosts, rate):
        self.tag = f"{self.prefix}{os.getpid() % 100000}"
        self.hosts = hosts
        subprocess.run([NETNS, "up", self.tag, str(hosts), rate], check=True)

    def baton_ranks(self, batonrun, argv, env, port, per_host=1, pin=lambda h: []):
        """[(argv, env)] of a Baton run over the namespaces: one batonrun per host with
        `per_host` ranks, meeting at host 0's address on `port`, talking over eth0; `pin(h)` is
        a command prefix (taskset) for host h. batonrun binds nothing: the namespaces share this
        machine's cores, so the library binds each rank by its index among them (BATON_BIND in
        `env`)."""
        n = self.hosts * per_host
        return [(["ip", "netns", "exec", f"{self.tag}-h{h}"] + pin(h) +
                 [batonrun, "-n", str(per_host), "--bind-to", "none", "--world-size", str(n),
                  "--rank-offset", str(h * per_host), "--root", f"10.77.0.1:{port}"] + argv,
                 dict(env, BATON_SOCKET_IFNAME="eth0"))
                for h in range(self.hosts)]

    def netns_down(self):
        if self.tag:
            subprocess.run([NETNS, "down", self.tag, str(self.hosts)], check=False)
            self.tag = None


class SweepRunner(SimulatedHosts):
    """What both sweeps' runners hold: the build, the output folders, batonrun, the failures."""

    def __init__(self, prefix, args):
        super().__init__(prefix)
        self.args = args
        self.build = os.path.abspath(args.build)
        self.out = os.path.abspath(args.out)
        self.raw = os.path.join(self.out, "raw")
        os.makedirs(self.raw, exist_ok=True)
        self.batonrun = os.path.join(self.build, "src", "batonrun")
        self.failures = []
