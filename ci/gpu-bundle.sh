#!/usr/bin/env bash
# Build the GPU bundle HERE (the development machine: CUDA 13's nvcc in /usr/local/cuda, no
# GPU; NCCL from /usr/local/cuda when it has one, else the package index's nvidia-nccl-cu13,
# pinned to the GPU machine's NCCL 2.28.9 in the project venv) and fill the
# git-ignored folder .gpu/ with what the GPU test machine needs and lacks:
#   .gpu/lib/     libdlpg.so*, the NCCL backend module libdlpg_nccl.so beside it (core loads
#                 it with dlopen at the first CUDA tensor), libcudart.so.13, and the Debian
#                 shared libraries the plugin needs (libgloo and its dependencies, via ldd)
#   .gpu/bin/     test binaries (test_cuda + the CPU conformance binaries), dlpg-store,
#                 dlpg-info, dlpg-bench when the bench is built, mpi_bench when MPI is found
#                 (it uses the GPU machine's own libmpi: none of its libraries is shipped)
#   .gpu/python_shim/, .gpu/tests_python/   copies, when present
#   .gpu/bench/   bench/cpu-compare.py, vcoll-compare.py and bench_util.py (run: python3 .gpu/bench/cpu-compare.py
#                 --bin .gpu/bin --lib .gpu/lib ...)
#   .gpu/wheel/   the wheel of ci/wheel.sh with the NCCL module in it (ci/gpu-wheel.sh installs
#                 it there)
# libnccl is NOT shipped (218 MB): the GPU machine has /lib/x86_64-linux-gnu/libnccl.so.2
# (and the copy in Python's nvidia/nccl package). Then ship it with the run tool:
#   carry [".gpu"], command "bash ci/gpu-test.sh".
# Usage: ci/gpu-bundle.sh [BUILD_DIR]   (default build-gpu; -j2, the machine is shared)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-gpu}"
jobs="${DLPG_JOBS:-2}"
py="${PYTHON:-$PWD/.venv/bin/python}"

source ci/nccl-root.sh "$py"

# $ORIGIN run path: the libraries find their Debian dependencies beside them, and the wheel
# the GPU machine builds from .gpu (ci/gpu-wheel.sh) takes them as they are.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDLPG_WITH_NCCL=ON -DDLPG_ORIGIN_RPATH=ON \
  >"$build.configure.log" 2>&1 \
  || { cat "$build.configure.log"; exit 1; }
grep -q "NCCL path ON" "$build.configure.log" || {
  echo "gpu-bundle: the NCCL path is OFF in this configuration:" >&2
  grep "dlpg:" "$build.configure.log" >&2
  exit 1
}
# Build the library, the tools and the tests; the bench is another area's and may not
# build yet, which must not stop the bundle.
cmake --build "$build" -j"$jobs" --target dlpg dlpg_nccl
for t in test_cuda test_cuda_ipc test_collectives test_p2p test_errors test_group test_abi_c dlpg-store dlpg-info; do
  cmake --build "$build" -j"$jobs" --target "$t" >/dev/null 2>&1 || echo "gpu-bundle: target $t did not build (skipped)"
done
cmake --build "$build" -j"$jobs" --target dlpg-bench >/dev/null 2>&1 || echo "gpu-bundle: dlpg-bench did not build (skipped)"
for t in cross-core-read fresh-pages cuda-share-probe; do
  cmake --build "$build" -j"$jobs" --target "$t" >/dev/null 2>&1 || echo "gpu-bundle: $t did not build (skipped)"
done
# The MPI column of bench/cpu-compare.py (only where CMake found MPI).
cmake --build "$build" -j"$jobs" --target mpi_bench >/dev/null 2>&1 || echo "gpu-bundle: mpi_bench did not build (skipped)"

rm -rf .gpu
mkdir -p .gpu/lib .gpu/bin
cp -a "$build"/libdlpg.so* "$build"/libdlpg_nccl.so .gpu/lib/
# libdlpg.so itself links no CUDA or NCCL library; only the module does.
if ldd "$build/libdlpg.so" | grep -qE "libcudart|libnccl"; then
  echo "gpu-bundle: $build/libdlpg.so links CUDA or NCCL; it must not" >&2
  exit 1
