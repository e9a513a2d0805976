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
  # On a shared machine another install may hold dpkg's or apt's lock. DPkg::Lock::Timeout
  # covers dpkg's lock but not the lists lock of `apt-get update`, so a lock conflict is also
  # retried (every 5 s, up to 10 min) instead of failing at once.
  lock=(-o DPkg::Lock::Timeout=600)
  apt_retry() {
    local out rc t0=$SECONDS
    while :; do
      rc=0; out=$("$@" 2>&1) || rc=$?
      printf '%s\n' "$out"
      ((rc == 0)) && return 0
      grep -q "Could not get lock\|Unable to lock" <<<"$out" && ((SECONDS - t0 < 600)) || return "$rc"
      echo "ci/install-deps.sh: apt's lock is held by another install; retrying in 5 s"
      sleep 5
    done
  }
  apt_retry $SUDO apt-get "${lock[@]}" update -q
  apt_retry $SUDO env DEBIAN_FRONTEND=noninteractive apt-get "${lock[@]}" install -y -q \
    --no-install-recommends "${missing[@]}"
else
  echo "ci/install-deps.sh: all Debian packages present"
fi
