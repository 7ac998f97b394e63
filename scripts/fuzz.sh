#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan) and
# runs each for a bounded time. Every parser of what a peer, a launcher or a
# user hands to Baton has one: control frames, the TCP stream (headers, call
# descriptors, data), unique ids, BATON_* values, flight recorder files,
# batonrun's host lists and hostfiles.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [BUILD_DIR]
#
# SECONDS_PER_TARGET defaults to 20 (FUZZ_SECONDS); BUILD_DIR to build-fuzz.
# Needs clang-16 and its runtimes (Debian: clang-16 libclang-rt-16-dev);
# exits 77 (meson's "skipped") without them. Crashes leave their input in
# BUILD_DIR/crashes/ and make the script exit 1. Prints one line a target:
# its executions and coverage.
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-${FUZZ_SECONDS:-20}}
out=${2:-build-fuzz}
cxx=${CXX_FUZZ:-clang++-16}
if ! command -v "$cxx" > /dev/null; then
  echo "fuzz: $cxx not found (apt-get install clang-16 libclang-rt-16-dev); skipped"
  exit 77
fi
mkdir -p "$out/obj" "$out/crashes" "$out/corpus"

# baton_config.h comes from a meson build; any will do (it holds versions).
config_dir=""
for d in build build-nocuda "$out"; do
  [[ -f $d/src/baton_config.h ]] && config_dir=$d/src && break
done
if [[ -z $config_dir ]]; then
  mkdir -p "$out/src"
  printf '#pragma once\n#define BATON_MAJOR 0\n#define BATON_MINOR 1\n#define BATON_PATCH 0\n' \
    > "$out/src/baton_config.h"
  config_dir=$out/src
fi

flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -Isrc -Iinclude "-I$config_dir"
       -fsanitize=address,undefined -fno-sanitize-recover=undefined)
# The library below the algorithms, whole folders so that a file one of
# them starts to call is never missing: an archive, from which the linker
# takes only what the targets reach. The fuzzers test parsers, not the
# reduce-copy kernels (kernels_test does): the Highway back end is compiled
# for its static target only (HWY_COMPILE_ONLY_STATIC, no SIMD target on
# x86-64's baseline), so ReduceCopy runs the portable loops and the
# sanitized build stays short.
sources=(src/base/*.cc src/bootstrap/*.cc src/transport/*.cc src/kernels/*.cc
         src/tuning/algorithm_filter.cc src/tools/batonrun/hosts.cc)
objects=()
compile_failed=$out/compile_failed
rm -f "$compile_failed"
# An object is reused only when neither its source nor any header changed
# since the last build (a header that changes a struct's layout would
# otherwise leave objects that disagree about it).
headers_stamp=$out/obj/.headers
if [[ ! -f $headers_stamp ]] || [[ -n $(find src include -name '*.h' -newer "$headers_stamp" -print -quit) ]]; then
  rm -f "$out"/obj/*.o
fi
for src in "${sources[@]}"; do
  obj=$out/obj/$(echo "${src#src/}" | tr / _).o
  objects+=("$obj")
  [[ -f $obj && ! $src -nt $obj ]] && continue
  extra=()
  case $src in
    src/kernels/cpu_hwy*) extra=(-DHWY_COMPILE_ONLY_STATIC) ;;
  esac
  # As many compilers at once as there are cores.
  while (($(jobs -rp | wc -l) >= $(nproc))); do wait -n; done
  { "$cxx" "${flags[@]}" "${extra[@]}" -fsanitize=fuzzer-no-link -c "$src" -o "$obj" ||
      echo "$src" >> "$compile_failed"; } &
done
wait
if [[ -f $compile_failed ]]; then
  echo "fuzz: cannot compile $(tr '\n' ' ' < "$compile_failed")"
  rm -f "${objects[@]}"
  exit 1
fi
touch "$headers_stamp"
library=$out/libbaton_fuzz.a
rm -f "$library"
ar rcs "$library" "${objects[@]}"

failures=0
for target in tests/fuzz/*.cc; do
  name=$(basename "$target" .cc)
  bin=$out/$name
  "$cxx" "${flags[@]}" -fsanitize=fuzzer "$target" "$library" -lcrypto -lhwy -lpthread -o "$bin" ||
    { echo "fuzz: cannot build $name"; failures=$((failures + 1)); continue; }
  mkdir -p "$out/corpus/$name"
  log=$out/$name.log
  # tests/fuzz/corpus/NAME: inputs that once failed, run first as regressions.
  seeds=()
  [[ -d tests/fuzz/corpus/$name ]] && seeds=("tests/fuzz/corpus/$name")
  "$bin" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$out/crashes/$name-" "$out/corpus/$name" "${seeds[@]}" > "$log" 2>&1
  status=$?
  stats=$(grep -E "^#[0-9]+.*(DONE|pulse)" "$log" | tail -1)
  if [[ $status -ne 0 ]]; then
    echo "fuzz: $name FAILED (exit $status); the input is in $out/crashes/, the log in $log"
    grep -E "ERROR|SUMMARY|runtime error" "$log" | head -5
    failures=$((failures + 1))
  else
    echo "fuzz: $name ok for ${seconds} s: ${stats:-$(tail -1 "$log")}"
  fi
done
exit $((failures > 0))
