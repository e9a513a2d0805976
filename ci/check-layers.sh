#!/usr/bin/env bash
# The layering of plugin/ (docs/architecture.md): prints the include graph between its
# folders and fails when core includes a backend, when core or base names one (identifier,
# parameter, log subsystem, message), or when folders include each other in a cycle. A folder
# is plugin/'s first path component: a file of plugin/core/exec/ is core's.
# Usage: ci/check-layers.sh [--quiet | --table]  (--table: the include graph only, exit 0)
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C   # sort's order, the same on every machine (the table is in docs/architecture.md)
# The folders of plugin/ that hold no backend: the ground floor, core, the store, the registry
# (which lists the backends) and the XLA handlers (a client of the public API). Every other
# folder is a backend. Named this way round, a new folder is checked as a backend from its
# first commit; deriving the backends from registry/backends.c's includes would miss a module
# (its line names a file, libdlpg_nccl.so, not a header) and a folder not yet registered.
layers="base core registry store xla"
backends=$(find plugin -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort |
           grep -vxF -f <(tr ' ' '\n' <<<"$layers") | tr '\n' ' ')
[ -n "$backends" ] || { echo "ci/check-layers.sh: no backend folder under plugin/" >&2; exit 1; }
# Every C and C++ file of plugin/, in sub-folders too (core's rooms).
files=$(find plugin -mindepth 2 -type f \( -name '*.[ch]' -o -name '*.cc' \) | sort)

# Edges "from -> to" with the files that make them.
edges=$(for f in $files; do
  from=${f#plugin/}; from=${from%%/*}
  grep -oE '^#include "[a-z_]+/' "$f" | sed -E 's/#include "([a-z_]+)\//\1/' | while read -r to; do
    [ "$to" = "$from" ] || [ "$to" = dlpg ] || echo "$from $to"
  done
done | sort | uniq -c | awk '{print $2, $3, $1}')
if [ "${1:-}" != --quiet ]; then
  echo "ci/check-layers.sh: include graph of plugin/ (folder -> folder: #includes)"
  echo "$edges" | awk '{printf "  %-9s -> %-9s %3d\n", $1, $2, $3}'
fi
[ "${1:-}" = --table ] && exit 0

bad=0
for b in $backends registry xla; do
  if echo "$edges" | grep -q "^core $b "; then
    echo "ci/check-layers.sh: core includes $b/ (core stands on base and store only; it must reach backends only through core/lines/backend.h)" >&2
    grep -rln "#include \"$b/" plugin/core >&2
    bad=1
  fi
done
# Core and the ground floor (plugin/base) speak of backends, never of one: no backend's
# identifier, parameter or log subsystem, no backend's name in a message. Allowed: the
# variable that locates a module (DLPG_NCCL_BACKEND: core must read it to find the module),
# the public status texts (base/status.h), comments, and DLPack device names ("cuda").
words=$(echo $backends | tr ' ' '|')   # backend names, as identifiers spell them
WORDS=$(echo "$words" | tr a-z A-Z)
# ... and as prose spells them: gloo, Gloo, GLOO.
Words=$(for b in $backends; do echo "$b|${b^}|${b^^}"; done | paste -sd'|')
ground="plugin/core plugin/base"
if grep -rnE "dlpg__($words)_" $ground; then
  echo "ci/check-layers.sh: core or base names a backend's identifier (above)" >&2
  bad=1
fi
if grep -rnoE "DLPG(__PARAM)?_($WORDS)_[A-Z0-9_]+" $ground |
   grep -vE ':DLPG(__PARAM)?_NCCL_BACKEND$'; then
  echo "ci/check-layers.sh: core or base declares or reads a backend's parameter (above; a" \
       "backend declares its own and registers it, base/params.h)" >&2
  bad=1
fi
if grep -rnE "DLPG__SUB_($WORDS)\b|\"($WORDS)\"|DLPG_(WARN|INFO|TRACE)\(($WORDS)\b|DLPG_LOG\([A-Z]+, *($WORDS)\b" $ground; then
  echo "ci/check-layers.sh: core or base holds a backend's log subsystem (above; a backend" \
       "registers its own, dlpg__log_subsys_register)" >&2
  bad=1
fi
# Message strings, comments stripped by the preprocessor (no include is expanded).
msgs=$(mktemp)
for f in $(find plugin/core plugin/base -type f -name '*.[ch]' | sort | grep -v '^plugin/base/status\.h$'); do
  gcc -fpreprocessed -dD -E -P -x c "$f" 2>/dev/null |
    grep -nE '"([^"\\]|\\.)*\<('"$Words"')\>([^"\\]|\\.)*"' |
    grep -v 'DLPG_NCCL_BACKEND' | sed "s|^|$f: (comments stripped) |"
done > "$msgs" || true
if [ -s "$msgs" ]; then
  cat "$msgs" >&2
  echo "ci/check-layers.sh: a message in core or base names a backend (above; take the name" \
       "from the backend's table, vtbl->name)" >&2
  bad=1
fi
rm -f "$msgs"
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
[ $bad -eq 0 ] && echo "ci/check-layers.sh: core and base name no backend (identifier, parameter, log subsystem, message); no include cycle through a backend: OK"
exit $bad
