#!/usr/bin/env bash
# The unit and conformance suites (CPU) built with AddressSanitizer and UBSan in their own
# build directory (${SAN_BUILD_DIR:-build-asan}), then run; the resource soak runs its full
# 1 000 create/destroy cycles here. The CUDA tests and the benchmarks are not built (no GPU
# in CI: the CUDA tests would only skip; NCCL is built as in the main build, so the CPU
# suites see the same plugin). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
B=${SAN_BUILD_DIR:-build-asan}
# -fno-sanitize=enum: the bad-input tests pass out-of-range enum values (op 99) through the
# ABI on purpose; the plugin checks them as integers.
SAN="-fsanitize=address,undefined -fno-sanitize=enum -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLPG_BUILD_BENCH=OFF -DDLPG_WITH_NCCL=ON \
  -DDLPG_BUILD_CUDA_TESTS=OFF \
  -DDLPG_WERROR=ON \
  -DCMAKE_C_FLAGS="$SAN" -DCMAKE_CXX_FLAGS="$SAN" \
  -DCMAKE_EXE_LINKER_FLAGS="$SAN" -DCMAKE_SHARED_LINKER_FLAGS="$SAN" "$@"
cmake --build "$B" -j"$(nproc)"
# Leaks are checked (at exit of each test process); a small quarantine keeps the soak's RSS
# meaningful. Gloo itself is not instrumented: ci/lsan.supp names what it keeps on purpose.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:quarantine_size_mb=16:detect_stack_use_after_return=0"
export LSAN_OPTIONS="suppressions=$PWD/ci/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export DLPG_SOAK_CYCLES=1000
# The instrumented build runs several times slower: every wall-clock bound of the tests, and
# every ctest entry's timeout, is scaled by this factor (tests/conformance/time_scale.h,
# tests/CMakeLists.txt).
export DLPG_TEST_TIME_SCALE=${DLPG_TEST_TIME_SCALE:-3}
cd "$B"
# ctest sets DLPG_SOAK_CYCLES=200 for test_faults and test_faults_gloo; the soak runs on
# its own with 1 000 on each host-memory backend. The entries include the shared-memory
# backend's (test_shm, test_faults, and every conformance entry without a _gloo suffix).
ctest --output-on-failure -j2 -E 'cuda'
./tests/test_faults --gtest_filter='FaultsSoak.*'
DLPG_CPU_BACKEND=gloo ./tests/test_faults --gtest_filter='FaultsSoak.*'
bash "$ROOT/ci/check-shm-left.sh" "the sanitizer run"
