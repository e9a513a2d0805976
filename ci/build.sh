#!/usr/bin/env bash
# Configures and builds dlpg into ${BUILD_DIR:-build}. CUDA/NCCL are used when found under
# /usr/local/cuda; without them the CPU plugin still builds.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} "$@"
cmake --build "$BUILD_DIR" -j"$(nproc)"
