#!/usr/bin/env bash
# docs/multi-host.md run as written, with two network namespaces as hosts hostA (10.98.0.1)
# and hostB (10.98.0.2) joined by a veth pair: a store secret, torchrun --nnodes 2 with
# init_process_group("dlpg") (2 ranks per host), the C demo under torchrun (rank 0 serves the
# store), and the C demo on a separate dlpg-store with a token through DLPG_STORE_URL (the
# doc's mpirun form needs ssh between the hosts, so torchrun launches it here); then the
# demo with GLOO_SOCKET_IFNAME=eth0,eth1 (honoured: its first interface), and with
# GLOO_SOCKET_IFNAME=lo, which must fail with a message naming the variables. The hosts
# share this machine's host name, which resolves to no address of theirs: Gloo must take
# the route to the store host. Needs root and iproute2; cleans up on every exit.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
export PY=${PYTHON:-$PWD/.venv/bin/python}
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
  echo "ci/netns-multihost.sh: needs root and iproute2 (ip); not run" >&2
  exit 1
fi
tag="dlpgmh$$"
work=$(mktemp -d)
cleanup() {
  for h in A B; do ip netns pids "${tag}$h" 2>/dev/null | xargs -r kill -9 2>/dev/null || true; done
  for h in A B; do ip netns del "${tag}$h" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "${tag}A"
ip netns add "${tag}B"
ip link add "va$tag" netns "${tag}A" type veth peer name "vb$tag" netns "${tag}B"
ip -n "${tag}A" addr add 10.98.0.1/24 dev "va$tag"
ip -n "${tag}B" addr add 10.98.0.2/24 dev "vb$tag"
for h in A B; do  # each host's interface is eth0, as on two machines of one cluster
  ip -n "${tag}$h" link set lo up
  ip -n "${tag}$h" link set "v$(echo $h | tr AB ab)$tag" name eth0
  ip -n "${tag}$h" link set eth0 up
done
export PYTHONPATH="$PWD/python_shim" DLPG_LIBRARY="$PWD/$BUILD_DIR/libdlpg.so"
export DLPG_TORCH_EXT_CACHE="$PWD/$BUILD_DIR/torch-ext" DLPG_TIMEOUT=60
on() { local h=$1; shift; ip netns exec "${tag}$h" "$@"; }
# Step 1: one secret for the job.
export DLPG_STORE_TOKEN=$(head -c 24 /dev/urandom | base64)
# torchrun as the doc gives it, the venv's.
torchrun() { "$PY" -m torch.distributed.run "$@"; }
cat >"$work/train.py" <<'PYEOF'
import sys, traceback
sys.excepthook = lambda *e: (traceback.print_exception(*e, file=sys.stdout), sys.stdout.flush())
import torch, torch.distributed as dist, dlpg.torch
dist.init_process_group("dlpg")
rank = dist.get_rank()
# Pairs on one host and across the hosts (ranks 0, 1 on hostA; 2, 3 on hostB), made before
# the default group's first collective: each pair decides where its host memory runs from
# where its two ranks run (shared memory on one host, Gloo across).
pairs = [[0, 1], [1, 2], [2, 3]]
groups = [dist.new_group(p) for p in pairs]
t = torch.ones(4) * rank
dist.all_reduce(t)
n = dist.get_world_size()
assert t.tolist() == [float(n * (n - 1) // 2)] * 4, t
print("rank %d of %d: all_reduce %s OK (dlpg %s)" % (rank, n, t.tolist(),
                                                     dlpg.torch.IMPLEMENTATION), flush=True)
for p, g in zip(pairs, groups):
    if rank not in p:
        continue
    other = p[1] if rank == p[0] else p[0]
    x = torch.full((5,), float(rank + 1))
    dist.all_reduce(x, group=g)
    assert x.tolist() == [float(p[0] + p[1] + 2)] * 5, (p, x)
    mine, got = torch.full((3,), float(10 * rank + other)), torch.empty(3)
    for step in (0, 1):  # the lower rank sends first
        if (rank == p[0]) == (step == 0):
            dist.send(mine, other, group=g)
        else:
            dist.recv(got, other, group=g)
    assert got.tolist() == [float(10 * other + rank)] * 3, (p, got)
    print("rank %d: pair %s all_reduce and send/recv OK" % (rank, p), flush=True)
dist.destroy_process_group()
PYEOF
fail=0
both() {  # both NAME PORT CMD...: node 0 on hostA, node 1 on hostB, each must succeed
  local name=$1 port=$2; shift 2
  for k in 0 1; do
    h=$([ $k = 0 ] && echo A || echo B)
    on $h timeout 150 bash -c "$(declare -f torchrun); torchrun --nnodes 2 --node_rank $k \
      --nproc_per_node 2 --master_addr 10.98.0.1 --master_port $port $*" \
      >"$work/$name.$h.out" 2>&1 &
    echo $! >"$work/$name.$h.pid"
  done
  for h in A B; do
    if ! wait "$(cat "$work/$name.$h.pid")"; then
      echo "ci/netns-multihost.sh: $name failed on host$h:"; tail -40 "$work/$name.$h.out"; fail=1
    fi
  done
  grep -h "OK" "$work/$name".*.out | sed "s/^/netns-multihost: $name: /" || true
}
# Step 3: torch on both hosts. A host's two ranks share its output file and their lines can
# run together, so the checks count the matches, not the lines.
DLPG_DEBUG=INFO DLPG_DEBUG_SUBSYS=INIT both torch 29600 "$work/train.py"
n=$(grep -ho "all_reduce \[6.0, 6.0, 6.0, 6.0\] OK" "$work"/torch.*.out | wc -l || true)
[ "$n" = 4 ] || { echo "FAIL: $n of 4 torch ranks reported OK"; fail=1; }
n=$(grep -ho "pair \[[0-9], [0-9]\] all_reduce and send/recv OK" "$work"/torch.*.out | wc -l || true)
[ "$n" = 6 ] || { echo "FAIL: $n of 6 pair checks reported OK"; fail=1; }
for p in "0-1 shm" "2-3 shm" "1-2 gloo"; do  # the pairs' choices, which each rank logs at INFO
  if ! grep -q "/${p% *}\": collectives on cpu.* run on ${p#* } " "$work"/torch.*.out; then
    echo "FAIL: pair ${p% *} did not choose ${p#* }:"; grep -h "collectives on cpu" "$work"/torch.*.out
    fail=1
  fi
done
# Step 4: the C demo, rank 0 serving the store on MASTER_ADDR.
both demo 29610 --no_python "$BUILD_DIR/examples/dlpg-demo"
n=$(grep -ho "results checked: OK" "$work"/demo.*.out | wc -l || true)
[ "$n" = 4 ] || { echo "FAIL: $n of 4 demo ranks reported OK"; fail=1; }
# Steps 2 and 5: a store server of its own on hostA's address, with the token.
on A "$BUILD_DIR/tools/dlpg-store" --host 10.98.0.1 --port 29700 >"$work/store.out" 2>&1 &
for _ in $(seq 100); do grep -q 29700 "$work/store.out" 2>/dev/null && break; sleep 0.1; done
export DLPG_STORE_URL=tcp://10.98.0.1:29700
both url 29620 --no_python "$BUILD_DIR/examples/dlpg-demo"
n=$(grep -ho "results checked: OK" "$work"/url.*.out | wc -l || true)
[ "$n" = 4 ] || { echo "FAIL: $n of 4 demo ranks on dlpg-store reported OK"; fail=1; }
unset DLPG_STORE_URL
# torch users' GLOO_SOCKET_IFNAME is honoured (its first interface; torch lists several)...
GLOO_SOCKET_IFNAME=eth0,eth1 both ifname 29630 --no_python "$BUILD_DIR/examples/dlpg-demo"
n=$(grep -ho "results checked: OK" "$work"/ifname.*.out | wc -l || true)
[ "$n" = 4 ] || { echo "FAIL: $n of 4 demo ranks with GLOO_SOCKET_IFNAME=eth0,eth1 reported OK"; fail=1; }
# ... and when it names loopback, the ranks fail, and the message names the variables.
fail_before=$fail
DLPG_TIMEOUT=20 GLOO_SOCKET_IFNAME=lo both loopback 29640 --no_python "$BUILD_DIR/examples/dlpg-demo" \
  >/dev/null 2>&1 || true
fail=$fail_before
if grep -q "results checked: OK" "$work"/loopback.*.out; then
  echo "FAIL: ranks bound to loopback (GLOO_SOCKET_IFNAME=lo) reached each other across hosts"; fail=1
fi
if ! grep -q "published a loopback address.*GLOO_SOCKET_IFNAME" "$work"/loopback.*.out; then
  echo "FAIL: the loopback failure does not name GLOO_SOCKET_IFNAME:"; tail -5 "$work"/loopback.*.out; fail=1
else
  grep -ho "could not reach rank [0-9].*connect \[127[^;]*" "$work"/loopback.*.out | head -1 |
    sed 's/^/netns-multihost: loopback (expected to fail): /'
fi
[ "$fail" = 0 ] && echo "ci/netns-multihost.sh: docs/multi-host.md on two namespace hosts: passed"
exit "$fail"
