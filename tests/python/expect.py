"""What the Python tests share: a call that must raise, the library's log read back, the
closing report."""

import os
import subprocess
import sys
import tempfile


def expect_error(failures, name, cls, words, fn):
    """Appends to failures unless fn() raises cls with `words` in its message."""
    try:
        fn()
    except cls as e:
        if words not in str(e):
            failures.append(f"{name}: message {str(e)!r} lacks {words!r}")
        return
    except Exception as e:  # noqa: BLE001
        failures.append(f"{name}: raised {type(e).__name__}: {e}, want {cls.__name__}")
        return
    failures.append(f"{name}: no exception, want {cls.__name__}")


class LibraryLog:
    """The library's log (fd 2, BATON_DEBUG) into a file from here on, so a test can read
    which path a call took; close() gives fd 2 back."""

    # A communicator's first call on registered buffers says so (comm/host_ipc.cc).
    REGISTERED = "read each other's buffers in place"

    def __init__(self):
        self._file = tempfile.TemporaryFile(mode="w+")
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)

    def text(self):
        self._file.flush()
        self._file.seek(0)
        return self._file.read()

    def close(self):
        os.dup2(self._saved, 2)
        os.close(self._saved)

    def registered_lines(self):
        """How many communicators have said their calls read the peers' buffers in place."""
        return self.text().count(self.REGISTERED)

    def warnings(self):
        """The log's WARN and ERROR lines."""
        return [line for line in self.text().splitlines() if "WARN" in line or "ERROR" in line]


def check(failures, name, ok, detail=""):
    """Appends `name detail` to failures unless ok."""
    if not ok:
        failures.append(f"{name} {detail}".rstrip())


def open_file_limit_failures(imports, body):
    """Failures of a registered-memory pool at its open-file limit, checked in a child
    Python: `imports`, then RLIMIT_NOFILE 64 (a pool takes a quarter: 16 blocks, each a
    memfd), then `body`, which turns the pool on with min_bytes 4096, allocates and frees
    one block of one size, then holds 20 of others, and leaves the pool's stats in `s` and
    how many of the 20 the pool holds in `in_pool`. The cached block must make room, the
    last 4 take ordinary memory, and the pool must say why, once."""
    script = imports + """
import resource
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
""" + body + """
assert s["max_blocks"] == 16, s
assert s["blocks_in_use"] == 16 and s["blocks_cached"] == 0 and s["fallbacks"] == 4, s
assert in_pool == 16, in_pool
"""
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    failures = []
    if run.returncode != 0:
        failures.append(f"the open-file limit: {run.stderr[-600:]}")
    elif run.stderr.count("open-file limit") != 1:
        failures.append(f"the open-file limit said {run.stderr.count('open-file limit')} "
                        f"times, want once: {run.stderr[-600:]}")
    return failures


def finish(failures, rank, ok, log=None):
    """Gives fd 2 back from `log` (a LibraryLog), whose WARN and ERROR lines fail the test;
    then prints the failures and exits 1, or prints `ok`."""
    if log is not None:
        log.close()
        if log.warnings():
            failures.append("the library warned: " + "; ".join(log.warnings())[:500])
    if failures:
        print(f"rank {rank}: {len(failures)} failures", file=sys.stderr)
        for f in failures[:20]:
            print(f"rank {rank}: {f}", file=sys.stderr)
        sys.exit(1)
    print(f"rank {rank}: {ok}")
