#!/usr/bin/env bash
# The library must export exactly the dlpg_* ABI listed in plugin/exported-symbols.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
lib=${1:-${BUILD_DIR:-build}/libdlpg.so}
got=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sed 's/@.*//' | sort -u)
if ! diff -u plugin/exported-symbols.txt <(echo "$got"); then
  echo "ci/check-symbols.sh: exported symbols of $lib differ from plugin/exported-symbols.txt" >&2
  exit 1
fi
soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
[ "$soname" = "libdlpg.so.0" ] || { echo "ci/check-symbols.sh: SONAME is '$soname', want libdlpg.so.0" >&2; exit 1; }
echo "ci/check-symbols.sh: $(echo "$got" | wc -l) symbols, SONAME $soname: OK"
# The NCCL backend module, when built, exports its entry point and nothing else (core reaches
# the rest through its table; the host services it forwards to stay core's; the name carries the backend ABI version).
mod="$(dirname "$lib")/libdlpg_nccl.so"
if [ -f "$mod" ]; then
  mgot=$(nm -D --defined-only "$mod" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sed 's/@.*//' | sort -u)
  [ "$mgot" = "dlpg_backend_init_v1" ] || {
    echo "ci/check-symbols.sh: $mod exports '$(echo $mgot)', want dlpg_backend_init_v1 only" >&2; exit 1; }
  echo "ci/check-symbols.sh: $mod exports dlpg_backend_init_v1 only: OK"
fi
