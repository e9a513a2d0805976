#!/usr/bin/env bash
# Installs what dlpg needs from Debian's packages, only what is missing. CUDA and NCCL are
# not Debian packages: they are used from /usr/local/cuda when present (optional).
set -euo pipefail
pkgs=(build-essential cmake pkg-config libgloo-dev libdlpack-dev libgtest-dev
      python3-torch python3-numpy python3-pytest python3-setuptools python3-pip
      libtorch-dev pybind11-dev ninja-build python3-venv  # C++ torch backend; venv test
      libssl-dev libhiredis-dev redis-server clang libclang-rt-14-dev  # store: auth, Redis, fuzz
      iproute2  # network-namespace (multi-host) test
      openmpi-bin libopenmpi-dev python3-wheel)  # mpirun launch test, MPI anchor; wheel build
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "ci/install-deps.sh: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  # On a shared machine another install may hold dpkg's or apt's lock: wait for it (up to
  # 10 min) instead of failing at once.
  lock=(-o DPkg::Lock::Timeout=600)
  $SUDO apt-get "${lock[@]}" update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get "${lock[@]}" install -y -q --no-install-recommends \
    "${missing[@]}"
else
  echo "ci/install-deps.sh: all Debian packages present"
fi
