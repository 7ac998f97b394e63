#!/usr/bin/env bash
# `pip install` of the clone, as a PyTorch user would (docs/python.md, "pip"):
#   1. `pip wheel .` (build isolation: meson-python from PyPI, no torch) in a
#      fresh venv: one wheel with libbaton, batonrun, baton-topo and the
#      package, no baton.torch (importing it says how to get it).
#   2. A fresh venv that has torch without downloading it again (a .pth
#      pointing at the set-up venv's site-packages), `pip install
#      --no-build-isolation` of the clone: baton.torch compiled against that
#      torch. From a directory outside the clone, with no LD_LIBRARY_PATH or
#      PYTHONPATH: a 2-process torchrun job (init_process_group("baton"),
#      allreduce checked), batonrun -n 2 on the NumPy package, baton-topo, and
#      `import baton.torch` under another torch version refused with both named.
# meson-python builds in a temporary .mesonpy-* directory of the source tree,
# one level down as build/ is: the compile commands are the main build's, so
# ccache serves most objects (docs/python.md has the times).
#
#   pip_test.sh SOURCE_DIR SETUP_PYTHON
# Exits 77 (skipped) when the set-up's venv, torch, meson-python, venv/ensurepip
# or patchelf are missing.
set -uo pipefail
src=$(cd "$1" && pwd)
setup_python=$2
skip() { echo "skipped: $*"; exit 77; }
[[ -x $setup_python ]] || skip "no $setup_python (scripts/setup.sh makes the venv)"
# Absolute (the checks run elsewhere), the venv's path kept (no symlinks resolved).
setup_python=$(cd "$(dirname "$setup_python")" && pwd)/$(basename "$setup_python")
"$setup_python" -c 'import torch, numpy, mesonpy' 2> /dev/null ||
  skip "$setup_python lacks torch, numpy or meson-python (scripts/setup.sh installs them)"
command -v patchelf > /dev/null || skip "no patchelf (meson-python needs it; scripts/setup.sh installs it)"
command -v ninja > /dev/null || skip "no ninja"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
start=$SECONDS
stamp() { echo "[$((SECONDS - start)) s] $*"; }

# Fresh venvs from the set-up venv's interpreter (Debian's Python, whose
# python3-venv brings pip through ensurepip).
"$setup_python" -m venv "$tmp/plain" > "$tmp/venv.log" 2>&1 &&
  "$setup_python" -m venv "$tmp/venv" >> "$tmp/venv.log" 2>&1 ||
  skip "python -m venv failed (python3-venv): $(cat "$tmp/venv.log")"
