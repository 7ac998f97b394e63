#!/usr/bin/env bash
# Installed Baton runs from any prefix with a clean environment: installs the
# build into a temporary root (meson's --destdir, so the files land under a
# prefix nobody configured) and runs batonrun, a perf binary, baton-topo and
# baton-train from there with `env -i` (no LD_LIBRARY_PATH); each must find
# the installed libbaton through its $ORIGIN-relative rpath. With PYTHON (the
# one the build's Python package is for), the installed package too: `import
# baton` from the prefix's site-packages, its extension loading the installed
# libbaton, a one-rank allreduce (and `import baton.torch` where it was built).
#
#   install_test.sh BUILD_DIR [PYTHON]
set -uo pipefail
build=$(cd "$1" && pwd)
python=${2:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

meson install -C "$build" --no-rebuild --destdir "$tmp" > "$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; echo "FAIL: meson install"; exit 1; }
prefix=$(meson introspect "$build" --buildoptions |
  python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"][0])')
root=$tmp$prefix
bin=$root/bin
[[ -x $bin/batonrun && -x $bin/all_reduce_perf ]] || { fail "batonrun or all_reduce_perf not installed"; exit 1; }

clean() { env -i PATH=/usr/bin:/bin HOME="$tmp" "$@"; }

# The library each executable loads is the installed one.
# (baton-topo links the internal library statically.)
for exe in batonrun all_reduce_perf; do
  lib=$(clean ldd "$bin/$exe" | awk '/libbaton\.so/ {print $3}')
  [[ $lib == "$root"/* ]] || fail "$exe loads libbaton from '${lib:-nowhere}', not from $root"
done

# A job from the installed tree, results checked.
out=$(clean "$bin/batonrun" -n 2 "$bin/all_reduce_perf" -b 8 -e 1M -f 8 -c 1 -n 2 -w 1 2>&1) ||
  fail "batonrun -n 2 all_reduce_perf from $bin: $out"
grep -qE "^ +8 +2 +float" <<< "$out" || fail "no 8-byte row in: $out"
grep -E "^ +[0-9]+ +[0-9]+ +float" <<< "$out" | awk '$9 != 0 || $13 != 0 {bad = 1} END {exit bad}' ||
  fail "wrong results from the installed perf binary: $out"

clean "$bin/baton-topo" > "$tmp/topo.txt" 2>&1 || fail "baton-topo: $(cat "$tmp/topo.txt")"
if [[ -x $bin/baton-train ]]; then
  clean "$bin/baton-train" --help > "$tmp/train.txt" 2>&1 || fail "baton-train --help: $(cat "$tmp/train.txt")"
fi
[[ -f $root/include/baton.h ]] || fail "baton.h not installed"

if [[ -n $python ]]; then
  core=$(find "$root" -path '*/site-packages/baton/_core*.so' -o -path '*/dist-packages/baton/_core*.so' | head -1)
  if [[ -z $core ]]; then
    fail "the Python package is not installed under $root"
  else
    site=$(dirname "$(dirname "$core")")
    lib=$(clean ldd "$core" | awk '/libbaton\.so/ {print $3}')
    [[ $lib == "$root"/* ]] || fail "baton/_core loads libbaton from '${lib:-nowhere}', not from $root"
    out=$(clean BATON_SOCKET_IFNAME=lo PYTHONPATH="$site" "$python" -c '
import numpy as np, baton, baton._lib as l
assert l.lib._name.startswith(__import__("sys").argv[1]), l.lib._name
comm = baton.init_rank(1, baton.get_unique_id(), 0)
got = comm.allreduce(np.arange(5, dtype=np.float32))
assert np.array_equal(got, np.arange(5, dtype=np.float32)), got
comm.destroy()
print("imported", baton.__file__, "version", baton.version())' "$root" 2>&1) ||
      fail "import baton from $site: $out"
    if ls "$site"/baton/_baton_torch*.so > /dev/null 2>&1; then
      out=$(clean PYTHONPATH="$site" "$python" -c 'import baton.torch, torch.distributed as d
assert "baton" in d.Backend.backend_list' 2>&1) || fail "import baton.torch from $site: $out"
    fi
  fi
fi

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "install: all checks passed (installed under $root)"
