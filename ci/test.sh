#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, checks the exported symbols and the
# installed package, runs the conformance suite (ctest) and the Python suite (pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD_DIR=${BUILD_DIR:-build}
bash ci/install-deps.sh
bash ci/build.sh
bash ci/check-symbols.sh "$BUILD_DIR/libdlpg.so"
bash ci/check-install.sh
(cd "$BUILD_DIR" && ctest --output-on-failure -j2 --timeout 900)
if [ -d tests/python ]; then
  DLPG_LIBRARY="$PWD/$BUILD_DIR/libdlpg.so" PYTHONPATH="$PWD/python_shim" \
    /usr/bin/python3 -m pytest -q tests/python
fi
# Four ranks in network namespaces with a link cut mid-operation (needs root, as in CI).
bash ci/netns-test.sh
# The CPU unit and conformance suites again under ASan + UBSan (build-asan/).
bash ci/sanitize.sh
