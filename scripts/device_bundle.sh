#!/usr/bin/env bash
# Builds what the GPU check (scripts/device_check.sh) runs and packs it, with
# every shared library a bare GPU machine lacks, into one folder that travels
# with the source tree (docs/cuda.md, "Running the check on a GPU").
#
#   scripts/device_bundle.sh [BUNDLE_DIR]     (default: device-bundle, git-ignored)
#
# BUILD=DIR uses an existing build tree instead of configuring build-device
# (release, -Dcuda=enabled, -Dgpu_archs=90: H100 and H200); it must have CUDA
# and sm_90 code. The folder holds baton.tar.xz (bin/, lib/, tests/, data/)
# and MANIFEST (what is inside, the libraries' origins, sizes); it
# stays under BUNDLE_LIMIT_MIB (60).
#
# What the GPU machine is assumed to have: glibc, libstdc++, the NVIDIA driver,
# the CUDA toolkit and PyTorch (for the torch step), and the source tree
# beside the bundle (the Python package is compiled there, against its torch). Everything else that ldd
# lists (hwloc, OpenSSL's libcrypto, libibverbs and libnl, OpenBLAS with
# libgfortran, zlib, libudev) is carried; libstdc++ and libgcc_s are carried
# too, in lib/compat, used only where the machine's own are too old.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bundle=${1:-device-bundle}
limit_mib=${BUNDLE_LIMIT_MIB:-60}
build=${BUILD:-build-device}

if [ -d /usr/local/cuda/bin ]; then export PATH="$PATH:/usr/local/cuda/bin"; fi
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" --buildtype=release -Dcuda=enabled -Dgpu_archs=90 >/dev/null
fi
targets=$(ninja -C "$build" -t targets all)
grep -q '^perf/cuda_kernels_bench:' <<<"$targets" ||
  { echo "device_bundle: $build is not a CUDA build (meson setup -Dcuda=enabled)" >&2; exit 1; }

# Everything device_check.sh runs.
bins=(src/batonrun src/baton-topo perf/all_reduce_perf perf/broadcast_perf
      perf/reduce_scatter_perf perf/all_gather_perf perf/cuda_kernels_bench
      examples/trainer/baton-train)
tests=(tests/cuda_test tests/cuda_host_test examples/trainer/trainer_cuda_backend_test)
ninja -C "$build" src/libbaton.so.0.1.0 "${bins[@]}" "${tests[@]}" >/dev/null

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{bin,lib/compat,tests,data}
for b in "${bins[@]}"; do cp "$build/$b" "$stage/bin/"; done
for t in "${tests[@]}"; do cp "$build/$t" "$stage/tests/"; done
cp -L "$build/src/libbaton.so.0" "$stage/lib/libbaton.so.0"

# The shared libraries ldd resolves for them, but for glibc's own, the vDSO
# and libbaton (carried above); libstdc++ and libgcc_s go to lib/compat.
: >"$stage/origins"
while read -r name path; do
  case "$name" in
    linux-vdso.so.* | ld-linux-*.so.* | libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | \
      librt.so.* | libresolv.so.* | libbaton.so.*) continue ;;
    libstdc++.so.* | libgcc_s.so.*) dest=lib/compat ;;
    *) dest=lib ;;
  esac
  [ -e "$path" ] || { echo "device_bundle: $name not found (ldd: $path)" >&2; exit 1; }
  cp -L "$path" "$stage/$dest/$name"
  echo "$dest/$name <- $(readlink -f "$path")" >>"$stage/origins"
done < <(ldd "$stage"/bin/* "$stage"/tests/* "$stage/lib/libbaton.so.0" |
         awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u)

# Fashion-MNIST for baton-train (Debian's dataset-fashion-mnist).
data=/usr/share/datasets/fashion-mnist
[ -f "$data/train-images-idx3-ubyte.gz" ] ||
  { echo "device_bundle: $data is missing (apt-get install dataset-fashion-mnist)" >&2; exit 1; }
cp "$data"/*.gz "$stage/data/"

strip --strip-unneeded "$stage"/bin/* "$stage"/tests/* "$stage"/lib/*.so* 2>/dev/null || true

mkdir -p "$bundle"
rm -f "$bundle/baton.tar.xz" "$bundle/MANIFEST"
tar -C "$stage" -cf - bin lib tests data | xz -T0 -6 >"$bundle/baton.tar.xz"
{
  echo "# Baton device bundle: $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)," \
       "built $(date -u +%Y-%m-%dT%H:%M:%SZ) from $build"
  echo "# CUDA: $(nvcc --version | tail -1); archs $(meson introspect --buildoptions "$build" |
       python3 -c 'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]=="gpu_archs"][0])')"
  echo "# glibc needed at most: $(objdump -T "$stage"/bin/* "$stage"/tests/* "$stage"/lib/libbaton.so.0 |
       grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
  echo "# libraries carried (lib/, lib/compat/) and where they came from:"
  sed 's/^/#   /' "$stage/origins"
  (cd "$stage" && find bin lib tests data -type f -printf '%s %p\n' | sort -k2)
} >"$bundle/MANIFEST"
size=$(stat -c %s "$bundle/baton.tar.xz")
echo "device_bundle: $bundle/baton.tar.xz, $((size / 1024 / 1024)) MiB ($(grep -c '^[0-9]' "$bundle/MANIFEST") files)"
if ((size > limit_mib * 1024 * 1024)); then
  echo "device_bundle: over the ${limit_mib} MiB limit" >&2
  exit 1
fi
