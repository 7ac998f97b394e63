#!/usr/bin/env python3
"""Baton against Open MPI, Gloo, Intel MPI, MPICH, oneCCL, PyTorch's gloo and DeepSpeed: the same
all-reduce sweep, side by side.

  perf/compare.py [--build DIR] [--configs shm2,shm4,net4-1g,...] [--sizes 8,64K,64M]
               [--reps 3] [--budget 0.3] [--warmup 2] [--quick] [--baseline DIR] [--out DIR]

Runs build/perf/all_reduce_perf (Baton), build/perf/peers/mpi_all_reduce_perf (Open MPI) and
build/perf/peers/gloo_all_reduce_perf with -A ring_chunked and -A halving_doubling (Gloo) on each
configuration, and on one host Intel MPI, MPICH and oneCCL (PyPI packages in venvs under
.venv-peers/, scripts/setup.sh; each left out with a note when missing: Intel MPI and MPICH
through their own mpiexec, oneCCL under batonrun with its shared-memory transport). All print
the same nccl-tests table and -J JSON lines from the same driver (perf/driver/), with the same
sizes, iteration counts and correctness check. Through torch.distributed (--torch-python, the
venv with torch), perf/python/torch_all_reduce_perf.py does the same in Python, a process per
rank (perf/compare_torch.py): PyTorch's gloo ("torch_gloo"), DeepSpeed's shared-memory allreduce
("deepspeed", one host, where SETUP_DEEPSPEED=1 installed it), Baton's torch backend through
dist.all_reduce ("baton_torch") and baton.torch.all_reduce, without torch's dispatch as DeepSpeed
is called ("baton_torch_direct"); in place only, so out of place each call copies the input into
the output first, as Gloo's runs do; between simulated hosts only when --libs names them. The
libraries take turns (round robin, the order rotated on each repetition) so that drift of a
shared machine spreads over all of them; each figure is the median over --reps repetitions.

Configurations (--configs, comma separated):
  shmN        N ranks on this host: Baton over shared memory, Open MPI with --mca btl self,vader,
              Gloo over TCP on loopback (it has no shared-memory transport).
  netN-RATE   N simulated hosts (scripts/netns.sh: namespaces on a bridge, eth0 shaped by tbf at
              RATE, e.g. 1g = 1gbit, 10g, 500m), one rank per host. Baton: one batonrun per
              namespace, the library binding each rank by its index on the machine
              (BATON_BIND=auto, README's recipe for namespaces); Open MPI: mpirun in host 0
              reaching the others through an rsh agent that enters their namespace with its own hostname (unshare --uts); Gloo: one process per
              namespace with a FileStore rendezvous. Needs root.

--baseline DIR adds the Baton of another build directory (e.g. a copy of the build before a
change) as one more library, "baton_base", in the same round robin: before/after figures measured
interleaved, with the Baton/baseline ratio per size and repetition beside Baton/Open MPI.

On one host Baton also runs with registered buffers (batonMemAlloc + batonCommRegister, the
perf driver's -R 1; "baton_reg"), next to its ordinary path.

Roofline (the physical limit the table divides Baton's bus bandwidth by):
  shm   the memory roofline of an N-rank all-reduce: every input is read and every output
        written at least once, 2Nn bytes through memory for n bytes per rank, so busbw <=
        BW (N-1)/N^2 with BW the STREAM add bandwidth of all cores at once
        (build/perf/stream_all_cores, the median of three runs' best, measured before each
        configuration; one core's STREAM add is no bound for N ranks on all cores). Without
        stream_all_cores: a numpy c = a + b on one core, labelled so;
  net   the tbf rate; one TCP stream's rate through the same namespaces is measured and reported
        beside it.

Writes to --out (default perf-results/): results.md (tables), results.json (all figures with
their ranges, the commands, the roofline), CONFIG.png/.svg (perf/plot.py), CONFIG-LIB.jsonl (median
records, nccl-tests JSON with a "label"), and raw/ (every run's output and JSON). Exit status 0
when every run succeeded and every correctness check passed, 1 otherwise.
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from sweep_util import (SweepRunner, log, parse_config,  # noqa: E402
                        parse_size, python_with, size_groups)
import compare_torch  # noqa: E402
import machine_probes  # noqa: E402


DEFAULT_CONFIGS = "shm2,shm4,net4-1g,net8-1g,net4-10g,net8-10g"
DEFAULT_SIZES = "8,256,8K,64K,512K,4M,16M,64M"

from compare_report import (BATONS, FLOOR_MAX_BYTES, IN_PLACE_ONLY, LIBRARIES,  # noqa: E402
                            PEER_VENVS, SHM_ONLY, back_to_back, back_to_back_fastest, fmt,
                            markdown_table, median_record, summarize)


class Runner(SweepRunner):
    """Runs the libraries on the configurations and collects their JSON records."""

    def __init__(self, args):
        super().__init__("cmp", args)
        self.tmp = tempfile.mkdtemp(prefix="baton-compare-")
        self.baseline = os.path.abspath(args.baseline) if args.baseline else None

    # ---- set-up -------------------------------------------------------------------------------

    def build_of(self, key):
        """The build directory whose binaries run `key` (--baseline for baton_base)."""
        return self.baseline if key == "baton_base" else self.build

    def binary(self, key):
        if key in compare_torch.BACKENDS:
            return compare_torch.SCRIPT
        return os.path.join(self.build_of(key), LIBRARIES[key][1])

    def batonrun_of(self, key):
        return os.path.join(self.build_of(key), "src", "batonrun")

    def available_libraries(self):
        libs = []
        wanted = ([x.strip() for x in self.args.libs.split(",")] if self.args.libs
                  else [k for k in LIBRARIES if k != "baton_base"])
        if self.baseline and "baton_base" not in wanted:
            wanted.append("baton_base")
        unknown = [k for k in wanted if k not in LIBRARIES]
        if unknown:
            raise SystemExit(f"error: unknown library '{unknown[0]}' (known: "
                             f"{', '.join(LIBRARIES)})")
        if not self.args.libs and "shm" not in self.args.configs:  # unnamed: one host only
            wanted = [k for k in wanted if k not in compare_torch.BACKENDS]
        no_torch = compare_torch.missing([k for k in wanted if k in compare_torch.BACKENDS],
                                         self.args.torch_python, self.build)
        for key in wanted:
            if key in no_torch:
                log(f"note: {LIBRARIES[key][0]} left out: {no_torch[key]}")
                continue
            if key == "baton_base" and not self.baseline:
                raise SystemExit("error: baton_base needs --baseline DIR")
            venv = self.peer_venv(key)
            if venv and not os.path.isdir(os.path.join(venv, "lib")):
                log(f"note: {LIBRARIES[key][0]} not installed ({venv}: scripts/setup.sh "
                    f"installs it): left out")
            elif key in compare_torch.BACKENDS or os.access(self.binary(key), os.X_OK):
                libs.append(key)
            else:
                log(f"note: {self.binary(key)} not built: {LIBRARIES[key][0]} left out")
        if "baton" not in libs:
            raise SystemExit(f"error: {self.binary('baton')} not found; build first "
                             f"(meson setup {self.args.build} && ninja -C {self.args.build})")
        if not os.access(self.batonrun, os.X_OK):
            raise SystemExit(f"error: {self.batonrun} not found")
        return libs

    def peer_venv(self, key):
        """The venv of a PyPI peer (None for the others)."""
        return os.path.join(self.args.peers_venv, PEER_VENVS[key]) if key in PEER_VENVS else None

    def write_mpi_agent(self):
        """The rsh agent and hostfile that let mpirun in host 0 start orted in the others."""
        agent = os.path.join(self.tmp, "netns-agent.sh")
        # --pin: the orted (and so the rank) of host i runs on core i mod cores.
        pin = f'pin="taskset -c $(( i % {os.cpu_count() or 1} ))"' if self.args.pin else 'pin=""'
        with open(agent, "w", encoding="utf-8") as f:
            f.write(f"""#!/bin/sh
