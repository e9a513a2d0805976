#!/usr/bin/env bash
# Run a command and, if it is still running after AFTER seconds, print the host stacks of it
# and of every process it started (cuda-gdb attaches; the GPU machine has no gdb), then let
# it go on until it ends or LIMIT seconds pass. For hangs that only happen on the GPU
# machine, where nobody can attach by hand:
#   ci/gpu-stacks.sh AFTER LIMIT COMMAND [ARGS...]     (stacks go to stdout)
set -u
after="${1:?usage: gpu-stacks.sh AFTER LIMIT COMMAND...}"
limit="${2:?usage: gpu-stacks.sh AFTER LIMIT COMMAND...}"
shift 2

"$@" &
pid=$!
for ((i = 0; i < after * 10; i++)); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done

descendants() {
  local p="$1"
  echo "$p"
  for c in $(pgrep -P "$p"); do descendants "$c"; done
}

if kill -0 "$pid" 2>/dev/null; then
  dbg=$(command -v cuda-gdb || command -v gdb || true)
  echo "== gpu-stacks: still running after ${after}s; stacks of $pid and its children (${dbg:-no debugger})"
  for p in $(descendants "$pid"); do
    echo "---- pid $p: $(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null | cut -c1-200)"
    [ -n "$dbg" ] && timeout 60 "$dbg" -p "$p" -batch -nx -ex "set pagination off" \
      -ex "thread apply all bt 30" 2>&1 | grep -E '^(Thread|#)' | head -200
  done
fi

left=$((limit - after))
for ((i = 0; i < left * 10; i++)); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$pid" 2>/dev/null; then
  echo "== gpu-stacks: killing $pid after ${limit}s"
  for p in $(descendants "$pid"); do kill -9 "$p" 2>/dev/null; done
fi
wait "$pid"
