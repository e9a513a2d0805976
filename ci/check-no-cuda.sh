#!/usr/bin/env bash
# libdlpg.so must not need CUDA or NCCL : (a) its NEEDED list and ldd name no
# libcudart/libnccl/libcuda; (b) with the NCCL module present but the CUDA and NCCL libraries
# hidden from the loader (a private mount namespace with an empty folder over each folder
# holding them), dlpg-info still runs and reports why the module did not load, and a CPU job
# runs while a CUDA tensor gets DLPG_ERR_UNSUPPORTED naming the module and the dlerror text.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
lib="$build/libdlpg.so"
mod="$build/libdlpg_nccl.so"

needed=$(readelf -d "$lib" | awk '/NEEDED/ {gsub(/[][]/, "", $5); print $5}')
if echo "$needed" | grep -qE 'libcudart|libnccl|libcuda'; then
  echo "ci/check-no-cuda.sh: $lib needs CUDA/NCCL: $(echo $needed)" >&2
  exit 1
fi
if ldd "$lib" | grep -qE 'libcudart|libnccl|libcuda'; then
  echo "ci/check-no-cuda.sh: ldd $lib shows CUDA/NCCL" >&2
  exit 1
fi
echo "ci/check-no-cuda.sh: $lib needs $(echo $needed | tr ' ' ','): no CUDA/NCCL"

if [ ! -f "$mod" ]; then
  echo "ci/check-no-cuda.sh: no $mod (NCCL path OFF): nothing to hide; done"
  exit 0
fi
# The folders the module's CUDA and NCCL libraries come from.
dirs=$(ldd "$mod" | awk '$1 ~ /^lib(cudart|nccl)\.so/ && $3 ~ /^\// {print $3}' | xargs -r -n1 readlink -f \
  | xargs -r -n1 dirname | sort -u)
[ -n "$dirs" ] || { echo "ci/check-no-cuda.sh: cannot find where $mod's libraries live" >&2; exit 1; }
expect_fail() { echo "$(readlink -f "$1") could not be loaded (dlopen failed: |cannot open shared object file"; }
# Root gets a plain mount namespace; anyone else a user namespace mapped to root.
ns=(unshare -m)
[ "$(id -u)" = 0 ] || ns=(unshare -rm)
if [ -n "${DLPG_NO_CUDA_FALLBACK:-}" ] || ! "${ns[@]}" true 2>/dev/null; then
  # No mount namespace here (a container without CAP_SYS_ADMIN): install the build (the
  # installed module has no RUNPATH) and run through the dynamic loader with its cache
  # inhibited, so only LD_LIBRARY_PATH and the default system folders are searched: the
  # CUDA folders are not among them.
  echo "ci/check-no-cuda.sh: no mount namespace (${ns[*]}); using an installed tree and ld.so --inhibit-cache"
  prefix=$(mktemp -d)
  trap 'rm -rf "$prefix"' EXIT
  cmake --install "$build" --prefix "$prefix" >/dev/null
  ilib=$(dirname "$(find "$prefix" -name libdlpg.so | head -1)")
  imod="$ilib/libdlpg_nccl.so"
  if readelf -d "$imod" | grep -qE 'RPATH|RUNPATH'; then
    echo "ci/check-no-cuda.sh: the installed $imod has a RUNPATH; cannot hide CUDA from it" >&2
    exit 1
  fi
  bin="$build/tests/test_backend_module"
  interp=$(readelf -l "$bin" | sed -n 's/.*interpreter: \(.*\)]/\1/p')
  listing=$("$interp" --inhibit-cache --list "$imod" 2>&1 || true)
  if ! echo "$listing" | grep -q 'libcudart.*cannot open shared object file\|libcudart.* not found'; then
    echo "ci/check-no-cuda.sh: libcudart still resolves with the cache inhibited:" >&2
    echo "$listing" >&2
    exit 1
  fi
  echo "$listing" | sed 's/^/  ld.so --list: /'
  DLPG_PLUGIN="$ilib/libdlpg.so" DLPG_TEST_EXPECT_MODULE_FAIL="$(expect_fail "$imod")" \
    timeout 120 "$interp" --inhibit-cache "$bin" --gtest_brief=1
  echo "ci/check-no-cuda.sh: CPU job ran with the module present and CUDA hidden: OK"
  exit 0
fi
EXPECT="$(expect_fail "$mod")" "${ns[@]}" bash -euo pipefail -s "$build" "$mod" $dirs <<'INNER'
build=$1 mod=$2; shift 2
mount --make-rprivate / 2>/dev/null || true
empty=$(mktemp -d)
for d in "$@"; do mount --bind "$empty" "$d"; done
# Really hidden: the loader cannot resolve them any more.
if ! ldd "$mod" | grep -qE 'libcudart.* not found'; then
  echo "ci/check-no-cuda.sh: libcudart is still visible after hiding $*" >&2
  ldd "$mod" >&2
  exit 1
fi
echo "ci/check-no-cuda.sh: hid $* ; ldd $mod now says:"
ldd "$mod" | grep -E 'cudart|nccl' | sed 's/^/  /'
"$build/tools/dlpg-info" | sed -n '2,5p' | sed 's/^/  dlpg-info: /'
# The module is found where core looks by default: beside libdlpg.so.
DLPG_TEST_EXPECT_MODULE_FAIL="$EXPECT" \
  timeout 120 "$build/tests/test_backend_module" --gtest_brief=1
INNER
echo "ci/check-no-cuda.sh: CPU job ran with the module present and CUDA hidden: OK"