fi
for f in "$build"/tests/test_* "$build"/tools/dlpg-store "$build"/tools/dlpg-info "$build"/bench/dlpg-bench "$build"/bench/cross-core-read "$build"/bench/fresh-pages "$build"/bench/split-create "$build"/bench/cuda-share-probe \
         "$build"/bench/mpi_bench; do
  [ -f "$f" ] && [ -x "$f" ] && cp "$f" .gpu/bin/
done
# The CUDA runtime is small; shipping it avoids depending on where the GPU machine keeps it.
cudart=$(ldd "$build/libdlpg_nccl.so" | awk '/libcudart/ {print $3}')
[ -n "$cudart" ] && cp -L "$cudart" .gpu/lib/

# Debian libraries: everything libdlpg and the binaries resolve from /lib or /usr/lib except
# glibc, the compiler runtime (the GPU machine's are newer) and the CUDA/NCCL libraries.
skip='^(libc|libm|libdl|libpthread|librt|ld-linux-x86-64|libstdc\+\+|libgcc_s|libcudart|libnccl|libcuda|libutil|libresolv)\.so'
for bin in .gpu/lib/libdlpg.so .gpu/lib/libdlpg_nccl.so .gpu/bin/*; do
  # mpi_bench runs on the GPU machine's Open MPI (same libmpi.so.40 ABI); shipping Debian's
  # libmpi and its plugins' dependencies would mix two MPI installations.
  [ "$(basename "$bin")" = mpi_bench ] && continue
  ldd "$bin" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ "$name" =~ $skip ]]; then continue; fi
  case "$path" in
    /lib/*|/usr/lib/*) [ -e ".gpu/lib/$name" ] || cp -L "$path" ".gpu/lib/$name" ;;
  esac
done
strip --strip-unneeded .gpu/lib/*.so* .gpu/bin/* 2>/dev/null || true
# The GPU machine has no Debian dlpack: plugin/xla/build.sh (built there against jaxlib's FFI
# headers) takes the header from .gpu/include.
[ -f /usr/include/dlpack/dlpack.h ] && { mkdir -p .gpu/include/dlpack; cp /usr/include/dlpack/dlpack.h .gpu/include/dlpack/; }
# The version header CMake generates (dlpg.h includes it), as an installed tree has it.
mkdir -p .gpu/include/dlpg; cp "$build/include/dlpg/dlpg_version.h" .gpu/include/dlpg/

[ -d python_shim ] && { mkdir -p .gpu/python_shim; cp -a python_shim/. .gpu/python_shim/; rm -rf .gpu/python_shim/build .gpu/python_shim/dlpg/torch/_C_dlpg*; }
# The side-by-side CPU benchmark (also in the carried tree; here so .gpu alone can run it).
mkdir -p .gpu/bench && cp bench/cpu-compare.py bench/vcoll-compare.py bench/bench_util.py .gpu/bench/
[ -d tests/python ] && { mkdir -p .gpu/tests_python; cp -a tests/python/. .gpu/tests_python/; }
find .gpu -name __pycache__ -type d -prune -exec rm -rf {} +
# The wheel: auditwheel bundles the CUDA runtime; NCCL stays the machine's.
CMAKE_BUILD_PARALLEL_LEVEL="$jobs" bash ci/wheel.sh .gpu/wheel "$py" >"$build.wheel.log" 2>&1 \
  || { tail -30 "$build.wheel.log"; echo "gpu-bundle: the wheel did not build" >&2; exit 1; }
"$py" -c 'import sys, zipfile; sys.exit("dlpg/_native/libdlpg_nccl.so" not in zipfile.ZipFile(sys.argv[1]).namelist())' .gpu/wheel/*.whl \
  || { echo "gpu-bundle: the wheel has no libdlpg_nccl.so" >&2; exit 1; }

# Every binary must resolve everything but the CUDA driver/runtime/NCCL from .gpu/lib.
bad=0
for bin in .gpu/lib/libdlpg.so .gpu/lib/libdlpg_nccl.so .gpu/bin/*; do
  miss=$(LD_LIBRARY_PATH=.gpu/lib ldd "$bin" 2>/dev/null | grep "not found" | grep -vE "libcuda\.so|libnccl" || true)
  if [ -n "$miss" ]; then echo "gpu-bundle: $bin: $miss" >&2; bad=1; fi
done
size=$(du -sm .gpu | cut -f1)
echo "gpu-bundle: .gpu is ${size} MiB:"
ls -la .gpu/lib .gpu/bin
[ "$size" -le 48 ] || { echo "gpu-bundle: .gpu is over the 48 MiB budget" >&2; bad=1; }
exit $bad
