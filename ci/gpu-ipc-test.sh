#!/usr/bin/env bash
# The CUDA IPC path (ranks sharing one GPU) on the GPU machine, in a few minutes: run from the
# repository root with the bundle of ci/gpu-bundle.sh carried in .gpu/ (run tool: carry
# [".gpu"], command "bash ci/gpu-ipc-test.sh"). Needs one GPU. Runs .gpu/bin/test_cuda_ipc
# (every op at 2, 3 and 4 ranks on cuda:0 against host references, small staging, a dead
# peer, abort, 200 create/destroy cycles), then a short dlpg-bench of allreduce, allgather
# and sendrecv with 2 and 4 ranks on GPU 0 (--shared-gpu), and prints a summary last. Logs
# and bench tables go to LOGDIR (argument; default $OUT, else ./gpu-logs). Exits non-zero on
# any failure. GPU_IPC_FILTER is passed to test_cuda_ipc as --gtest_filter.
set -u
cd "$(dirname "$0")/.."
repo="$PWD"
logdir="${1:-${OUT:-$repo/gpu-logs}}"
mkdir -p "$logdir"
logdir="$(cd "$logdir" && pwd)"
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH="$repo/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DLPG_PLUGIN="$repo/.gpu/lib/libdlpg.so" DLPG_LIBRARY="$repo/.gpu/lib/libdlpg.so"
if ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2 '; then
  nccldir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
  [ -n "$nccldir" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$nccldir"
fi
status=0
summary=()
{ nvidia-smi -L; nvidia-smi --query-gpu=compute_mode --format=csv,noheader; } 2>&1 | tee "$logdir/ipc-machine.txt"

# Tests: their own limit, so the bench still runs after a hang.
bin=.gpu/bin/test_cuda_ipc
if [ -x "$bin" ]; then
  args=()
  [ -n "${GPU_IPC_FILTER:-}" ] && args+=("--gtest_filter=$GPU_IPC_FILTER")
  t0=$SECONDS
  timeout -k 5 "${GPU_IPC_TEST_LIMIT:-300}" "$bin" "${args[@]}" >"$logdir/test_cuda_ipc.log" 2>&1
  rc=$?
  grep -E "^\[ +(OK|FAILED|SKIPPED) +\].* \([0-9]+ ms\)" "$logdir/test_cuda_ipc.log"
  # Each test's own line ends with its time; googletest repeats the failed and skipped ones
  # without it at the end.
  passed=$(grep -cE "^\[ +OK +\] CudaIpc.* \([0-9]+ ms\)" "$logdir/test_cuda_ipc.log")
  failed=$(grep -cE "^\[ +FAILED +\] CudaIpc.* \([0-9]+ ms\)" "$logdir/test_cuda_ipc.log")
  skipped=$(grep -cE "^\[ +SKIPPED +\] CudaIpc.* \([0-9]+ ms\)" "$logdir/test_cuda_ipc.log")
  if [ "$rc" -ne 0 ]; then
    status=1
    [ "$failed" = 0 ] && failed=1
    echo "gpu-ipc-test: test_cuda_ipc exited $rc; its log's last lines:"
    grep -vE "^\[|INFO" "$logdir/test_cuda_ipc.log" | tail -40
  fi
  summary+=("test_cuda_ipc: $passed passed, $failed failed, $skipped skipped in $((SECONDS - t0)) s")
else
  status=1
  summary+=("test_cuda_ipc: missing ($bin; run ci/gpu-bundle.sh)")
fi

# A short benchmark: checked results (-c 1), sizes 8 B .. 64 MB by 8x.
bench=.gpu/bin/dlpg-bench
if [ -x "$bench" ]; then
  for n in 2 4; do
    for op in allreduce all_gather sendrecv; do
      [ "$op" = sendrecv ] && [ "$n" != 2 ] && continue
      out="$logdir/ipc-bench-$op-$n.txt"
      echo "== dlpg-bench $op --device cuda --shared-gpu --nranks $n"
      # INFO: the lines saying which path the group took and why (in $out.err).
      if DLPG_DEBUG=INFO timeout -k 5 120 "$bench" "$op" --device cuda --shared-gpu --nranks "$n" -b 8 -e 64M -f 8 \
           -n 20 -w 5 --reps 3 -c 1 -T 30 >"$out" 2>"$out.err"; then
        grep -vE "INFO" "$out"
        grep -m1 -hE "run on (CUDA IPC|NCCL)" "$out.err"
        summary+=("dlpg-bench $op ${n} ranks on GPU 0: ok ($out)")
      else
        status=1
        tail -n 20 "$out" "$out.err"
        summary+=("dlpg-bench $op ${n} ranks on GPU 0: FAILED ($out.err)")
      fi
    done
  done
else
  summary+=("dlpg-bench: missing (not built; bench skipped)")
fi

echo "== gpu-ipc-test summary"
for l in "${summary[@]}"; do echo "  $l"; done
exit $status
