#!/usr/bin/env bash
# Installs what dlpg needs: the C side from Debian's packages (only what is missing; Debian 12
# and 13), and the Python side into the project venv (.venv, or $DLPG_VENV) from the package
# index, pinned in ci/requirements.txt. CUDA and NCCL are not Debian packages: they are used
# from /usr/local/cuda when present (optional).
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(build-essential cmake pkg-config libgloo-dev libdlpack-dev libgtest-dev
      libssl-dev libhiredis-dev redis-server clang libclang-rt-dev  # store: auth, Redis, fuzz
      iproute2  # network-namespace (multi-host) test
      openmpi-bin libopenmpi-dev)  # mpirun launch test, MPI anchor
# The venv's Python: 3.11, for which torch 2.13's CPU wheel is built. Debian 12 ships it; a
# Debian 13 image may carry it too, else the PATH's python3.11 serves (below).
pypkgs=(python3.11 python3.11-venv python3.11-dev)
missing=()
for p in "${pkgs[@]}" "${pypkgs[@]}"; do
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
  have=()
  for p in "${missing[@]}"; do
    # A python3.11 package this release does not have is no error: another Python 3.11 serves.
    if [[ " ${pypkgs[*]} " == *" $p "* ]] && ! apt-cache show "$p" >/dev/null 2>&1; then
      echo "ci/install-deps.sh: this Debian has no $p"
      continue
    fi
    have+=("$p")
  done
  ((${#have[@]} == 0)) || apt_retry $SUDO env DEBIAN_FRONTEND=noninteractive apt-get \
    "${lock[@]}" install -y -q --no-install-recommends "${have[@]}"
else
  echo "ci/install-deps.sh: all Debian packages present"
fi

# The project venv: Debian's Python 3.11, the pinned packages. Reinstalled only when
# ci/requirements.txt changed since it was filled (its copy inside the venv says what it holds).
venv=${DLPG_VENV:-$PWD/.venv}
if [ ! -x "$venv/bin/python" ]; then
  py=/usr/bin/python3.11
  [ -x "$py" ] || py=$(command -v python3.11) || {
    echo "ci/install-deps.sh: no Python 3.11 (Debian's python3.11, or one on the PATH)" >&2
    exit 1
  }
  echo "ci/install-deps.sh: creating the venv $venv with $py"
  "$py" -m venv "$venv"
fi
if ! cmp -s ci/requirements.txt "$venv/dlpg-requirements.txt"; then
  echo "ci/install-deps.sh: installing ci/requirements.txt into $venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -r ci/requirements.txt
  cp ci/requirements.txt "$venv/dlpg-requirements.txt"
else
  echo "ci/install-deps.sh: $venv holds ci/requirements.txt"
fi
