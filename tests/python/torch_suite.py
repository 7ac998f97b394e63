"""PyTorch's own process-group suite (torch/testing/_internal/distributed/
distributed_test.py, shipped in the torch wheel) on "baton" or "gloo".

    torch_suite.py [--backend baton|gloo] [--world-size N] [--quick] [-k PATTERN ...]
                   [--list-passed FILE] [--fork] [--no-claims]

TORCH_SUITE_REGISTERED=BYTES runs baton's ranks with baton.torch.use_registered_memory(
min_bytes=BYTES) on (with BATON_REGISTERED_MIN_BYTES as small, their calls on such tensors take
the registered path).

Third-party backends run it this way (torch_ucc's pattern): the backend is
registered as a plugin in DistTestCases.backend_feature, with the features it
has claimed, before the suite is imported (its skip decorators read those sets
at import), and a TestDistBackend subclass spawns WORLD_SIZE processes per
test (--fork: forked from this process, which has imported torch, rather
than spawned: the whole suite in minutes instead of hours). GLOO_CLAIMS adds
"baton" to the tests the suite gates on gloo's name. --quick runs QUICK (a
couple of minutes; the meson test torch_suite_*).
Tests that pass on "gloo" and do not on "baton" are listed in docs/python.md
with their reasons; EXPECTED_FAILURES holds them. Needs expecttest and
hypothesis (scripts/setup.sh installs them).
"""

import argparse
import os
import sys
import tempfile
import unittest

try:
    import expecttest  # noqa: F401 (the suite imports them)
    import hypothesis  # noqa: F401
except ImportError as e:
    print(f"skipped: {e} (scripts/setup.sh installs expecttest and hypothesis)")
    sys.exit(77)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default=os.environ.get("BACKEND", "baton"),
                        choices=["baton", "gloo"])
    parser.add_argument("--world-size", type=int, default=int(os.environ.get("WORLD_SIZE", 2)))
    parser.add_argument("--quick", action="store_true", help="only QUICK")
    parser.add_argument("-k", action="append", default=[], help="test name substring")
    parser.add_argument("--list-passed", help="write the names of the tests that passed here")
    parser.add_argument("--no-claims", action="store_true",
                        help="run the suite as torch ships it: without GLOO_CLAIMS")
    parser.add_argument("--fork", action="store_true",
                        help="fork each test's ranks from this process instead of spawning "
                        "them (no torch import per rank: several times quicker on a loaded "
                        "machine)")
    return parser.parse_args()


# Before torch's test modules are imported: their skip decorators read these.
# Spawned ranks import this file as __mp_main__ and inherit the environment.
if __name__ == "__main__":
    ARGS = parse_args()
    os.environ["BACKEND"] = ARGS.backend
    os.environ["WORLD_SIZE"] = str(ARGS.world_size)
    os.environ["TORCH_SUITE_FORK"] = "1" if ARGS.fork else ""
    os.environ["TORCH_SUITE_NO_CLAIMS"] = "1" if ARGS.no_claims else ""
os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="torch_suite_"))
os.environ.setdefault("BATON_SOCKET_IFNAME", "lo")
BACKEND = os.environ["BACKEND"]

import torch.distributed as dist  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

if BACKEND == "baton":
    import baton.torch  # noqa: F401,E402 (registers "baton")

    # What "baton" does on CPU tensors as the suite's other backends do: a
    # plugin (require_backend_is_available), DDP, subgroups (new_group,
    # split_group), all_gather_coalesced, reduce, recv from any source and a
    # CPU barrier (it is in none of the skip_collective sets).
    DistTestCases.backend_feature["plugin"].add("baton")
    # "gpu" gates tests that run on CPU too (objects over subgroups); those
    # that need GPUs have their own skips. Gloo is in it likewise.
    DistTestCases.backend_feature["gpu"].add("baton")
    DistTestCases.backend_feature["ddp"].add("baton")
    DistTestCases.backend_feature["subgroup"].add("baton")

# Tests the suite gates on BACKEND being "gloo" (or mpi/nccl) by name, for
# what "baton" does on CPU as gloo does: its skip conditions are read when
# the module is imported, so "baton" is added to them in the module's source
# as it is loaded (the file itself is left as the wheel has it). Sparse
# allreduce stays gloo's: Baton has no sparse tensors.
GLOO_CLAIMS = [
    # Group timeouts: a barrier some rank skips raises after them.
    ('BACKEND != "gloo", "Only gloo backend supports timeouts"',
     'BACKEND not in ("gloo", "baton"), "Only gloo backend supports timeouts"'),
    # Work.get_future (DDP's communication hooks).
    ('BACKEND != "mpi" and BACKEND != "nccl" and BACKEND != "gloo",',
     'BACKEND not in ("mpi", "nccl", "gloo", "baton"),'),
    # ... and the CPU model of the tests it gates (accumulating gradients with no_sync).
    ('if BACKEND == "mpi" or BACKEND == "gloo":', 'if BACKEND in ("mpi", "gloo", "baton"):'),
    # all_reduce_coalesced, scatter_object_list, monitored_barrier and others on CPU.
    ('require_backend_is_available({"gloo"})', 'require_backend_is_available({"gloo", "baton"})'),
    ('BACKEND != "gloo", "GLOO Batch Send Recv CPU"',
     'BACKEND not in ("gloo", "baton"), "GLOO Batch Send Recv CPU"'),
]


