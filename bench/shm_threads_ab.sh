#!/usr/bin/env bash
# The shm backend's helper threads (DLPG_SHM_THREADS) side by side: for each rank count, the
# thread counts that fit the CPUs (ranks x threads <= CPUs; 1 always), alternated within each
# round so a slow phase of the machine hits every setting alike; dlpg-bench's out-of-place
# and in-place times per size, one line per run, for a table of medians over rounds.
#   bench/shm_threads_ab.sh BIN_DIR [ROUNDS] [RANKS] [OPS] [MAXBYTES]
# e.g. bench/shm_threads_ab.sh .gpu/bin 3 "2 4 8 16" "allreduce" 256M
set -euo pipefail
bin=$1 rounds=${2:-3} ranks=${3:-"2 4 8 16"} ops=${4:-allreduce} max=${5:-256M}
cpus=$(nproc)
for round in $(seq "$rounds"); do
  for op in $ops; do
    for n in $ranks; do
      for t in 1 2 4 8; do
        [ "$t" = 1 ] || [ $((n * t)) -le "$cpus" ] || continue
        DLPG_SHM_THREADS=$t DLPG_CPU_BACKEND=shm timeout 120 "$bin/dlpg-bench" "$op" --nranks "$n" \
          -b 1M -e "$max" -f 4 -n 5 -w 2 -c 0 2>&1 |
          awk -v r="$round" -v op="$op" -v n="$n" -v t="$t" \
            '/^ +[0-9]/ {print "ab", r, op, n, t, $1, $6, $10}'
      done
    done
  done
done
