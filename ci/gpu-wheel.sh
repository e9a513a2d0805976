#!/usr/bin/env bash
# The wheel on the GPU machine (ci/gpu-test.sh's `wheel` suite): the wheel ci/gpu-bundle.sh
# built on the development machine (ci/wheel.sh: scikit-build-core, auditwheel; the NCCL
# module in it, NCCL itself left to the machine), carried in .gpu/wheel/, installed into a fresh
# venv; then, from another folder with no DLPG_* variable and no LD_LIBRARY_PATH, a CUDA
# allreduce through torch's "dlpg" backend (its C++ extension compiled at this first import
# against this machine's torch) and a jitted JAX allreduce on the GPU (the handlers were
# compiled against the oldest supported jaxlib's FFI headers; this machine's jax is newer).
# Usage: ci/gpu-wheel.sh LOGDIR [PYTHON]   (exit status non-zero on any failure)
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
logdir="${1:?usage: ci/gpu-wheel.sh LOGDIR [PYTHON]}"
py="${2:-python3}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

whl=$(ls "$repo"/.gpu/wheel/dlpg-*.whl 2>/dev/null | head -1)
[ -n "$whl" ] || { echo "gpu-wheel: no wheel in .gpu/wheel (run ci/gpu-bundle.sh)" >&2; exit 1; }
# The machine's python3 is itself a venv (torch, jax live there): the fresh venv sees its
# packages through a .pth file, as --system-site-packages would show a system's.
"$py" -m venv "$work/venv"
site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' >"$site/base-packages.pth"
echo "gpu-wheel: $(basename "$whl")"
"$work/venv/bin/python" - "$whl" <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for i in z.infolist():
    if not i.filename.endswith((".py", ".cpp", ".h")):
        print("%10d  %s" % (i.file_size, i.filename))
PY
PIP_NO_INDEX=1 "$work/venv/bin/python" -m pip install --no-deps "$whl" >"$logdir/wheel-install.log" 2>&1 \
  || { tail -20 "$logdir/wheel-install.log"; exit 1; }

cat >"$work/check.py" <<'PY'
import os, sys
assert not [k for k in os.environ if k.startswith("DLPG_")], "a DLPG_ variable is set"
import torch, torch.distributed as dist
import dlpg, dlpg.torch
assert dlpg.__file__.startswith(sys.prefix), dlpg.__file__
print("dlpg", dlpg.__version__, "from", dlpg.library_path(), "torch", torch.__version__,
      "backend", dlpg.torch.IMPLEMENTATION, dlpg.torch._native.__file__)
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
print("jitted JAX", jax.__version__, "allreduce on", out.devices(), "through", dj.library_path(), ": OK")
dj.finalize()
PY
mkdir -p "$work/elsewhere"
(cd "$work/elsewhere" && env $(env | grep -oE '^DLPG_[A-Za-z0-9_]*' | sed 's/^/-u /') \
  -u LD_LIBRARY_PATH -u PYTHONPATH XDG_CACHE_HOME="$work/cache" \
  "$work/venv/bin/python" "$work/check.py" "$work")
PIP_NO_INDEX=1 "$work/venv/bin/python" -m pip uninstall -y dlpg >>"$logdir/wheel-install.log" 2>&1
left=$(ls "$site" | grep '^dlpg' || true)
[ -z "$left" ] || { echo "gpu-wheel: pip uninstall left $left" >&2; exit 1; }
echo "gpu-wheel: OK (uninstall left nothing)"