def import_suite():
    import importlib.util
    name = "torch.testing._internal.distributed.distributed_test"
    spec = importlib.util.find_spec(name)
    if BACKEND == "baton" and not os.environ.get("TORCH_SUITE_NO_CLAIMS"):
        with open(spec.origin) as f:
            source = f.read()
        for old, new in GLOO_CLAIMS:
            if old not in source:
                sys.exit(f"torch_suite: this torch's suite lacks {old!r} (update GLOO_CLAIMS)")
            source = source.replace(old, new)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        exec(compile(source, spec.origin, "exec"), module.__dict__)  # noqa: S102
    return importlib.import_module(name)


_suite = import_suite()
DistributedTest = _suite.DistributedTest
TestDistBackend = _suite.TestDistBackend

# Under two minutes' worth (47 s here as a meson test; 148 s for 13 under load 11): the
# collectives, point to point (without src too), irecv, coalesced allgather,
# objects over a subgroup (with TORCH_DISTRIBUTED_DEBUG=DETAIL) and DDP.
QUICK = [
    "test_all_reduce_sum",
    "test_all_gather",
    "test_all_gather_coalesced_complex",
    "test_all_gather_object_subgroup",
    "test_broadcast",
    "test_scatter",
    "test_send_recv",
    "test_send_recv_any_source",
    "test_irecv",
    "test_barrier",
    "test_DistributedDataParallelCPU",
]

# Tests that pass on "gloo" and fail on "baton" (WORLD_SIZE: reason); they
# fail the run only if they pass (docs/python.md lists them).
EXPECTED_FAILURES = {
    "test_ddp_logging_data_cpu": (
        None, "DDP's logger reads the backend's name from c10d's ProcessGroup, which names "
        "every registered third-party backend \"custom\" (the test expects \"baton\")"),
    "test_monitored_barrier_gloo": (
        None, "matches gloo's own monitored barrier's words (rank 0 gathers every rank: \"Rank 1 "
        "failed to pass monitoredBarrier\"; the others \"successfully reached monitoredBarrier, "
        "but received errors ... from rank 0\"); baton's barrier raises Baton's timeout, which "
        "names the rank that never came, on every rank that came"),
    "test_monitored_barrier_gloo_rank_0_timeout": (None, "as test_monitored_barrier_gloo"),
    "test_monitored_barrier_gloo_subgroup": (None, "as test_monitored_barrier_gloo"),
}


def expected_to_fail(name):
    if BACKEND != "baton" or name not in EXPECTED_FAILURES:
        return False
    sizes = EXPECTED_FAILURES[name][0]
    return sizes is None or (sizes == ">2" and int(os.environ["WORLD_SIZE"]) > 2)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    @classmethod
    def _run(cls, rank, *args, **kwargs):
        # TORCH_SUITE_REGISTERED=BYTES: each rank's tensors of at least BYTES in registered
        # memory (baton.torch.use_registered_memory), forked ranks included.
        if BACKEND == "baton" and os.environ.get("TORCH_SUITE_REGISTERED"):
            baton.torch.use_registered_memory(min_bytes=int(os.environ["TORCH_SUITE_REGISTERED"]))
        super()._run(rank, *args, **kwargs)

    def setUp(self):
        super().setUp()
        if os.environ.get("TORCH_SUITE_FORK"):
            import torch.multiprocessing as mp
            self._start_processes(mp.get_context("fork").Process)
        else:
            self._spawn_processes()


def main():
    args = ARGS
    loader = unittest.TestLoader()
    names = loader.getTestCaseNames(TestDistBackendWithSpawn)
    if args.quick:
        missing = set(QUICK) - set(names)
        if missing:
            sys.exit(f"torch_suite: QUICK names tests this torch lacks: {sorted(missing)}")
        names = [n for n in names if n in QUICK]
    if args.k:
        names = [n for n in names if any(k in n for k in args.k)]
    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)
    print(f"torch_suite: backend {BACKEND}, WORLD_SIZE {os.environ['WORLD_SIZE']}, "
          f"{len(names)} tests", flush=True)
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    bad = {t.id().split(".")[-1] for t, _ in result.failures + result.errors}
    skipped = {t.id().split(".")[-1] for t, _ in result.skipped}
    passed = sorted(set(names) - bad - skipped)
    expected = {n for n in bad if expected_to_fail(n)}
    unexpected_pass = [n for n in passed if expected_to_fail(n)]
    for n in sorted(expected):
        print(f"torch_suite: expected failure {n}: {EXPECTED_FAILURES[n][1]}")
    for n in unexpected_pass:
        print(f"torch_suite: {n} passed but is listed in EXPECTED_FAILURES (update it and docs)")
    if args.list_passed:
        with open(args.list_passed, "w") as f:
            f.write("".join(n + "\n" for n in passed))
    print(f"torch_suite: backend {BACKEND}, WORLD_SIZE {os.environ['WORLD_SIZE']}: "
          f"{len(passed)} passed, {len(bad)} failed ({len(expected)} expected), "
          f"{len(skipped)} skipped", flush=True)
    sys.exit(0 if not (bad - expected) and not unexpected_pass else 1)


if __name__ == "__main__":
    main()