# Open MPI plm_rsh_agent: "agent [options] HOST COMMAND..." runs COMMAND in the namespace of
# HOST (10.77.0.I+1 -> {self.tag}-hI) with its own hostname, as ssh to a real host would.
while [ "${{1#-}}" != "$1" ]; do shift; done
host=$1; shift
i=$(( ${{host##*.}} - 1 ))
{pin}
exec $pin ip netns exec {self.tag}-h$i unshare --uts /bin/sh -c "hostname h$i && $*"
""")
        os.chmod(agent, 0o755)
        hostfile = os.path.join(self.tmp, "hostfile")
        with open(hostfile, "w", encoding="utf-8") as f:
            for i in range(self.hosts):
                f.write(f"10.77.0.{i + 1} slots=1\n")
        return agent, hostfile

    # ---- one run ------------------------------------------------------------------------------

    def commands(self, lib, config, flags, json_path):
        """[(argv, env)] of the processes of one run of `lib` (several for netns runs)."""
        label, _, extra = LIBRARIES[lib]
        bin_args = [self.binary(lib)] + extra + flags + ["-J", json_path]
        n = config["ranks"]
        env = dict(os.environ)
        env.setdefault("BATON_TIMEOUT", "120")
        mpi_common = ["mpirun", "--allow-run-as-root", "--oversubscribe",
                      "--mca", "mpi_yield_when_idle", "1"]
        cores = os.cpu_count() or 1
        if lib in compare_torch.BACKENDS:
            # One process per rank; on one host rank i on core i mod cores, as batonrun binds.
            taskset = lambda i: ["taskset", "-c", str(i % cores)]  # noqa: E731
            shm = config["kind"] == "shm"
            return compare_torch.commands(
                lib, config, flags + ["-J", json_path], self.args.torch_python, self.build, env,
                self.next_port(), taskset if shm or self.args.pin else lambda i: [],
                None if shm else lambda i: f"{self.tag}-h{i}")
        if config["kind"] == "shm":
            if lib == "mpi":
                return [(mpi_common + ["--mca", "btl", "self,vader", "-np", str(n)] + bin_args,
                         env)]
            if lib in ("impi", "mpich"):
                # Each MPI's own hydra mpiexec, by its path in that MPI's venv (never the
                # mpirun on PATH, which is Open MPI's); its own binding off, rank i on core
                # i mod cores by taskset, as batonrun binds Baton's ranks (PMI_RANK: hydra's).
                mpiexec = os.path.join(self.peer_venv(lib), "bin", "mpiexec")
                pin = ["sh", "-c", f'exec taskset -c $((PMI_RANK % {cores})) "$@"', "sh"]
                e = {k: v for k, v in env.items() if not k.startswith(("OMPI_", "PMIX_"))}
                if lib == "impi":
                    e.update(I_MPI_FABRICS="shm", I_MPI_PIN="0")
                    return [([mpiexec, "-n", str(n)] + pin + bin_args, e)]
                if n > cores:
                    # More ranks than cores: yield while polling, as MPICH's own CI runs
                    # oversubscribed (its ch4 progress spins otherwise: > 300 s for one group
                    # of 4 ranks on 2 cores), as Open MPI gets mpi_yield_when_idle above.
                    for k, v in (("MPIR_CVAR_POLLS_BEFORE_YIELD", "1"),
                                 ("MPIR_CVAR_CH4_PROGRESS_THROTTLE", "1"),
                                 ("MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT", "1")):
                        e.setdefault(k, v)
                return [([mpiexec, "-n", str(n), "-bind-to", "none"] + pin + bin_args, e)]
            if lib == "oneccl":
                # oneCCL's shared-memory transport (its default is MPI over TCP). Without
                # CCL_WORKER_OFFLOAD=0 each rank's progress thread spins on a core the ranks
                # need: ~60 ms per call on 2 cores with 2 ranks (docs/performance.md).
                e = dict(env)
                for k, v in (("CCL_ATL_TRANSPORT", "ofi"), ("CCL_ATL_SHM", "1"),
                             ("CCL_WORKER_OFFLOAD", "0")):
                    e.setdefault(k, v)
                return [([self.batonrun, "-n", str(n)] + bin_args, e)]
            return [([self.batonrun_of(lib), "-n", str(n)] + bin_args, env)]
        # Simulated hosts. With --pin every library's rank i runs on core i mod cores: the
        # hosts share this machine's cores, where real hosts would each have their own.
        pin = (lambda i: ["taskset", "-c", str(i % cores)]) if self.args.pin else (lambda i: [])
        if lib == "mpi":
            agent, hostfile = config["mpi_agent"]
            binding = ["--bind-to", "none"] if self.args.pin else []
            argv = (["ip", "netns", "exec", f"{self.tag}-h0"] + pin(0) + mpi_common + binding +
                    ["--hostfile", hostfile, "--mca", "plm_rsh_agent", agent,
                     "--mca", "plm_rsh_no_tree_spawn", "1", "--mca", "btl", "tcp,self",
                     "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include",
                     "eth0", "-np", str(n)] + bin_args)
            return [(argv, env)]
        procs = []
        if lib in BATONS:
            # veth reports 10 Gbit/s whatever tbf shapes it to: tell the cost model the shaped
            # rate, as a user of a rate-limited link would (README, BATON_NET_MBPS). The library
            # binds each rank by its index among the machine's ranks (README's recipe for
            # namespaces, BATON_BIND): unbound, the scheduler's placement of the 4-8 ranks on 2
            # cores changed an 8 B call 1.5x between launches (docs/performance.md). With
            # --pin, taskset binds it first.
            e = dict(env, BATON_NET_MBPS=str(round(config["rate_GBps"] * 8000)))
            e.setdefault("BATON_BIND", "auto")
            return self.baton_ranks(self.batonrun_of(lib), bin_args, e, self.next_port(),
                                    pin=pin)
        store = tempfile.mkdtemp(prefix="gloo-store-", dir=self.tmp)
        for i in range(n):
            e = dict(env, BATON_RANK=str(i), BATON_WORLD_SIZE=str(n), GLOO_SOCKET_IFNAME="eth0",
                     GLOO_PERF_STORE=store)
            procs.append((["ip", "netns", "exec", f"{self.tag}-h{i}"] + pin(i) + bin_args, e))
        return procs

    def run_once(self, lib, config, flags, name, timeout):
        """Runs one sweep; returns its JSON records, or None (the failure is recorded)."""
        json_path = os.path.join(self.raw, name + ".jsonl")
        log_path = os.path.join(self.raw, name + ".log")
        if os.path.exists(json_path):
            os.remove(json_path)
        procs = []
        start = time.monotonic()
        with open(log_path, "w", encoding="utf-8") as logf:
            for argv, env in self.commands(lib, config, flags, json_path):
                logf.write("$ " + shlex.join(argv) + "\n")
                logf.flush()
                procs.append(subprocess.Popen(argv, env=env, stdout=logf,
                                              stderr=subprocess.STDOUT,
                                              start_new_session=True))
            codes = []
            for p in procs:
                remaining = max(1.0, timeout - (time.monotonic() - start))
                try:
                    codes.append(p.wait(timeout=remaining))
                except subprocess.TimeoutExpired:
                    codes.append("timeout")
                    for q in procs:
                        if q.poll() is None:
                            os.killpg(q.pid, signal.SIGKILL)
                            q.wait()
        elapsed = time.monotonic() - start
        records = []
        if os.path.exists(json_path):
            with open(json_path, encoding="utf-8") as f:
                records = [json.loads(line) for line in f if line.strip()]
        if any(c != 0 for c in codes) or not records:
            self.failures.append(f"{name}: exit {codes}, {len(records)} records (see {log_path})")
            log(f"  FAILED {name}: exit {codes} (log: {log_path})")
            return None
        log(f"  {name}: {elapsed:.1f} s")
        return records

    # ---- a configuration ----------------------------------------------------------------------

    def iterations(self, config, group_sizes):
        """Iteration count for a sweep: what fits --budget seconds per size, 2 to 1000 (the
        upper end of OSU's and IMB's small-message loops; 200 timed a 0.2 us call over 40 us),
        or to 200 where ranks outnumber the cores (a small call there takes microseconds to,
        for oneCCL's busy polling, milliseconds: 1100 calls of three sizes took it 50-90 s)."""
        if config["kind"] == "shm":
            latency, bandwidth = 20e-6, 2e9
        else:
            latency, bandwidth = 200e-6, config["rate_GBps"] * 1e9
        per_call = max(latency + 2 * s / bandwidth for s in group_sizes)
        most = 1000 if config["ranks"] <= (os.cpu_count() or 1) else 200
        return max(2, min(most, int(self.args.budget / per_call)))

    def run_config(self, config, libs, sizes):
        log(f"== {config['name']}")
        results = {lib: {} for lib in libs}
        commands = {}
        groups = size_groups(sizes, iterations=lambda s: self.iterations(config, [s]))
        order = list(libs)
        for rep in range(self.args.reps):
            for g, (b, e, f, group_sizes) in enumerate(groups):
                iters = self.iterations(config, group_sizes)
                flags = ["-b", str(b), "-e", str(e), "-f", str(f), "-n", str(iters),
                         "-w", str(self.args.warmup if self.args.warmup is not None
                                   else max(2, iters // 10) if iters > 5 else 1),
                         "-c", "1", "-d", "float", "-o", "sum"]
                for lib in order:
                    name = f"{config['name']}-{lib}-g{g}-r{rep}"
                    records = self.run_once(lib, config, flags, name, self.args.timeout)
                    commands.setdefault(lib, []).append(
                        [shlex.join(argv) for argv, _ in
                         self.commands(lib, config, flags, f"{name}.jsonl")])
                    for record in records or []:
                        results[lib].setdefault(record["size"], []).append(record)
            order = order[1:] + order[:1]  # rotate: every library gets every slot in turn
        return results, commands


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.environ.get("BATON_BUILD", "build"),
                        help="Meson build directory (default: build, or $BATON_BUILD)")
    parser.add_argument("--configs", default=None, help=f"default: {DEFAULT_CONFIGS}")
    parser.add_argument("--sizes", default=None, help=f"bytes, comma separated; default: "
                        f"{DEFAULT_SIZES}")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default 3)")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds of timed calls per size and run (default 0.3)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="warm-up calls per size before the timed ones (default a tenth of the "
                             "timed ones, at least 2; 1 for "
                             "runs of 5 calls or fewer)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per run")
    parser.add_argument("--libs", default=None,
                        help="comma separated subset of " + ",".join(LIBRARIES) +
                             " (default: all that are built and installed)")
    parser.add_argument("--peers-venv", default=os.path.join(os.path.dirname(HERE), ".venv-peers"),
                        help="where scripts/setup.sh put the PyPI peers' venvs (impi, mpich, "
                             "oneccl); default: .venv-peers in the source tree")
    parser.add_argument("--torch-python", default=os.path.join(os.path.dirname(HERE), ".venv",
                                                                "bin", "python"),
                        help="the Python with torch (and DeepSpeed) for the torch.distributed "
                             "libraries; default: .venv in the source tree")
    parser.add_argument("--pin", action="store_true",
                        help="simulated hosts: run every library's rank i on core i mod cores "
                             "(taskset; Open MPI with --bind-to none), as real hosts would each "
                             "have their own cores; default: unbound")
    parser.add_argument("--baseline", default=None, metavar="DIR",
                        help="also run the Baton of build directory DIR (library baton_base, "
                             "e.g. a copy of the build before a change) in the same round robin")
    parser.add_argument("--quick", action="store_true",
                        help="tiny run for tests: sizes 8,64K,1M, 1 repetition, shm2")
    parser.add_argument("--out", default="perf-results", help="output directory")
    args = parser.parse_args(argv)
    if args.quick:
        args.configs = args.configs or "shm2"
        args.sizes = args.sizes or "8,64K,1M"
        args.reps = args.reps or 1
        args.budget = args.budget or 0.02
    args.configs = args.configs or DEFAULT_CONFIGS
    args.sizes = args.sizes or DEFAULT_SIZES
    args.reps = args.reps or 3
    args.budget = args.budget or 0.3
    if args.reps < 1 or args.budget <= 0 or args.timeout <= 0:
        parser.error("--reps, --budget and --timeout must be positive")
    try:
        configs = [parse_config(c.strip(), ranks_per_host=False)
                   for c in args.configs.split(",") if c.strip()]
        sizes = sorted({parse_size(s) for s in args.sizes.split(",") if s.strip()})
    except (ValueError, argparse.ArgumentTypeError) as e:
        parser.error(str(e))
    if not configs or not sizes:
        parser.error("no configurations or no sizes")

    runner = Runner(args)
    libs = runner.available_libraries()
    label_of = {lib: LIBRARIES[lib][0] for lib in libs}
    started = time.time()

    def on_signal(signum, _frame):
        runner.netns_down()
        raise SystemExit(f"interrupted by signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    report = {"meta": {"date": datetime.datetime.now().isoformat(timespec="seconds"),
                       "host": socket.gethostname(), "kernel": platform.release(),
                       "cpus": os.cpu_count(), "command": shlex.join([sys.argv[0]] + argv),
                       "reps": args.reps, "budget_s": args.budget,
                       "sizes": sizes, "libraries": label_of,
                       "metric": "out-of-place busbw and time of all_reduce float sum; "
                                 "median over repetitions"},
              "configs": []}
    md = ["# Baton and its peers: all-reduce (float, sum)\n",
          f"`{report['meta']['command']}` on {report['meta']['host']} "
          f"({os.cpu_count()} CPUs), {report['meta']['date']}. Out-of-place busbw (GB/s) and "
          f"time per call (us), median of {args.reps} repetitions; ratios > 1 mean Baton moves "
          f"more data (busbw) or takes longer (time)." +
          (" The torch.distributed libraries and Gloo reduce in place only: out of place, each "
           "call copies the input into the output first." if set(libs) & IN_PLACE_ONLY else "") +
          "\n"]
    # The STREAM reading after the last configuration, where nothing ran since.
    stream_since = None
    try:
        for config in configs:
            if config["kind"] == "shm":
                # Measured next to each configuration, as the floor below.
                stream = stream_since or machine_probes.stream_bandwidth(runner.build)
                log(f"roofline: {stream[1]}: {fmt(stream[0])} GB/s")
                p = config["ranks"]
                bound = stream[0] * (p - 1) / p**2 if stream[0] and p > 1 else None
                roof = {"kind": "shm", "GBps": bound, "stream_GBps": stream[0],
                        "label": f"memory roofline {stream[1]} x (N-1)/N^2 "
                                 f"= {fmt(stream[0])} x {p - 1}/{p * p}",
                        "command": shlex.join(stream[2]) if stream[2] else ""}
                # Measured next to each configuration: on a VM the floor moves with where the
                # host places the virtual CPUs (docs/performance.md).
                floor_us, floor_note = machine_probes.latency_floor(runner.build, p)
                roof["latency_floor_us"] = floor_us
                roof["latency_floor_command"] = floor_note
                if floor_us:
                    log(f"latency floor: {fmt(floor_us)} us ({floor_note})")
            else:
                if os.geteuid() != 0:
                    log(f"skipping {config['name']}: network namespaces need root")
                    continue
                runner.netns_up(config["ranks"], config["rate"])
                config["mpi_agent"] = runner.write_mpi_agent()
                tcp = machine_probes.tcp_stream_rate(runner.tag, runner.next_port())
                log(f"roofline: tbf {config['rate']} = {config['rate_GBps']:.4g} GB/s; one TCP "
                    f"stream: {fmt(tcp)} GB/s")
                roof = {"kind": "net", "GBps": config["rate_GBps"],
                        "label": f"tbf rate {config['rate']}", "tcp_stream_GBps": tcp}
            # Between simulated hosts the torch libraries run when named (a Python per host).
            config_libs = [l for l in libs if config["kind"] == "shm" or l not in SHM_ONLY and (
                args.libs or l not in compare_torch.BACKENDS)]
            try:
                results, commands = runner.run_config(config, config_libs, sizes)
            finally:
                if config["kind"] == "net":
                    runner.netns_down()
            stream_since = None
            if config["kind"] == "shm" and roof["stream_GBps"]:
                # Again after the runs: this VM's memory bandwidth moves with where the host puts
                # the virtual CPUs (42-46 against 76-78 GB/s, docs/performance.md, "The roofline
                # moves with the latency mode), and a configuration's runs may span a switch.
                # The next configuration starts from this reading.
                stream_since = machine_probes.stream_bandwidth(runner.build)
                roof["stream_after_GBps"] = stream_since[0]
                log(f"roofline after the runs: {fmt(stream_since[0])} GB/s")
            summary = summarize(results, label_of)
            name = config["name"]
            files = []
            for lib in config_libs:
                path = os.path.join(runner.out, f"{name}-{lib}.jsonl")
                with open(path, "w", encoding="utf-8") as f:
                    for size in sorted(results[lib]):
                        f.write(json.dumps(median_record(results[lib][size], label_of[lib])) +
                                "\n")
                if results[lib]:
                    files.append(path)
            plot_cmd = [python_with("matplotlib"), os.path.join(HERE, "plot.py"), "-o",
                        os.path.join(runner.out, name), "--title",
                        f"all_reduce float sum, {name}"]
            if roof["GBps"]:
                plot_cmd += ["--roofline", str(roof["GBps"]), "--roofline-label", roof["label"]]
            if files:
                subprocess.run(plot_cmd + files, check=False)
            config_out = {k: v for k, v in config.items() if k != "mpi_agent"}
            config_out.update({"roofline": roof, "results": summary, "commands": commands})
            report["configs"].append(config_out)
            md.append(f"## {name}\n")
            extra = ""
            if roof["kind"] == "net":
                extra = f"; one TCP stream measured at {fmt(roof.get('tcp_stream_GBps'))} GB/s"
            md.append(f"Roofline: {roof['label']} = {fmt(roof['GBps'])} GB/s{extra}.\n")
            after = roof.get("stream_after_GBps")
            if after and roof["stream_GBps"] and not 0.8 <= after / roof["stream_GBps"] <= 1.25:
                md.append(f"STREAM read {fmt(after)} GB/s after this configuration's runs against "
                          f"{fmt(roof['stream_GBps'])} before: the host moved its CPUs between "
                          f"its modes meanwhile, so the roofline ratios below may hold for only "
                          f"some of the runs.\n")
            if roof.get("latency_floor_us"):
                md.append(f"Latency floor (sizes up to {FLOOR_MAX_BYTES} B): "
                          f"{fmt(roof['latency_floor_us'])} us per exchange of one cache line "
                          f"among {config['ranks']} threads (`{roof['latency_floor_command']}`).\n")
            md.append(markdown_table(config, summary, config_libs, sizes, roof["GBps"],
                                     roof.get("latency_floor_us")) + "\n")
            for other in ("mpi", "baton_base"):
                if other in summary:
                    md.append(back_to_back(summary, other) + "\n")
            md.append(back_to_back_fastest(summary) + "\n")
            md.append(f"![{name}]({name}.png)\n")
            # Written after each configuration, so that a long run shows its progress.
            with open(os.path.join(runner.out, "results.md"), "w", encoding="utf-8") as f:
                f.write("\n".join(md))
            with open(os.path.join(runner.out, "results.json"), "w", encoding="utf-8") as f:
                json.dump(report, f, indent=1)
    finally:
        runner.netns_down()
        shutil.rmtree(runner.tmp, ignore_errors=True)

    report["meta"]["elapsed_s"] = round(time.time() - started, 1)
    report["meta"]["failures"] = runner.failures
    bad_checks = [f"{c['name']} {lib} {size}" for c in report["configs"]
                  for lib, by_size in c["results"].items() for size, s in by_size.items()
                  if s["nwrong"]]
    report["meta"]["failed_checks"] = bad_checks
    if runner.failures or bad_checks:
        md.append("## Failures\n")
        md += [f"- {f}" for f in runner.failures + [f"wrong results: {b}" for b in bad_checks]]
    with open(os.path.join(runner.out, "results.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(runner.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    log(f"wrote {runner.out}/results.md and results.json in {report['meta']['elapsed_s']} s")
    return 1 if runner.failures or bad_checks else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
