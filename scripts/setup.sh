#!/usr/bin/env bash
# Installs what Baton needs to build and test (Debian 12 packages), then
# configures and builds it in ./build. Safe to run again: it installs only
# what is missing and rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

# Build and test tools; then the peers perf/compare.py runs against (Open MPI,
# Gloo), the trainer's BLAS, zlib and data set, matplotlib for perf/plot and
# the Python case studies' plots, Debian's fortunes (their corpus),
# clang with its fuzzing and sanitizer runtimes (scripts/fuzz.sh), and for the
# pip test patchelf (meson-python fixes the wheel's rpaths with it) and ccache
# (the wheel's builds reuse the main build's objects).
packages=(g++ meson ninja-build pkg-config libhwloc-dev libhwy-dev libibverbs-dev
          libgtest-dev libgmock-dev libbenchmark-dev python3 iproute2
          libssl-dev libpmix-dev openmpi-bin libopenmpi-dev libgloo-dev libopenblas-dev zlib1g-dev
          dataset-fashion-mnist python3-matplotlib fortunes clang-16 libclang-rt-16-dev
          python3-venv python3-dev patchelf ccache)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The aarch64 cross compiler, qemu-user and the arm64 -dev packages
# (multiarch) for the aarch64 test (docs/arm.md); SETUP_CROSS=0 skips them.
if [ "${SETUP_CROSS:-1}" != 0 ]; then
  scripts/cross_aarch64.sh --install-only
fi

# CUDA: nvcc from /usr/local/cuda when installed, so the default (cuda=auto)
# configuration builds the CUDA kernels (docs/cuda.md).
if [ -d /usr/local/cuda/bin ]; then
  export PATH="$PATH:/usr/local/cuda/bin"
fi

# Python: a virtual environment in .venv (git-ignored) with NumPy, mpi4py and
# meson-python (the pip test builds the wheel with it), and torch 2.x from
# PyPI for the torch backend, its tests and the Python examples (docs/python.md:
# what torch's wheel pulls in and how long it takes). Each part is skipped when
# it is there. SETUP_TORCH=0 leaves torch out (about 3 GB of downloads:
# scripts/perf.sh, the main job, needs none of it); SETUP_PYTHON=0 skips the
# venv altogether. SETUP_DEEPSPEED=1 adds DeepSpeed, whose shared-memory
# allreduce perf/python/torch_compare.py measures against the torch backend
# (off by default: nothing else uses it; it builds that op with ninja on first
# use).
venv_made=0
python_packages=()
if [ "${SETUP_PYTHON:-1}" != 0 ]; then
  .venv/bin/python3 -c "import numpy, mpi4py, mesonpy" 2>/dev/null || python_packages+=(numpy mpi4py meson-python)
  if [ "${SETUP_TORCH:-1}" != 0 ] && ! .venv/bin/python3 -c "import torch" 2>/dev/null; then
    python_packages+=("torch==2.15.*")
  fi
  # PyTorch's own process-group suite (tests/python/torch_suite.py) imports these.
  if [ "${SETUP_TORCH:-1}" != 0 ] && ! .venv/bin/python3 -c "import expecttest, hypothesis" 2>/dev/null; then
    python_packages+=(expecttest hypothesis)
  fi
  if [ "${SETUP_DEEPSPEED:-0}" = 1 ] && ! .venv/bin/python3 -c "import deepspeed" 2>/dev/null; then
    python_packages+=("deepspeed==0.19.*")
  fi
fi
if ((${#python_packages[@]})); then
  [ -x .venv/bin/python3 ] || /usr/bin/python3 -m venv .venv
  echo "setup: installing ${python_packages[*]} into .venv$([[ " ${python_packages[*]} " == *torch* ]] && echo " (about 5 GB)")"
  .venv/bin/pip install -q --disable-pip-version-check "${python_packages[@]}"
  venv_made=1
fi

# The PyPI peers of perf/compare.py (Intel MPI, MPICH, oneCCL), each in its own
# venv under .venv-peers/: two MPIs' mpi.h, libmpi.so.12 and mpiexec must not
# share a prefix, and none goes into .venv, which stays as lean as above for
# the main job. perf/peers/meson.build builds a driver binary against each one
# found there; perf/compare.py leaves out, with a note, any that is missing.
# About 60 MB (MPICH), 330 MB (Intel MPI) and 2 GB (oneCCL: it pulls Intel MPI
# and the SYCL runtime) installed. SETUP_PEERS=0 skips them.
if [ "${SETUP_PEERS:-1}" != 0 ]; then
  for spec in "impi:include/mpi.h:impi-rt==2021.18.* impi-devel==2021.18.*" \
              "mpich:include/mpi.h:mpich==5.0.*" \
              "oneccl:include/oneapi/ccl.hpp:oneccl==2022.1.* oneccl-devel==2022.1.*"; do
    IFS=: read -r name marker pkgs <<<"$spec"
    [ -e ".venv-peers/$name/$marker" ] && continue
    [ -x ".venv-peers/$name/bin/python3" ] || /usr/bin/python3 -m venv ".venv-peers/$name"
    echo "setup: installing $pkgs into .venv-peers/$name"
    # shellcheck disable=SC2086  # $pkgs is a list of requirement specifiers
    ".venv-peers/$name/bin/pip" install -q --disable-pip-version-check $pkgs
    venv_made=1
  done
fi

if [ ! -f build/build.ninja ]; then
  meson setup build --buildtype=release
elif [ "$venv_made" = 1 ]; then
  meson setup --reconfigure build >/dev/null  # finds the new venv's Python and torch
fi
# A clean build stays clean: any compiler warning in what this run built
# fails the set-up (and so CI), naming the lines.
mkdir -p build/meson-logs
ninja -C build 2>&1 | tee build/meson-logs/ninja-output.txt
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] || exit "$status"
if grep -n "warning:" build/meson-logs/ninja-output.txt; then
  echo "setup: the build printed warnings (above); fix them (CI fails on a new warning)"
  exit 1
fi
