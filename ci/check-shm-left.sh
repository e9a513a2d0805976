#!/usr/bin/env bash
# Nothing of dlpg's shared-memory backend outlives the processes that made it: after a test
# run, no /dev/shm entry of dlpg's naming (its segments are anonymous memfds and must never
# have a name there), no abstract Unix socket of its rendezvous (@dlpg-shm-...) still bound,
# and no live process mapping one of its segments (memfd:dlpg-shm), which would be a rank
# that a test left running. Run it when no other dlpg job runs on the machine (as in CI).
# $1: what ran before, for the message.
set -euo pipefail
what=${1:-the tests}
bad=0
for f in /dev/shm/*dlpg*; do
  [ -e "$f" ] || continue
  echo "ci/check-shm-left.sh: $f is left after $what" >&2
  bad=1
done
if socks=$(awk 'NR > 1 && $8 ~ /^@dlpg/ {print $8}' /proc/net/unix) && [ -n "$socks" ]; then
  echo "ci/check-shm-left.sh: abstract sockets still bound after $what:" $socks >&2
  bad=1
fi
for m in /proc/[0-9]*/maps; do
  pid=${m#/proc/}
  pid=${pid%/maps}
  [ "$pid" = "$$" ] && continue
  if grep -q 'memfd:dlpg' "$m" 2>/dev/null; then
    echo "ci/check-shm-left.sh: process $pid ($(tr '\0' ' ' < /proc/$pid/cmdline 2>/dev/null)) still maps a dlpg segment after $what" >&2
    bad=1
  fi
done
if [ "$bad" = 0 ]; then echo "ci/check-shm-left.sh: nothing of dlpg's shared memory left after $what"; fi
exit "$bad"
