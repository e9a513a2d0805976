#!/usr/bin/env bash
# docs/architecture.md's figures, made from the tree and the build so that they cannot go
# stale silently: the include graph between the folders of plugin/ (ci/check-layers.sh), the
# file graph's folder graphs and totals, the files and lines of each folder and of each room
# of core, and each folder's sources by layer (ci/check-file-graph.sh). One markdown block,
# sorted, without dates or paths of this machine.
#
# The file graph is CI's: libdlpg.so's objects and the NCCL module's, which ci/test.sh always
# builds. Without the module the graph would lose the module's files and its layers (which
# come from the symbols its objects use, so #includes alone would put every module source on
# layer 0) and the totals would differ from what CI prints; so where the build has no module
# this script says so and stops instead of writing other figures.
#
# Usage: ci/architecture-figures.sh [--write | --check]   (needs the build, ${BUILD_DIR:-build})
#   (none)   print the block
#   --write  put it between the markers in docs/architecture.md
#   --check  exit 1, printing the difference, when the docs' block is not what --write writes
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C
build=${BUILD_DIR:-build}
mode=${1:-}
case "$mode" in ""|--write|--check) ;; *) echo "usage: $0 [--write | --check]" >&2; exit 2 ;; esac
if [ ! -d "$build/CMakeFiles/dlpg_nccl.dir" ]; then
  echo "ci/architecture-figures.sh: the figures count the NCCL module's files as CI's build" \
       "does, and $build has no module: build with NCCL (source ci/nccl-root.sh .venv/bin/python;" \
       "bash ci/build.sh), as ci/test.sh does" >&2
  exit 2
fi

block=$(mktemp)
trap 'rm -f "$block"' EXIT
{
  echo '```'
  bash ci/check-layers.sh --table
  echo
  # --report: a circle fails CI in ci/check-file-graph.sh, not here.
  # A blank line before each heading, for the eye.
  BUILD_DIR=$build bash ci/check-file-graph.sh --report --summary --sizes --layers |
    awk 'NR > 1 && !/^ / && prev ~ /^ / {print ""} {print; prev = $0}'
  echo '```'
} > "$block"

if [ -z "$mode" ]; then
  cat "$block"
  exit 0
fi
exec /usr/bin/python3 - "$mode" docs/architecture.md "$block" <<'EOF'
import difflib, sys

mode, doc, block = sys.argv[1:]
BEGIN = "<!-- figures:begin (ci/architecture-figures.sh --write) -->\n"
END = "<!-- figures:end -->\n"
with open(doc, encoding="utf-8") as f:
    lines = f.readlines()
with open(block, encoding="utf-8") as f:
    new_block = f.readlines()
if lines.count(BEGIN) != 1 or lines.count(END) != 1 or lines.index(BEGIN) > lines.index(END):
    sys.exit("ci/architecture-figures.sh: %s needs one line %s and after it one line %s"
             % (doc, BEGIN.strip(), END.strip()))
b, e = lines.index(BEGIN), lines.index(END)
old_block = lines[b + 1:e]
if mode == "--check":
    if old_block == new_block:
        print("ci/architecture-figures.sh: the figures of %s are up to date: OK" % doc)
        sys.exit(0)
    sys.stdout.writelines(difflib.unified_diff(old_block, new_block, doc + " (figures)",
                                               "ci/architecture-figures.sh"))
    print("ci/architecture-figures.sh: the figures of %s are stale (above); run "
          "ci/architecture-figures.sh --write and commit" % doc)
    sys.exit(1)
if old_block == new_block:
    print("ci/architecture-figures.sh: %s unchanged" % doc)
else:
    with open(doc, "w", encoding="utf-8") as f:
        f.writelines(lines[:b + 1] + new_block + lines[e:])
    print("ci/architecture-figures.sh: wrote the figures of %s" % doc)
EOF
