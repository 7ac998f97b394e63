#!/usr/bin/env python3
"""Builds the `baton` Python package against this machine's Python and torch, without meson.

    device_python_build.py --lib DIR --out DIR [--jobs N]

For scripts/device_check.sh on a GPU machine, which has torch (with CUDA) and a compiler but
neither meson nor the Python of the machine that built the bundle. Compiles the two extensions
of python/meson.build with the same flags (_core: the NumPy collectives; _baton_torch: the
torch.distributed backend, with CUDA tensors when torch has CUDA) into OUT/baton beside the
package's .py files, linked to the libbaton in --lib (rpath). Exits non-zero, saying why, when
something is missing (Python.h, torch's headers, the CUDA runtime headers).
"""

import argparse
import concurrent.futures
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Every source of the torch extension: the two folders hold nothing else (python/baton/meson.build
# lists the same files); python/common's the NumPy memory handler compiles in too.
COMMON_SOURCES = sorted(glob.glob(os.path.join(ROOT, "python", "common", "*.cc")))
TORCH_SOURCES = sorted(glob.glob(os.path.join(ROOT, "python", "torch_backend", "*.cc"))) + \
    COMMON_SOURCES


def cuda_include(torch):
    """The CUDA runtime headers torch's c10/cuda headers include, as python/meson.build finds
    them: the nvidia wheels' beside torch, else the toolkit's. The runtime wheel alone lacks
    crt/host_config.h (it comes with nvcc), so a folder that has it is added: the same folder,
    the toolkit's, the system's or another wheel's. Returns the folders, or [] and why not."""
    site = os.path.dirname(os.path.dirname(torch.__file__))
    homes = [os.environ.get(v, "") for v in ("CUDA_HOME", "CUDA_PATH")]
    places = sorted(glob.glob(os.path.join(site, "nvidia", "*", "include")))
    places += [os.path.join(h, "include") for h in homes if h]
    places += sorted(glob.glob("/usr/local/cuda*/include")) + ["/usr/include"]
    places += sorted(glob.glob(os.path.join(site, "triton", "backends", "nvidia", "include")))
    runtime = [d for d in places if os.path.exists(os.path.join(d, "cuda_runtime_api.h"))]
    crt = [d for d in places if os.path.exists(os.path.join(d, "crt", "host_config.h"))]
    if not runtime:
        return [], "no cuda_runtime_api.h in " + ", ".join(places)
    if not crt:
        return [], "no crt/host_config.h beside " + runtime[0] + " (the CUDA compiler's headers)"
    first = runtime[0]
    return ([first] if first in crt else [first, crt[0]]), ""


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed:\n{r.stderr[-4000:]}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lib", required=True, help="folder of libbaton.so.0")
    parser.add_argument("--out", required=True, help="folder to put the package baton in")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    a = parser.parse_args()
    lib = os.path.abspath(a.lib)
    pkg = os.path.join(os.path.abspath(a.out), "baton")
    objs = os.path.join(os.path.abspath(a.out), "obj")
    os.makedirs(pkg, exist_ok=True)
    os.makedirs(objs, exist_ok=True)
    for f in glob.glob(os.path.join(ROOT, "python", "baton", "*.py")):
        shutil.copy(f, pkg)
    if not os.path.exists(os.path.join(lib, "libbaton.so.0")):
        sys.exit(f"device_python_build: no libbaton.so.0 in {lib}")
    # The bundle carries libbaton.so.0 only; the linker wants the unversioned name.
    if not os.path.exists(os.path.join(objs, "libbaton.so")):
        os.symlink(os.path.join(lib, "libbaton.so.0"), os.path.join(objs, "libbaton.so"))

    py_include = sysconfig.get_paths()["include"]
    if not os.path.exists(os.path.join(py_include, "Python.h")):
        sys.exit(f"device_python_build: no Python.h in {py_include} (the Python headers)")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    cxx = os.environ.get("CXX", "g++")
    common = ["-O2", "-std=c++20", "-fPIC", "-fvisibility=hidden", "-I" + os.path.join(ROOT, "include"),
              "-isystem", py_include]
    link_baton = ["-L" + objs, "-lbaton", "-Wl,-rpath," + lib]

    import torch
    import torch.utils.cpp_extension as ext
    torch_args = ["-D_GLIBCXX_USE_CXX11_ABI=%d" % int(torch._C._GLIBCXX_USE_CXX11_ABI)]
    for i in ext.include_paths():
        torch_args += ["-isystem", i]
    torch_lib = ext.library_paths()[0]
    torch_link = ["-L" + torch_lib, "-Wl,-rpath," + torch_lib, "-lc10", "-ltorch", "-ltorch_cpu",
                  "-ltorch_python"]
    cuda_dirs, why_not = cuda_include(torch) if torch.version.cuda else ([], "torch has no CUDA")
    cuda = " + ".join(cuda_dirs)
    for d in cuda_dirs:
        torch_args += ["-isystem", d]
    if cuda:
        torch_args += ["-DBATON_TORCH_CUDA"]
        torch_link += ["-lc10_cuda"]
    # What python/meson.build writes from _build_info.py.in (baton.torch checks the torch).
    with open(os.path.join(ROOT, "python", "baton", "_build_info.py.in")) as f:
        info = f.read()
    with open(os.path.join(ROOT, "meson.build")) as f:
        version = re.search(r"version : '([^']+)'", f.read()).group(1)
    for key, value in {"BATON_VERSION": repr(version), "TORCH_VERSION": repr(torch.__version__),
                       "TORCH_CUDA": str(bool(cuda)), "LIBBATON_CUDA": str(bool(cuda)),
                       "WHEEL": "False"}.items():
        info = info.replace(f"@{key}@", value)
    with open(os.path.join(pkg, "_build_info.py"), "w") as f:
        f.write(info)
    print(f"device_python_build: Python {sys.version.split()[0]}, torch {torch.__version__}, "
          f"CUDA tensors: {'yes (' + cuda + ')' if cuda else 'no (' + why_not + ')'}", flush=True)

    start = time.monotonic()
    jobs = [([cxx] + common + ["-shared", os.path.join(ROOT, "python", "baton", "_core.cc"),
              "-o", os.path.join(pkg, "_core" + suffix)] + link_baton),
            ([cxx] + common + ["-shared", os.path.join(ROOT, "python", "baton", "_numpy_memory.cc")]
             + COMMON_SOURCES + ["-o", os.path.join(pkg, "_numpy_memory" + suffix)] + link_baton)]
    for s in TORCH_SOURCES:
        jobs.append([cxx] + common + torch_args +
                    ["-c", s, "-o", os.path.join(objs, os.path.basename(s) + ".o")])
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        for f in [pool.submit(run, j) for j in jobs]:
            f.result()
    run([cxx, "-shared", "-o", os.path.join(pkg, "_baton_torch" + suffix)] +
        [os.path.join(objs, os.path.basename(s) + ".o") for s in TORCH_SOURCES] + link_baton +
        torch_link +
        ["-lpthread"])
    print(f"device_python_build: built {pkg} in {time.monotonic() - start:.0f} s", flush=True)


if __name__ == "__main__":
    try:
        main()
    except RuntimeError as e:
        sys.exit(f"device_python_build: {e}")
