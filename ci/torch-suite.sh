#!/usr/bin/env bash
# torch's own distributed test suite (DistributedTest, tests/torch_suite/run.py) on the "dlpg"
# backend at world sizes 2 and 3, compared test by test with gloo's recorded outcomes
# (tests/torch_suite/gloo-ws*.txt): every test gloo passes must pass on dlpg, except the
# exceptions tests/torch_suite/README.md lists with their reason. Needs libdlpg.so in
# $BUILD_DIR and the torch extension built (ci/test.sh builds both first).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
PYTHON=${PYTHON:-$PWD/.venv/bin/python}
export DLPG_LIBRARY="$PWD/$BUILD_DIR/libdlpg.so"
export DLPG_TORCH_EXT_CACHE=${DLPG_TORCH_EXT_CACHE:-$PWD/$BUILD_DIR/torch-ext}
export PYTHONPATH="$PWD/python_shim${PYTHONPATH:+:$PYTHONPATH}"
out="$BUILD_DIR/torch-suite"
mkdir -p "$out"
status=0
for ws in ${TORCH_SUITE_WORLD_SIZES:-2 3}; do
  log="$out/dlpg-ws$ws.log"
  # One test is bounded by run.py (--timeout, 60 s); the whole run by this.
  if ! timeout 1500 "$PYTHON" tests/torch_suite/run.py --backend dlpg --world-size "$ws" \
      --out "$out/dlpg-ws$ws.txt" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "ci/torch-suite.sh: the world-size-$ws run did not finish (log: $log)" >&2
    status=1
    continue
  fi
  tail -n 2 "$log"
  if ! "$PYTHON" tests/torch_suite/compare.py --world-size "$ws" \
      "tests/torch_suite/gloo-ws$ws.txt" "$out/dlpg-ws$ws.txt"; then
    # The failing tests' tracebacks, from unittest's summary at the end of the log.
    sed -n '/^=\{20,\}$/,$p' "$log" | head -n 300
    status=1
  fi
done
exit $status
