#!/usr/bin/env bash
# perf/compare.py --quick end to end: Baton, Open MPI and Gloo on 2 ranks over shared memory, and on
# 2 simulated hosts (network namespaces) when run as root. Checks that the table, the JSON and
# the plots are written, and that every row of every library passed its correctness check.
# Intel MPI, MPICH and oneCCL (PyPI, .venv-peers/, scripts/setup.sh) join when their driver
# binaries are built, each checked at every size of --quick like the others, and so do the
# torch.distributed libraries where the venv has torch.
# Skips (exit 77) when the peers are not built (no Open MPI or Gloo development files).
# Usage: tests/scripts/perf_compare_test.sh BUILD_DIR
set -u
build=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for peer in mpi_all_reduce_perf gloo_all_reduce_perf; do
  if [[ ! -x $build/perf/peers/$peer ]]; then
    echo "SKIP: $build/perf/peers/$peer not built (Open MPI or Gloo development files missing)"
    exit 77
  fi
done
# The PyPI peers built here: each must then run and pass its checks.
extra_libs=""
for lib in impi mpich oneccl; do
  if [[ -x $build/perf/peers/${lib}_all_reduce_perf ]]; then
    extra_libs+=",$lib"
  else
    echo "note: ${lib}_all_reduce_perf not built (.venv-peers/$lib missing): not checked"
  fi
done
# The torch.distributed libraries (perf/compare_torch.py) where the source tree's venv has
# torch and the build has the baton package: PyTorch's gloo and Baton's backend both ways, and
# DeepSpeed's shared-memory op where it is installed (SETUP_DEEPSPEED=1).
torch_python=$root/.venv/bin/python
if PYTHONPATH=$build/python "$torch_python" -c "import baton.torch" 2>/dev/null; then
  extra_libs+=",torch_gloo,baton_torch,baton_torch_direct"
  if "$torch_python" -c "import deepspeed" >/dev/null 2>&1; then extra_libs+=",deepspeed"; fi
else
  echo "note: no torch in $root/.venv or no baton package in $build/python: torch libraries not checked"
fi
plot_python=""
for py in python3 /usr/bin/python3; do
  if "$py" -c "import matplotlib" 2>/dev/null; then plot_python=$py; break; fi
done
if [[ -z $plot_python ]]; then
  echo "SKIP: no python3 with matplotlib (apt-get install python3-matplotlib)"
  exit 77
fi

configs=shm2
if [[ $(id -u) -eq 0 ]] && ip netns add "pct$$" 2>/dev/null; then
  ip netns del "pct$$"
  configs=shm2,net2-1g
else
  echo "note: not root or no network namespaces: net2-1g left out"
fi

failed=0
# The libraries named, so that the torch ones run between the simulated hosts too (by default
# they run on one host only). Each run has 150 s (a few usually, Gloo's first about 40, under
# the suite's load): a run that hangs fails here, with its log, instead of the whole test at
# meson's limit.
if ! python3 "$root/perf/compare.py" --build "$build" --quick --configs "$configs" \
    --libs "baton,baton_reg,mpi,gloo_rc,gloo_hd$extra_libs" --timeout 150 --out "$out"; then
  echo "not ok - perf/compare.py exited with an error"
  for log in "$out"/raw/*.log; do
    if [[ ! -s ${log%.log}.jsonl ]]; then
      echo "--- $log (no records), its end:"
      tail -n 20 "$log"
    fi
  done
  failed=1
fi
for f in results.md results.json; do
  [[ -s $out/$f ]] || { echo "not ok - $f missing"; failed=1; }
done
IFS=, read -ra names <<<"$configs"
for c in "${names[@]}"; do
  for ext in png svg; do
    [[ -s $out/$c.$ext ]] || { echo "not ok - $c.$ext missing"; failed=1; }
  done
done
# Every configuration present, every library with every size, every check 0.
python3 - "$out/results.json" "$configs" "baton,mpi,gloo_rc,gloo_hd$extra_libs" <<'PY' || failed=1
import json, sys
report = json.load(open(sys.argv[1]))
wanted = sys.argv[2].split(",")
got = {c["name"]: c for c in report["configs"]}
ok = True
for name in wanted:
    if name not in got:
        print(f"not ok - {name} missing from results.json"); ok = False; continue
    results = got[name]["results"]
    for lib in sys.argv[3].split(","):
        if lib in ("impi", "mpich", "oneccl", "deepspeed") and not name.startswith("shm"):
            continue  # one host only
        sizes = results.get(lib, {})
        if len(sizes) != len(report["meta"]["sizes"]):
            print(f"not ok - {name} {lib}: {len(sizes)} sizes of {len(report['meta']['sizes'])}")
            ok = False
        for size, s in sizes.items():
            if s["nwrong"] != 0 or not s["busbw"] > 0 and int(size) > 0:
                print(f"not ok - {name} {lib} {size}: nwrong {s['nwrong']} busbw {s['busbw']}")
                ok = False
    print(f"{'ok' if ok else 'not ok'} - {name}: {len(results)} libraries checked")
if report["meta"]["failures"]:
    print("not ok - failures:", report["meta"]["failures"]); ok = False
sys.exit(0 if ok else 1)
PY
if ! grep -q "| check |" "$out/results.md" || grep -q "FAILED" "$out/results.md"; then
  echo "not ok - results.md has no check column or a FAILED row"
  failed=1
fi
[[ $failed -eq 0 ]] && echo "ok - perf/compare.py --quick ($configs)"
exit $failed
