#!/usr/bin/env bash
# The wheel on the GPU machine (ci/gpu-test.sh's `wheel` suite): build it there with its
# setuptools and torch from the bundle ci/gpu-bundle.sh carried in .gpu/ (libdlpg.so and the
# NCCL module built with an $ORIGIN run path, the tools in .gpu/bin, the Debian libraries
# beside them; libdlpg_xla.so compiled here against this machine's jaxlib; the torch
# extension compiled by the wheel build against this torch), install it into a fresh venv,
# and, from another folder with no DLPG_* variable and no LD_LIBRARY_PATH, run a CUDA
# allreduce through torch's "dlpg" backend and a jitted JAX allreduce on the GPU.
# Usage: ci/gpu-wheel.sh LOGDIR [PYTHON]   (exit status non-zero on any failure)
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
logdir="${1:?usage: ci/gpu-wheel.sh LOGDIR [PYTHON]}"
py="${2:-python3}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

[ -f .gpu/lib/libdlpg_xla.so ] || bash plugin/xla/build.sh .gpu/lib "$py"
# The machine's python3 is itself a venv (torch, jax, setuptools live there): the fresh venv
# sees its packages through a .pth file, as --system-site-packages would show a system's.
"$py" -m venv "$work/venv"
site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' >"$site/base-packages.pth"
t0=$SECONDS
DLPG_BUILD_DIR="$repo/.gpu/lib" MAX_JOBS=${MAX_JOBS:-8} PIP_NO_INDEX=1 \
  "$work/venv/bin/python" -m pip wheel --no-build-isolation --no-deps -w "$work/dist" \
  "$repo/python_shim" >"$logdir/wheel-build.log" 2>&1 \
  || { tail -40 "$logdir/wheel-build.log"; exit 1; }
whl=$(ls "$work"/dist/*.whl)
echo "gpu-wheel: built $(basename "$whl") in $((SECONDS - t0)) s"
"$work/venv/bin/python" - "$whl" <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for i in z.infolist():
    print("%10d  %s" % (i.file_size, i.filename))
print([l for l in z.read([n for n in z.namelist() if n.endswith("/WHEEL")][0]).decode().splitlines() if l.startswith("Tag")])
PY
PIP_NO_INDEX=1 "$work/venv/bin/python" -m pip install --no-deps "$whl" >>"$logdir/wheel-build.log" 2>&1

cat >"$work/check.py" <<'PY'
import os, sys
assert not [k for k in os.environ if k.startswith("DLPG_")], "a DLPG_ variable is set"
import torch, torch.distributed as dist
import dlpg, dlpg.torch
assert dlpg.__file__.startswith(sys.prefix), dlpg.__file__
print("dlpg", dlpg.__version__, "from", dlpg.library_path(), "torch backend", dlpg.torch.IMPLEMENTATION)
dist.init_process_group("dlpg", init_method="file://" + sys.argv[1] + "/torch-rdzv", rank=0, world_size=1)
x = torch.randn(1 << 20, device="cuda", generator=torch.Generator("cuda").manual_seed(5))
ref = x.clone()
dist.all_reduce(x)
torch.cuda.synchronize()
assert torch.equal(x, ref), "torch dlpg CUDA allreduce differs"
dist.destroy_process_group()
print("torch CUDA allreduce through dlpg: OK (%d floats)" % x.numel())
import jax, jax.numpy as jnp
import dlpg.jax as dj
dj.init("file://" + sys.argv[1] + "/jax-store", rank=0, world_size=1)
y = jax.device_put(jnp.arange(4096, dtype=jnp.float32), jax.devices("gpu")[0])
out = jax.jit(lambda v: dj.allreduce(v * 2.0, op="sum"))(y)
assert bool(jnp.all(out == y * 2.0)), "jitted JAX allreduce differs"
print("jitted JAX allreduce on", out.devices(), "through", dj.library_path(), ": OK")
dj.finalize()
PY
mkdir -p "$work/elsewhere"
(cd "$work/elsewhere" && env $(env | grep -oE '^DLPG_[A-Za-z0-9_]*' | sed 's/^/-u /') \
  -u LD_LIBRARY_PATH -u PYTHONPATH "$work/venv/bin/python" "$work/check.py" "$work")
PIP_NO_INDEX=1 "$work/venv/bin/python" -m pip uninstall -y dlpg >>"$logdir/wheel-build.log" 2>&1
left=$(ls "$site" | grep '^dlpg' || true)
[ -z "$left" ] || { echo "gpu-wheel: pip uninstall left $left" >&2; exit 1; }
echo "gpu-wheel: OK (uninstall left nothing)"
