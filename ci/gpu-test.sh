#!/usr/bin/env bash
# The whole GPU suite, run ON the GPU test machine from the repository root with the bundle
# of ci/gpu-bundle.sh carried in .gpu/ (run tool: carry [".gpu"], command
# "bash ci/gpu-test.sh"). Writes its logs to LOGDIR (argument; default $OUT, else
# ./gpu-logs), prints a summary table (suite, passed, failed, skipped) last and exits
# non-zero on any failure.
#
# Suites, in order (GPU_TEST_SUITES selects, default "cuda ipc cpu jax python torch bench jaxbench
# wheel"). On an H100 host (2026-12-07) "cuda ipc cpu jax" took 267 s, "bench jaxbench" 92 s,
# "wheel" 42 s, and tests/python as one suite more than 470 s (427 of its 472 tests): more than
# one call of the device tool may last (10 minutes), so run it over several calls on one warm
# machine, the Python tests as their three suites (jax, python, torch) in separate calls.
#   cuda    .gpu/bin/test_cuda (the NCCL path's conformance tests)
#   ipc     .gpu/bin/test_cuda_ipc (ranks sharing GPU 0: the CUDA IPC path; one GPU is enough)
#   cpu     the CPU conformance binaries (test_collectives, test_p2p, test_errors, ...)
#   jax     builds .gpu/lib/libdlpg_xla.so against this machine's jaxlib (plugin/xla/build.sh),
#           then tests/python/test_jax*.py and test_cross_framework*.py
#   python  tests/python with the machine's python3 (PYTHONPATH=python_shim, then the
#           caller's PYTHONPATH: packages carried as wheels, Ray for one), but for the files
#           of the jax and torch suites
#   torch   tests/python/test_torch_*.py (the torch backend), as the python suite runs its files
#   bench   bench/run-gpu-bench.sh when .gpu/bin/dlpg-bench exists
#   jaxbench  bench/jax_allreduce.py (dlpg.jax.allreduce against JAX's psum) -> jax-bench.md
#   wheel   ci/gpu-wheel.sh: the wheel in .gpu/wheel (ci/wheel.sh's, built by ci/gpu-bundle.sh)
#           installed in a fresh venv, a CUDA allreduce through torch "dlpg" and a jitted JAX
#           allreduce with no DLPG_* variable
# GPU_TEST_FILTER is passed to test_cuda as --gtest_filter, GPU_IPC_FILTER to test_cuda_ipc.
set -u
cd "$(dirname "$0")/.."
repo="$PWD"
logdir="${1:-${OUT:-$repo/gpu-logs}}"
mkdir -p "$logdir"
logdir="$(cd "$logdir" && pwd)"
suites="${GPU_TEST_SUITES:-cuda ipc cpu jax python torch bench jaxbench wheel}"

