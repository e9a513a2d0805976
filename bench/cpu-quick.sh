#!/usr/bin/env bash
# Two CPU figures of the Gloo path, 2 local ranks over loopback, through the public API:
# the bandwidth of a 16 MiB float32 allreduce (Gloo's ring, as torch's ProcessGroupGloo runs
# it) and the latency of an 8-byte one. Numbers only, no pass/fail (the tests check results;
# compare_torch_gloo.py puts them beside torch's gloo). BUILD_DIR defaults to build.
set -euo pipefail
cd "$(dirname "$0")/.."
bench=${BUILD_DIR:-build}/bench/dlpg-bench
"$bench" -D cpu -n 2 -o allreduce -d float32 -r sum -b 16M -e 16M -w 1 -i 10 -R 3 "$@"
"$bench" -D cpu -n 2 -o allreduce -d float32 -r max -b 8 -e 8 -w 50 -i 500 -R 5 "$@"
