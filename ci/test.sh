#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, checks the exported symbols and the
# installed package, runs the conformance suite (ctest) and the Python suite (pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD_DIR=${BUILD_DIR:-build}
# Marks this run's processes, so that ci/check-shm-left.sh counts only its own leftovers when
# another run shares the machine.
export DLPG_CI_RUN=${DLPG_CI_RUN:-$$.$(date +%s%N)}
# Each phase's end and the time so far: CI has 40 minutes, and this says where they went.
phase() { echo "ci/test.sh: $1 done at $((SECONDS / 60)) min $((SECONDS % 60)) s"; }
bash ci/install-deps.sh
phase "install-deps"
# The project venv (ci/install-deps.sh): torch 2.13, JAX 0.10, Ray; every Python step uses it.
export PYTHON="$PWD/.venv/bin/python"
# NCCL, so that the NCCL module is compiled here too and the tests that load it run.
source ci/nccl-root.sh "$PYTHON"
# -Werror: the library, tests, tools and benchmarks build without a warning. The venv's jaxlib
# gives the XLA FFI headers, so libdlpg_xla.so (dlpg.jax) is built and tested.
bash ci/build.sh -DDLPG_WERROR=ON -DDLPG_XLA_PYTHON="$PYTHON"
phase "build"
bash ci/check-symbols.sh "$BUILD_DIR/libdlpg.so"
bash ci/check-layers.sh
# The file graph from the built objects: no circle between files or folders.
bash ci/check-file-graph.sh --quiet
# docs/architecture.md's figures (include and folder graphs, totals, sizes, layers) are what
# this build gives.
bash ci/architecture-figures.sh --check
bash ci/check-install.sh
phase "checks"
# One entry per googletest case, each with its own timeout (tests/CMakeLists.txt), so no
# --timeout here: ctest gives that default only to tests without one.
(cd "$BUILD_DIR" && ctest --output-on-failure -j2)
phase "ctest"
# No segment, socket or rank process of the shared-memory backend outlives the suites.
bash ci/check-shm-left.sh "ctest"
bash ci/check-no-cuda.sh
# libFuzzer on the store's frames and DLPack validation, bounded (FUZZ_SECONDS each).
bash ci/fuzz.sh
phase "fuzz"
if [ -d tests/python ]; then
  # The C++ torch backend, compiled for the venv's torch by torch.utils.cpp_extension into a
  # cache in the build dir (kept between runs: a rebuild is incremental), ahead of the
  # ranks' `import dlpg.torch` (else the first import would build it). test_packaging.py
  # builds the wheel (ci/wheel.sh) and installs it into a fresh venv.
  export DLPG_TORCH_EXT_CACHE="$PWD/$BUILD_DIR/torch-ext"
  MAX_JOBS=2 PYTHONPATH="$PWD/python_shim" "$PYTHON" -m dlpg.build_torch_ext
  phase "torch extension"
  DLPG_LIBRARY="$PWD/$BUILD_DIR/libdlpg.so" PYTHONPATH="$PWD/python_shim" JAX_PLATFORMS=cpu \
    "$PYTHON" -m pytest -q -rs tests/python
  bash ci/check-shm-left.sh "pytest"
  phase "pytest"
  # torch's own DistributedTest on "dlpg" at world sizes 2 and 3, test by test against gloo's
  # recorded outcomes (tests/torch_suite/README.md): about 4 min on the 2-core machine.
  bash ci/torch-suite.sh
  bash ci/check-shm-left.sh "torch suite"
  phase "torch suite"
fi
# Four ranks in network namespaces with a link cut mid-operation (needs root, as in CI).
bash ci/netns-test.sh
# docs/multi-host.md as written, two namespaces as hosts: torchrun --nnodes 2 with
# init_process_group("dlpg"), the C demo, and dlpg-store with a token (needs root, as in CI).
bash ci/netns-multihost.sh
phase "netns"
# The CPU unit and conformance suites again under ASan + UBSan (build-asan/).
bash ci/sanitize.sh
phase "sanitizers"