# NVLink multicast can take the shared GPUs out of service: off here and in every process
# started from here (exported, so children inherit it).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$repo/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DLPG_PLUGIN="$repo/.gpu/lib/libdlpg.so"
export DLPG_LIBRARY="$repo/.gpu/lib/libdlpg.so"
# 200 create/use/destroy cycles take about 110 s on an H200 (NCCL init each time); the full
# 200 is test_cuda's default, and this suite runs 50 unless told otherwise.
export DLPG_TEST_CYCLES="${DLPG_TEST_CYCLES:-50}"
# libnccl.so.2 comes from the machine: the system copy, else Python's nvidia-nccl package.
if ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2 '; then
  nccldir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
  [ -n "$nccldir" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$nccldir"
fi

rows=()
status=0
add_row() { rows+=("$1|$2|$3|$4"); [ "$3" != "0" ] && status=1; return 0; }

echo "== gpu-test: logs in $logdir"
{ nvidia-smi -L; uname -r; } 2>&1 | tee "$logdir/machine.txt"
if [ ! -f .gpu/lib/libdlpg.so ]; then
  echo "gpu-test: .gpu/lib/libdlpg.so is missing; run ci/gpu-bundle.sh and carry .gpu" >&2
  add_row bundle 0 1 0
fi
# libdlpg.so links no CUDA/NCCL; the NCCL backend is .gpu/lib/libdlpg_nccl.so, which core
# loads with dlopen beside itself at the first CUDA tensor. dlpg-info loads it and says so.
if [ ! -f .gpu/lib/libdlpg_nccl.so ]; then
  echo "gpu-test: .gpu/lib/libdlpg_nccl.so is missing; run ci/gpu-bundle.sh and carry .gpu" >&2
  add_row bundle 0 1 0
fi
{ echo "ldd libdlpg.so:"; ldd .gpu/lib/libdlpg.so 2>&1 | grep -E "not found|nccl|cudart" || echo "  (no CUDA/NCCL library)"
  echo "ldd libdlpg_nccl.so:"; ldd .gpu/lib/libdlpg_nccl.so 2>&1 | grep -E "not found|nccl|cudart"; } | tee -a "$logdir/machine.txt"
if [ -x .gpu/bin/dlpg-info ]; then
  DLPG_NCCL_BACKEND="$repo/.gpu/lib/libdlpg_nccl.so" .gpu/bin/dlpg-info 2>&1 | sed -n '2,6p' | tee -a "$logdir/machine.txt"
fi
if ldd .gpu/lib/libdlpg.so 2>&1 | grep -qE "libcudart|libnccl"; then
  echo "gpu-test: libdlpg.so links CUDA or NCCL" >&2
  add_row bundle 0 1 0
fi

# run_gtest SUITE BINARY TIMEOUT [ARGS...]: one googletest binary, counts from its summary.
run_gtest() {
  local suite="$1" bin="$2" limit="$3"; shift 3
  local log="$logdir/$suite.log"
  if [ ! -x "$bin" ]; then echo "gpu-test: $bin missing"; add_row "$suite" 0 1 0; return; fi
  echo "== $suite: $bin $* (limit ${limit}s)"
  local t0=$SECONDS
  timeout -k 10 "$limit" "$bin" --gtest_color=no "$@" >"$log" 2>&1
  local rc=$?
  local passed failed skipped
  passed=$(grep -oE '^\[  PASSED  \] [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$' || true)
  failed=$(grep -oE '^\[  FAILED  \] [0-9]+ test' "$log" | tail -1 | grep -oE '[0-9]+' || true)
  skipped=$(grep -oE '^\[  SKIPPED \] [0-9]+ test' "$log" | tail -1 | grep -oE '[0-9]+' || true)
  passed=${passed:-0} failed=${failed:-0} skipped=${skipped:-0}
  if [ $rc -ne 0 ] && [ "$failed" = "0" ]; then failed=1; echo "gpu-test: $suite exited $rc (timeout or crash)"; fi
  grep -E '^\[ +(OK|FAILED|SKIPPED) +\] .*\([0-9]+ ms\)' "$log" | sed 's/^/  /'
  grep -E 'FAILURE:|Failure$|^  +(Expected|Which is|Value of)' "$log" | head -40 | sed 's/^/  ! /'
  tail -3 "$log" | sed 's/^/  | /'
  echo "== $suite: rc=$rc in $((SECONDS - t0)) s"
  add_row "$suite" "$passed" "$failed" "$skipped"
}

# run_pytest SUITE LIMIT ARGS...: python3 -m pytest ARGS, counts from its last summary line.
run_pytest() {
  local suite="$1" limit="$2"; shift 2
  local log="$logdir/$suite.log"
  echo "== $suite: pytest $* with $(python3 --version 2>&1)"
  PYTHONPATH="$repo/python_shim${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 timeout -k 10 "$limit" \
    python3 -m pytest -q -rs -p no:cacheprovider "$@" >"$log" 2>&1
  local rc=$? last p f k
  last=$(grep -E '[0-9]+ (passed|failed|skipped|error)' "$log" | tail -1)
  p=$(echo "$last" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || true)
  f=$(echo "$last" | grep -oE '[0-9]+ (failed|errors?)' | awk '{s+=$1} END {print s+0}')
  k=$(echo "$last" | grep -oE '[0-9]+ skipped' | grep -oE '[0-9]+' || true)
  p=${p:-0} f=${f:-0} k=${k:-0}
  [ $rc -ne 0 ] && [ "$f" = "0" ] && f=1
  tail -15 "$log" | sed 's/^/  | /'
  add_row "$suite" "$p" "$f" "$k"
}

# The C++ torch backend, built against this machine's torch (about a minute) before the
# suites that use torch.distributed on "dlpg" (python, torch; jax's cross-framework tests).
case " $suites " in *" python "*|*" torch "*|*" jax "*)
  echo "== torch_ext: python3 -m dlpg.build_torch_ext"
  if MAX_JOBS=8 PYTHONPATH="$repo/python_shim" timeout -k 10 300 \
      python3 -m dlpg.build_torch_ext >"$logdir/torch-ext.log" 2>&1; then
    add_row torch_ext 1 0 0
  else
    add_row torch_ext 0 1 0
    tail -30 "$logdir/torch-ext.log" | sed 's/^/  ! /'
  fi ;;
esac

