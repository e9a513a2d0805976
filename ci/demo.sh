#!/usr/bin/env bash
# The main job on a fresh Debian machine: install what is missing, build, run 4 local ranks
# on the embedded store (allreduce, broadcast, allgather, send/recv), then a short bench
# table -- on GPUs when there are any and the NCCL path was built, else on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD_DIR=${BUILD_DIR:-build}
bash ci/install-deps.sh
bash ci/build.sh >/dev/null
echo "== dlpg demo: 4 ranks =="
"$BUILD_DIR/examples/dlpg-demo" 4
bench="$BUILD_DIR/bench/dlpg-bench"
if [ -x "$bench" ]; then
  ngpu=$(nvidia-smi -L 2>/dev/null | wc -l || true)
  if [ "${ngpu:-0}" -ge 1 ] && grep -q "DLPG_HAVE_NCCL:INTERNAL=ON\|DLPG_HAVE_NCCL=ON" "$BUILD_DIR/CMakeCache.txt" 2>/dev/null; then
    echo "== dlpg-bench: allreduce float32, $ngpu GPU ranks =="
    NCCL_NVLS_ENABLE=0 "$bench" allreduce --device cuda --nranks "$ngpu" -b 8 -e 64M -f 8 -w 5 -n 20
  else
    echo "== dlpg-bench: allreduce float32, 4 CPU ranks =="
    "$bench" allreduce --device cpu --nranks 4 -b 8 -e 4M -f 8 -w 3 -n 10
  fi
fi