site=$("$tmp/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$setup_python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site/setup-venv.pth"
pip_flags=(--disable-pip-version-check --no-input)
stamp "venvs made"

# ---- 1: pip wheel . without torch ----
if ! (cd "$src" && "$tmp/plain/bin/pip" wheel "${pip_flags[@]}" --no-deps -w "$tmp/dist" . \
    > "$tmp/wheel.log" 2>&1); then
  tail -40 "$tmp/wheel.log"
  fail "pip wheel . (build isolation)"
else
  wheel=$(ls "$tmp"/dist/baton-*.whl)
  stamp "pip wheel . (no torch): $(basename "$wheel")"
  "$setup_python" - "$wheel" <<'PY' || fail "contents of the wheel built without torch"
import re, sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
want = [r"^\.baton\.mesonpy\.libs/libbaton\.so\.0$", r"^baton-[^/]+\.data/scripts/batonrun$",
        r"^baton-[^/]+\.data/scripts/baton-topo$", r"^baton/_core\..*so$", r"^baton/__init__\.py$",
        r"^baton/_numpy_memory\..*so$", r"^baton/_memory\.py$",
        r"^baton/torch\.py$", r"^baton/_build_info\.py$"]
missing = [w for w in want if not any(re.match(w, n) for n in names)]
extra = [n for n in names if "_baton_torch" in n or n.endswith((".h", ".pc")) or "_perf" in n]
assert not missing and not extra, (missing, extra, names)
info = zipfile.ZipFile(sys.argv[1]).read("baton/_build_info.py").decode()
assert "TORCH_VERSION = None" in info and "LIBBATON_CUDA = False" in info, info
print("wheel holds:", ", ".join(sorted(n for n in names if ".dist-info" not in n)))
PY
  "$tmp/venv/bin/pip" install "${pip_flags[@]}" --no-deps "$wheel" > "$tmp/install1.log" 2>&1 ||
    fail "pip install of the wheel: $(tail -20 "$tmp/install1.log")"
  out=$(cd "$tmp" && env -i PATH="$tmp/venv/bin:/usr/bin:/bin" HOME="$tmp" python -c 'import baton.torch' 2>&1)
  if [[ $? -eq 0 ]] || ! grep -q "built without torch.*--no-build-isolation" <<< "$out"; then
    fail "import baton.torch from the wheel built without torch: $out"
  else
    echo "without torch: $(tail -1 <<< "$out")"
  fi
fi

# ---- 2: pip install --no-build-isolation with torch ----
# PATH as in an activated venv: meson-python runs the `meson` on PATH, here
# pip's (beside meson-python in the set-up venv), not Debian's older one.
if ! (cd "$src" && PATH="$tmp/venv/bin:$(dirname "$setup_python"):$PATH" "$tmp/venv/bin/pip" install \
    "${pip_flags[@]}" --no-build-isolation --force-reinstall . > "$tmp/install2.log" 2>&1); then
  tail -40 "$tmp/install2.log"
  fail "pip install --no-build-isolation ."
  exit 1
fi
stamp "pip install --no-build-isolation ."

# The extensions find libbaton beside the package; no path of the build's.
for ext in "$site"/baton/_core*.so "$site"/baton/_baton_torch*.so; do
  rpath=$(patchelf --print-rpath "$ext")
  echo "rpath of $(basename "$ext"): $rpath"
  [[ :$rpath: == *':$ORIGIN/../.baton.mesonpy.libs:'* && :$rpath: != *:/* ]] ||
    fail "rpath of $(basename "$ext"): $rpath (want \$ORIGIN/../.baton.mesonpy.libs, no absolute path)"
done

mkdir -p "$tmp/run"
cd "$tmp/run"
clean() { env -i PATH="$tmp/venv/bin:/usr/bin:/bin" HOME="$tmp" "$@"; }
torch_version=$("$setup_python" -c 'import torch; print(torch.__version__)')

cat > job.py <<'PY'
import os, sys
import torch, torch.distributed as dist
import baton, baton.torch, baton._build_info as info, baton._lib as lib

venv = sys.argv[1]
# What runs is the installed wheel: package, extension and libbaton.
for path in (baton.__file__, baton.torch._baton_torch.__file__, lib.lib._name):
    assert path.startswith(venv + "/"), (path, venv)
assert lib.lib._name.endswith(".baton.mesonpy.libs/libbaton.so.0"), lib.lib._name
assert info.TORCH_VERSION == torch.__version__ == sys.argv[2], (info.TORCH_VERSION, torch.__version__)
assert not any(k in os.environ for k in ("LD_LIBRARY_PATH", "PYTHONPATH"))
baton.torch.use_registered_memory(min_bytes=65536)  # the larger tensors in registered memory
dist.init_process_group("baton")
rank, size = dist.get_rank(), dist.get_world_size()
assert size == 2 and dist.get_backend() == "baton"
for dtype in (torch.float32, torch.float64, torch.int32, torch.bfloat16):
    for n in (0, 1, 7, 1000, 300001):
        base = torch.arange(n, dtype=torch.float64) % 97
        t = (base * (rank + 1)).to(dtype)
        assert baton.torch.in_registered_memory(t) == (n == 300001), (n, dtype)
        dist.all_reduce(t)
        want = (base * 3).to(dtype)  # ranks 1 and 2 times base: small integers, exact
        assert torch.equal(t, want), (dtype, n, t[:8], want[:8])
t = torch.full((5,), float(rank + 2))
dist.all_reduce(t, op=dist.ReduceOp.MAX)
assert torch.equal(t, torch.full((5,), 3.0)), t
dist.destroy_process_group()
print(f"rank {rank}: allreduce checked")
PY
port=$("$setup_python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
out=$(clean timeout 120 python -m torch.distributed.run --nproc-per-node 2 --master-addr 127.0.0.1 \
  --master-port "$port" job.py "$tmp/venv" "$torch_version" 2>&1)
# Counted as words, not lines: the two ranks' prints can land on one line.
if [[ $? -ne 0 ]] || [[ $(grep -o "rank [01]: allreduce checked" <<< "$out" | sort -u | wc -l) -ne 2 ]]; then
  fail "torchrun -nproc-per-node 2 job.py: $out"
else
  stamp "torchrun, 2 processes on \"baton\": allreduce checked"
fi

out=$(clean timeout 60 batonrun -n 2 python -c 'import baton, numpy as np
c = baton.init()
got = c.allreduce(np.arange(6, dtype=np.float32) * (c.rank + 1))
assert np.array_equal(got, np.arange(6, dtype=np.float32) * 3), got
baton.use_registered_memory(min_bytes=65536)
x = np.arange(100003, dtype=np.float32) * (c.rank + 1)
got = c.allreduce(x)
assert baton.in_registered_memory(x) and baton.in_registered_memory(got)
assert np.array_equal(got, np.arange(100003, dtype=np.float32) * 3), got
print("numpy ok")' 2>&1)
[[ $(grep -c "numpy ok" <<< "$out") -eq 2 ]] || fail "batonrun -n 2 (the wheel's) on the NumPy package: $out"
[[ $(clean which batonrun) == "$tmp/venv/bin/batonrun" ]] || fail "batonrun is not the venv's: $(clean which batonrun)"
clean baton-topo > topo.txt 2>&1 || fail "baton-topo: $(cat topo.txt)"

# Under another torch: a clear ImportError naming both versions, no crash.
mkdir -p other/torch
echo '__version__ = "2.0.1"' > other/torch/__init__.py
out=$(cd other && clean python -c 'import baton.torch' 2>&1)
if [[ $? -eq 0 ]] || ! grep -q "ImportError: baton.torch: built for torch $torch_version, but torch 2.0.1" <<< "$out"; then
  fail "import baton.torch under torch 2.0.1: $out"
else
  echo "another torch: $(tail -1 <<< "$out")"
fi
stamp "done"

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "pip: all checks passed"