for s in $suites; do
  case "$s" in
    cuda)
      args=()
      [ -n "${GPU_TEST_FILTER:-}" ] && args+=("--gtest_filter=$GPU_TEST_FILTER")
      run_gtest test_cuda .gpu/bin/test_cuda "${GPU_TEST_CUDA_LIMIT:-420}" "${args[@]}"
      ;;
    ipc)
      args=()
      [ -n "${GPU_IPC_FILTER:-}" ] && args+=("--gtest_filter=$GPU_IPC_FILTER")
      run_gtest test_cuda_ipc .gpu/bin/test_cuda_ipc "${GPU_TEST_IPC_LIMIT:-420}" "${args[@]}"
      ;;
    cpu)
      for b in test_collectives test_p2p test_errors test_group; do
        [ -x ".gpu/bin/$b" ] && run_gtest "$b" ".gpu/bin/$b" "${GPU_TEST_CPU_LIMIT:-240}"
      done
      if [ -x .gpu/bin/test_abi_c ]; then
        if .gpu/bin/test_abi_c >"$logdir/test_abi_c.log" 2>&1; then add_row test_abi_c 1 0 0; else add_row test_abi_c 0 1 0; fi
      fi
      ;;
    jax)
      echo "== jax: plugin/xla/build.sh (jaxlib's FFI headers)"
      if bash plugin/xla/build.sh .gpu/lib python3 >"$logdir/jax-build.log" 2>&1; then
        tail -1 "$logdir/jax-build.log"
        run_pytest jax "${GPU_TEST_JAX_LIMIT:-420}" tests/python/test_jax*.py tests/python/test_cross_framework*.py
      else
        sed 's/^/  | /' "$logdir/jax-build.log"
        add_row jax 0 1 0
      fi
      ;;
    python)
      if [ -d tests/python ] && ls tests/python/test_*.py >/dev/null 2>&1; then
        ignore=()
        [ -z "${GPU_TEST_PY_ARGS:-}" ] &&
          for f in tests/python/test_jax*.py tests/python/test_cross_framework*.py tests/python/test_torch_*.py; do
            ignore+=("--ignore=$f")
          done
        # GPU_TEST_PY_ARGS: pytest arguments instead of the folder's files (a few files, -k).
        # shellcheck disable=SC2086
        run_pytest python "${GPU_TEST_PY_LIMIT:-420}" ${GPU_TEST_PY_ARGS:-tests/python} "${ignore[@]}"
      else
        echo "== python: no tests/python; skipped"
      fi
      ;;
    torch)
      run_pytest torch "${GPU_TEST_TORCH_LIMIT:-480}" tests/python/test_torch_*.py
      ;;
    bench)
      if [ -x .gpu/bin/dlpg-bench ] && [ -f bench/run-gpu-bench.sh ]; then
        echo "== bench: bench/run-gpu-bench.sh"
        if timeout -k 10 "${GPU_TEST_BENCH_LIMIT:-300}" bash bench/run-gpu-bench.sh "$logdir/bench" \
            "$repo/.gpu/bin/dlpg-bench" >"$logdir/bench.log" 2>&1; then
          add_row bench 1 0 0
        else
          add_row bench 0 1 0
        fi
        tail -30 "$logdir/bench.log" | sed 's/^/  | /'
      else
        echo "== bench: no .gpu/bin/dlpg-bench or bench/run-gpu-bench.sh; skipped"
      fi
      ;;
    jaxbench)
      echo "== jaxbench: bench/jax_allreduce.py"
      if PYTHONPATH="$repo/python_shim" timeout -k 10 "${GPU_TEST_JAXBENCH_LIMIT:-300}" \
          python3 bench/jax_allreduce.py --out "$logdir/jax-bench.md" \
          ${GPU_TEST_JAXBENCH_CONFIGS:+--configs "$GPU_TEST_JAXBENCH_CONFIGS"} >"$logdir/jaxbench.log" 2>&1; then
        add_row jaxbench 1 0 0
      else
        add_row jaxbench 0 1 0
      fi
      tail -30 "$logdir/jaxbench.log" | sed 's/^/  | /'
      ;;
    wheel)
      echo "== wheel: ci/gpu-wheel.sh"
      if timeout -k 10 "${GPU_TEST_WHEEL_LIMIT:-420}" bash ci/gpu-wheel.sh "$logdir" python3 \
          >"$logdir/wheel.log" 2>&1; then
        add_row wheel 1 0 0
      else
        add_row wheel 0 1 0
      fi
      tail -40 "$logdir/wheel.log" | sed 's/^/  | /'
      ;;
    *) echo "gpu-test: unknown suite '$s'"; add_row "$s" 0 1 0 ;;
  esac
done

# The run tool returns at most 8 files two folders deep: keep everything in one archive and
# the main logs beside it.
tar czf /tmp/gpu-logs.$$.tar.gz -C "$logdir" . 2>/dev/null && mv /tmp/gpu-logs.$$.tar.gz "$logdir/gpu-logs.tar.gz"
if [ "$(find "$logdir" -type f | wc -l)" -gt 8 ]; then
  find "$logdir" -mindepth 1 -maxdepth 1 ! -name gpu-logs.tar.gz ! -name test_cuda.log ! -name summary.txt \
    ! -name python.log ! -name machine.txt ! -name jax.log ! -name jax-bench.md ! -name wheel.log -exec rm -rf {} +
fi

{
  printf '%-18s %8s %8s %8s\n' suite passed failed skipped
  for r in "${rows[@]}"; do
    IFS='|' read -r n p f k <<<"$r"
    printf '%-18s %8s %8s %8s\n' "$n" "$p" "$f" "$k"
  done
  [ $status -eq 0 ] && echo "gpu-test: OK" || echo "gpu-test: FAILED"
} | tee "$logdir/summary.txt"
exit $status
