#!/usr/bin/env bash
# GPU benchmarks of dlpg against NCCL called directly, on the GPU test machine.
# Called by ci/gpu-test.sh:  bench/run-gpu-bench.sh LOGDIR [DLPG_BENCH]
#
# For allreduce, allgather, reduce_scatter, broadcast and sendrecv: dlpg-bench OP --device cuda --nranks 2
# (two processes, one GPU each; world size 1 without sendrecv on a one-GPU machine) with --baseline nccl, float32, 8 B .. 1 GiB (factor 2, so
# every power of two from 32 MiB up is there), writing <op>.json and <op>.txt to LOGDIR.
# Then, when python3 is there, the target table (gpu_table.py) and the bus-bandwidth plot
# (plot_busbw.py, if matplotlib is importable). The whole run stays under about 4 minutes:
# each op has a hard limit, and the script stops starting ops once its budget is spent.
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
logdir="${1:?usage: run-gpu-bench.sh LOGDIR [DLPG_BENCH]}"
bench="${2:-${DLPG_BENCH:-$repo/.gpu/bin/dlpg-bench}}"
mkdir -p "$logdir"

# NVLink multicast can take the shared GPUs out of service: keep it off everywhere.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# The shipped plugin and its Debian libraries sit beside the binary.
# The first of these that exists (a bench binary from another bundle uses its own lib/).
for d in "$(dirname "$bench")/../lib" "$repo/.gpu/lib"; do
  if [ -d "$d" ]; then
    export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    break
  fi
done

if [ ! -x "$bench" ]; then
  echo "run-gpu-bench: $bench is not an executable" >&2
  exit 1
fi

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
echo "run-gpu-bench: $bench, $ngpu GPU(s), logs in $logdir"
nvidia-smi -L > "$logdir/gpus.txt" 2>&1 || true
# Two processes with one GPU each where there are two GPUs; on one GPU, world size 1 (NCCL's
# own single-rank paths against dlpg's, which still measures dlpg's host overhead per call);
# sendrecv needs a peer and is skipped there.
nranks=2
ops="allreduce allgather reduce_scatter broadcast sendrecv"
if [ "${ngpu:-0}" -lt 1 ]; then
  echo "run-gpu-bench: SKIP: no GPU" | tee "$logdir/SKIPPED"
  exit 0
elif [ "${ngpu:-0}" -lt 2 ]; then
  nranks=1
  ops="allreduce allgather reduce_scatter broadcast"
  echo "run-gpu-bench: one GPU: world size 1; sendrecv skipped (needs 2 GPUs)" | tee "$logdir/SKIPPED"
fi

budget_s=${DLPG_BENCH_BUDGET_S:-230}
per_op_s=${DLPG_BENCH_OP_LIMIT_S:-75}
start=$(date +%s)
status=0
for op in $ops; do
  used=$(( $(date +%s) - start ))
  left=$(( budget_s - used ))
  if [ "$left" -lt 20 ]; then
    echo "run-gpu-bench: budget spent after ${used}s; skipping $op" | tee -a "$logdir/SKIPPED"
    continue
  fi
  limit=$(( left < per_op_s ? left : per_op_s ))
  echo "== $op (limit ${limit}s)"
  # Out of place only (the JSON's "dlpg"/"baseline" rows that gpu_table.py reads), as before.
  timeout -k 5 "$limit" "$bench" "$op" --device cuda --nranks "$nranks" -d float -o sum \
    -b 8 -e 1G -f 2 -w 5 -n 20 --reps 5 -c 1 -T 60 --baseline nccl --outofplace \
    -J "$logdir/$op.json" > "$logdir/$op.txt" 2>&1
  rc=$?
  cat "$logdir/$op.txt"
  if [ "$rc" -ne 0 ]; then
    echo "run-gpu-bench: $op exited with $rc" | tee -a "$logdir/FAILED"
    status=1
  fi
done
echo "run-gpu-bench: sweeps took $(( $(date +%s) - start ))s"

py=$(command -v python3 || true)
if [ -n "$py" ] && ls "$logdir"/*.json > /dev/null 2>&1; then
  "$py" "$here/gpu_table.py" -o "$logdir/gpu-table.md" "$logdir"/*.json || true
  if "$py" -c 'import matplotlib' > /dev/null 2>&1; then
    "$py" "$here/plot_busbw.py" -o "$logdir/busbw.png" "$logdir"/*.json || true
  else
    echo "run-gpu-bench: matplotlib not importable; no plot"
  fi
fi
exit $status
