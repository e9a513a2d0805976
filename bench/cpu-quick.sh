#!/usr/bin/env bash
# Two CPU figures of the Gloo path, 2 local ranks over loopback, through the public API:
# the bandwidth of a 16 MiB float32 allreduce (Gloo's ring, as torch's ProcessGroupGloo runs
# it) and the latency of an 8-byte one. Numbers only, no pass/fail (the tests check results;
# compare_torch_gloo.py puts them beside torch's gloo). BUILD_DIR defaults to build.
set -euo pipefail
cd "$(dirname "$0")/.."
bench=${BUILD_DIR:-build}/bench/dlpg-bench
"$bench" allreduce --device cpu --nranks 2 -d float -o sum -b 16M -e 16M -w 1 -n 10 --reps 3 --outofplace "$@"
"$bench" allreduce --device cpu --nranks 2 -d float -o max -b 8 -e 8 -w 50 -n 500 --reps 5 --outofplace "$@"
