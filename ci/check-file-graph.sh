#!/usr/bin/env bash
# No circles between the files of plugin/, nor between its folders (docs/architecture.md,
# "File graph"), and core's rooms in their declared order (ci/core-rooms.txt): reads who
# defines and who uses each symbol in the built objects of libdlpg.so and of the NCCL module
# (nm), adds the #include edges between plugin files, prints the file graph and the folder
# graphs and fails on a circle or a room that uses one above it, printing it.
# Needs the build. Usage: ci/check-file-graph.sh [--report] [--quiet | --summary] [--layers] [--sizes]
#   --report   print the circles but exit 0 (while a circle's cut is still on another branch)
#   --quiet    print only the circles, the rooms' verdict and the verdict
#   --summary  leave out the file graph (the folder graphs, circles and verdicts)
#   --layers   each folder's (and each room's) sources bottom up
#   --sizes    files and lines of each folder and room
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
units=(--unit "libdlpg.so=$build/CMakeFiles/dlpg_obj.dir")
# The module is its own link unit; built only where CUDA and NCCL are found.
[ -d "$build/CMakeFiles/dlpg_nccl.dir" ] && units+=(--unit "libdlpg_nccl.so=$build/CMakeFiles/dlpg_nccl.dir")
exec /usr/bin/python3 ci/file_graph.py --root . "${units[@]}" --rooms core=ci/core-rooms.txt "$@"
