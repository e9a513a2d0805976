#!/usr/bin/env bash
# `mpirun -np 4 dlpg-demo` is ONE job of 4 ranks: each process joins mpirun's job through
# dlpg_group_create_from_env (the store on 127.0.0.1, on a port derived from Open MPI's job
# id, served by rank 0) instead of forking ranks of its own. Usage: mpirun_demo.sh DEMO [NP]
set -euo pipefail
demo=$1
np=${2:-4}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# Root in CI: Open MPI refuses root unless told; --oversubscribe for machines with fewer cores.
if ! timeout 120 mpirun --allow-run-as-root --oversubscribe -np "$np" "$demo" >"$out" 2>&1; then
  cat "$out"; echo "mpirun_demo.sh: mpirun failed" >&2; exit 1
fi
cat "$out"
fail=0
n=$(grep -c "^rank 0 of $np (from the launcher's environment)" "$out" || true)
[ "$n" = 1 ] || { echo "mpirun_demo.sh: want one job of $np ranks, found $n rank-0 headers" >&2; fail=1; }
for r in $(seq 0 $((np - 1))); do
  n=$(grep -c "^rank $r: results checked: OK" "$out" || true)
  [ "$n" = 1 ] || { echo "mpirun_demo.sh: rank $r reported OK $n times (want 1)" >&2; fail=1; }
done
if grep -q "local ranks on the embedded TCP store" "$out"; then
  echo "mpirun_demo.sh: a process forked its own ranks instead of joining mpirun's job" >&2; fail=1
fi
[ "$fail" = 0 ] && echo "mpirun_demo.sh: one job of $np ranks under mpirun: OK"
exit "$fail"
