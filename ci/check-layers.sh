#!/usr/bin/env bash
# The layering of plugin/ (docs/architecture.md): prints the include graph between its
# folders and fails when core includes or names a backend, or when folders include each
# other in a cycle. Usage: ci/check-layers.sh [--quiet]
set -euo pipefail
cd "$(dirname "$0")/.."
backends="gloo nccl"   # folders holding a backend (besides the registry, which lists them)

# Edges "from -> to" with the files that make them.
edges=$(for f in plugin/*/*.[ch] plugin/*/*.cc; do
  from=$(basename "$(dirname "$f")")
  grep -oE '^#include "[a-z_]+/' "$f" | sed -E 's/#include "([a-z_]+)\//\1/' | while read -r to; do
    [ "$to" = "$from" ] || [ "$to" = dlpg ] || echo "$from $to"
  done
done | sort | uniq -c | awk '{print $2, $3, $1}')
if [ "${1:-}" != --quiet ]; then
  echo "ci/check-layers.sh: include graph of plugin/ (folder -> folder: #includes)"
  echo "$edges" | awk '{printf "  %-9s -> %-9s %3d\n", $1, $2, $3}'
fi

bad=0
for b in $backends registry; do
  if echo "$edges" | grep -q "^core $b "; then
    echo "ci/check-layers.sh: core includes $b/ (core must reach backends only through core/backend.h)" >&2
    grep -ln "#include \"$b/" plugin/core/* >&2
    bad=1
  fi
done
if grep -rnE 'dlpg__(nccl|gloo)_' plugin/core; then
  echo "ci/check-layers.sh: core names a backend function (above)" >&2
  bad=1
fi
# Cycles through a backend: a backend folder (or the registry) and another folder that reach
# each other. (core <-> store is one layer, the ground floor: groups hold a store.)
reach() {  # every folder reachable from $1
  local todo="$1" seen=" $1 " n next
  while [ -n "$todo" ]; do
    next=""
    for n in $todo; do
      for t in $(echo "$edges" | awk -v f="$n" '$1 == f {print $2}'); do
        case "$seen" in *" $t "*) ;; *) seen="$seen$t "; next="$next $t" ;; esac
      done
    done
    todo=$next
  done
  echo "$seen"
}
folders=$(echo "$edges" | awk '{print $1; print $2}' | sort -u)
for b in $backends registry; do
  from_b=$(reach "$b")
  for x in $folders; do
    [ "$x" = "$b" ] && continue
    case "$from_b" in *" $x "*) ;; *) continue ;; esac
    case "$(reach "$x")" in *" $b "*)
      echo "ci/check-layers.sh: include cycle between $b/ and $x/" >&2
      bad=1 ;;
    esac
  done
done
[ $bad -eq 0 ] && echo "ci/check-layers.sh: core names no backend; no include cycle through a backend: OK"
exit $bad
