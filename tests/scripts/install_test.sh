#!/usr/bin/env bash
# Installed Baton runs from any prefix with a clean environment: installs the
# build into a temporary root (meson's --destdir, so the files land under a
# prefix nobody configured) and runs batonrun, a perf binary, baton-topo and
# baton-train from there with `env -i` (no LD_LIBRARY_PATH); each must find
# the installed libbaton through its $ORIGIN-relative rpath. With PYTHON (the
# one the build's Python package is for), the installed package too: `import
# baton` from the prefix's site-packages, its extension loading the installed
# libbaton, a one-rank allreduce (and `import baton.torch` where it was built).
# Then README's C quick start, verbatim, as a new user runs it: `meson install
# -C build` to the real prefix, then the README's `cc hello.c $(pkg-config ...)`
# and `batonrun -n 4 ./hello` with a clean environment; in a private mount
# namespace whose prefix and /etc are throwaway overlays, so the install (and
# the loader cache it refreshes) touch nothing outside the test.
#
#   install_test.sh BUILD_DIR README [PYTHON]
set -uo pipefail
build=$(cd "$1" && pwd)
readme=$2
python=${3:-}
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

# README's quick start. The C program and the two shell lines are cut out of
# README.md and run as they are written.
quick=$tmp/quickstart
mkdir -p "$quick"
awk '/^## Quick start in C/ {on = 1} on && /^```c$/ {c = 1; next} c && /^```$/ {exit} c' \
  "$readme" > "$quick/hello.c"
awk '/^## Quick start in C/ {on = 1} on && /^```sh$/ {s = 1; next} s && /^```$/ {exit} s' \
  "$readme" > "$quick/commands.sh"
if ! grep -q batonCommInitFromEnv "$quick/hello.c" || ! grep -q "^batonrun -n 4 ./hello" "$quick/commands.sh"; then
  fail "README's C quick start not found in $readme"
elif ! unshare -m --propagation private true 2> /dev/null; then
  echo "SKIP quick start: no private mount namespace here (unshare -m)"
else
  # In the namespace: overlays over the prefix and /etc, `meson install -C
  # build` (its install script runs ldconfig), then README's lines.
  cat > "$quick/run.sh" <<EOF
set -e
for d in "$prefix" /etc; do
  mkdir -p "$quick/ovl\$d/u" "$quick/ovl\$d/w"
  mount -t overlay overlay -o "lowerdir=\$d,upperdir=$quick/ovl\$d/u,workdir=$quick/ovl\$d/w" "\$d"
done
meson install -C "$build" --no-rebuild > "$quick/install.log" 2>&1 || { cat "$quick/install.log"; exit 1; }
cd "$quick"
env -i PATH="$prefix/bin:/usr/bin:/bin" HOME="$quick" bash -e commands.sh
EOF
  out=$(unshare -m --propagation private bash "$quick/run.sh" 2>&1)
  rc=$?
  want=$(for r in 0 1 2 3; do echo "rank $r of 4: 6"; done)
  if [[ $rc -ne 0 ]]; then
    fail "README's quick start (exit $rc): $out"
  elif [[ $(grep '^rank' <<< "$out" | sort) != "$want" ]]; then
    fail "README's quick start printed: $out"
  else
    echo "quick start: $(grep -c '^rank' <<< "$out") ranks agree (meson install, cc, batonrun -n 4 ./hello)"
  fi
fi

if [[ $failures -gt 0 ]]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "install: all checks passed (installed under $root)"
