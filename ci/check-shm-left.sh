#!/usr/bin/env bash
# Nothing of dlpg's shared-memory backend outlives the processes that made it: after a test
# run, no /dev/shm entry of dlpg's naming (its segments are anonymous memfds and must never
# have a name there), no abstract Unix socket of its rendezvous (@dlpg-shm-...) still bound,
# and no live process mapping one of its segments (memfd:dlpg-shm), which would be a rank
# that a test left running. Where DLPG_CI_RUN is set (ci/test.sh sets it), only processes
# carrying that value in their environment count, so that another test run on the same
# machine (two clones tested at once) is not taken for this one's leftovers.
# $1: what ran before, for the message.
set -euo pipefail
what=${1:-the tests}
mark=${DLPG_CI_RUN:-}
bad=0
ours() {  # ours PID: true when PID belongs to this run (or no run is marked)
  [ -z "$mark" ] && return 0
  tr '\0' '\n' < "/proc/$1/environ" 2>/dev/null | grep -qxF "DLPG_CI_RUN=$mark"
}
owners() {  # owners INODE: the pids holding socket INODE open
  local fd
  for fd in /proc/[0-9]*/fd/*; do
    [ "$(readlink "$fd" 2>/dev/null)" = "socket:[$1]" ] && { fd=${fd#/proc/}; echo "${fd%%/*}"; }
  done | sort -u
}
for f in /dev/shm/*dlpg*; do
  [ -e "$f" ] || continue
  echo "ci/check-shm-left.sh: $f is left after $what" >&2
  bad=1
done
while read -r inode name; do
  for pid in $(owners "$inode"); do
    [ "$pid" = "$$" ] && continue
    if ours "$pid"; then
      echo "ci/check-shm-left.sh: abstract socket $name still bound by process $pid ($(tr '\0' ' ' < /proc/$pid/cmdline 2>/dev/null)) after $what" >&2
      bad=1
    fi
  done
done < <(awk 'NR > 1 && $8 ~ /^@dlpg/ {print $7, $8}' /proc/net/unix)
for m in /proc/[0-9]*/maps; do
  pid=${m#/proc/}
  pid=${pid%/maps}
  [ "$pid" = "$$" ] && continue
  if grep -q 'memfd:dlpg' "$m" 2>/dev/null && ours "$pid"; then
    echo "ci/check-shm-left.sh: process $pid ($(tr '\0' ' ' < /proc/$pid/cmdline 2>/dev/null)) still maps a dlpg segment after $what" >&2
    bad=1
  fi
done
if [ "$bad" = 0 ]; then echo "ci/check-shm-left.sh: nothing of dlpg's shared memory left after $what"; fi
exit "$bad"
