#!/usr/bin/env bash
# Build libdlpg_xla.so without CMake (the GPU test machine has jaxlib but not the Debian
# packages the rest of dlpg's CMake configuration needs). Usage:
#   plugin/xla/build.sh OUT_DIR [PYTHON]
# The FFI header comes from DLPG_XLA_FFI_INCLUDE_DIR, else from PYTHON's jax.ffi.include_dir();
# dlpack/dlpack.h from DLPG_DLPACK_INCLUDE_DIR, .gpu/include, /usr/include, jaxlib's include
# folder or torch's ATen/dlpack.h (same header).
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:?usage: plugin/xla/build.sh OUT_DIR [PYTHON]}"
py="${2:-python3}"
inc="${DLPG_XLA_FFI_INCLUDE_DIR:-$("$py" -c 'import jax.ffi; print(jax.ffi.include_dir())')}"
[ -f "$inc/xla/ffi/api/c_api.h" ] || { echo "plugin/xla/build.sh: no $inc/xla/ffi/api/c_api.h" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dl=""
for d in "${DLPG_DLPACK_INCLUDE_DIR:-}" .gpu/include /usr/include "$inc"; do
  if [ -n "$d" ] && [ -f "$d/dlpack/dlpack.h" ]; then dl="$d"; break; fi
done
if [ -z "$dl" ]; then
  aten=$("$py" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "include", "ATen", "dlpack.h"))' 2>/dev/null || true)
  if [ -n "$aten" ] && [ -f "$aten" ]; then
    mkdir -p "$tmp/dlpack" && cp "$aten" "$tmp/dlpack/dlpack.h" && dl="$tmp"
  fi
fi
[ -n "$dl" ] || { echo "plugin/xla/build.sh: no dlpack/dlpack.h found" >&2; exit 1; }
# dlpg.h's version header, written as CMake's configure_file writes it, from the one place the
# version is written (project() in CMakeLists.txt).
read -r vmaj vmin vpat <<<"$(sed -n 's/^project(dlpg VERSION \([0-9]*\)\.\([0-9]*\)\.\([0-9]*\).*/\1 \2 \3/p' CMakeLists.txt)"
[ -n "${vpat:-}" ] || { echo "plugin/xla/build.sh: no project(dlpg VERSION x.y.z) in CMakeLists.txt" >&2; exit 1; }
mkdir -p "$tmp/version/dlpg"
sed -e "s/@PROJECT_VERSION_MAJOR@/$vmaj/" -e "s/@PROJECT_VERSION_MINOR@/$vmin/" \
  -e "s/@PROJECT_VERSION_PATCH@/$vpat/" cmake/dlpg_version.h.in >"$tmp/version/dlpg/dlpg_version.h"
cc="${CC:-cc}"
defs=""
printf '#include "xla/ffi/api/c_api.h"\nint main(void){XLA_FFI_DeviceOrdinal_Get_Args a; a.device_ordinal=0; return a.device_ordinal;}\n' >"$tmp/probe.c"
"$cc" -I"$inc" -c "$tmp/probe.c" -o "$tmp/probe.o" 2>/dev/null && defs="-DDLPG_XLA_HAVE_DEVICE_ORDINAL=1"
printf '#include "xla/ffi/api/c_api.h"\nint f(XLA_FFI_Metadata_Extension *m){return m->extension_base.type == XLA_FFI_Extension_Metadata;}\n' >"$tmp/probe2.c"
"$cc" -I"$inc" -c "$tmp/probe2.c" -o "$tmp/probe2.o" 2>/dev/null && defs="$defs -DDLPG_XLA_EXTENSION_HAS_TYPE=1"
mkdir -p "$out"
"$cc" -std=c11 -O2 -fPIC -shared -fvisibility=hidden -D_GNU_SOURCE $defs -Wall -Wextra \
  -Iinclude -I"$tmp/version" -I"$dl" -I"$inc" plugin/xla/*.c -o "$out/libdlpg_xla.so" \
  -ldl -lpthread -Wl,--no-undefined
echo "plugin/xla/build.sh: $out/libdlpg_xla.so (FFI headers $inc, dlpack $dl, ${defs:-no device ordinal})"
