#!/usr/bin/env bash
# `cmake --install` into a scratch prefix, then build a consumer through find_package(dlpg)
# and through the installed pkg-config file; and one through the build tree's dlpg.pc.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$BUILD_DIR" --prefix "$prefix" >/dev/null
mkdir -p "$prefix/consumer"
cat > "$prefix/consumer/main.c" <<'C'
#include <dlpg/dlpg.h>
#include <stdio.h>
int main(void) {
  int v = 0;
  if (dlpg_get_version(&v) != DLPG_OK || v != DLPG_VERSION_CODE) return 1;
  printf("consumer sees dlpg %d\n", v);
  return 0;
}
C
cat > "$prefix/consumer/CMakeLists.txt" <<'C'
cmake_minimum_required(VERSION 3.18)
project(consumer C)
find_package(dlpg CONFIG REQUIRED)
add_executable(consumer main.c)
target_link_libraries(consumer PRIVATE dlpg::dlpg)
C
cmake -S "$prefix/consumer" -B "$prefix/consumer/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/consumer/build" >/dev/null
LD_LIBRARY_PATH="$prefix/lib" "$prefix/consumer/build/consumer"
libdir=$(ls -d "$prefix"/lib*/pkgconfig | head -1)
cc "$prefix/consumer/main.c" -o "$prefix/consumer/pc" \
  $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs dlpg)
LD_LIBRARY_PATH="$(dirname "$libdir")" "$prefix/consumer/pc"
# The build tree's own dlpg.pc: headers from the source tree, the library from the build.
cc "$prefix/consumer/main.c" -o "$prefix/consumer/pc-build" \
  $(PKG_CONFIG_PATH="$BUILD_DIR" pkg-config --cflags --libs dlpg)
"$prefix/consumer/pc-build"
echo "ci/check-install.sh: find_package(dlpg), pkg-config and build-tree pkg-config consumers OK"
