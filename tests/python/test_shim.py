"""dlpg.Group directly (torch and NumPy ranks together), DlpgError on bad input, the
library-not-found message, DDP on "dlpg" against "gloo", and a torchrun launch."""

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import SHIM, cuda_devices, dlpg_store, retry_on_taken_port, run_ranks, torch_store
import dlpg_workers


def test_torch_and_numpy_ranks_exchange():
    with dlpg_store() as url:
        res = run_ranks(dlpg_workers.mixed_frameworks, 2, lambda r: (url,), deadline_s=60)
    for rank, r in sorted(res.items()):
        assert r == {"mixed": "ok"}, "rank %d:\n%s" % (rank, r)


def test_bad_input_raises_dlpg_error():
    import dlpg
    with dlpg_store() as url:
        res = run_ranks(dlpg_workers.bad_input, 2, lambda r: (url,), deadline_s=60)
    for rank, r in sorted(res.items()):
        assert "setup" not in r, r.get("setup")
        for case in ("self_send", "bad_root", "bad_shape", "strided", "bad_op"):
            assert r[case] != "no error", "rank %d %s did not raise" % (rank, case)
            status, name, message = r[case]
            assert status == dlpg.ERR_INVALID_ARGUMENT and name == "DLPG_ERR_INVALID_ARGUMENT", r[case]
            assert message, r[case]
        assert "dlpg_send" in r["self_send"][2] and "peer" in r["self_send"][2]
        assert "dlpg_broadcast" in r["bad_root"][2] and "5" in r["bad_root"][2]
        assert "dlpg_allgather" in r["bad_shape"][2]
        assert "median" in r["bad_op"][2]


def test_error_carries_status_and_message():
    import dlpg
    with pytest.raises(dlpg.DlpgError) as ei:
        dlpg.Store("nonsense://x", 1.0)
    e = ei.value
    assert e.status == dlpg.ERR_INVALID_ARGUMENT and e.status_name == "DLPG_ERR_INVALID_ARGUMENT"
    assert "dlpg_store_open" in e.message and "nonsense" in e.message
    assert dlpg.status_name(dlpg.ERR_TIMEOUT) == "DLPG_ERR_TIMEOUT"
    assert dlpg.version() == 100 and "dlpg" in dlpg.build_info()


def test_store_roundtrip_and_host_store():
    import dlpg
    with dlpg.Store("tcp://127.0.0.1:0?serve=1", 10) as s:
        port = s.port
        assert port > 0
        c = dlpg.Store("tcp://127.0.0.1:%d" % port, 10)
        c.set("k", b"v\x00w")
        assert s.get("k") == b"v\x00w"
        assert c.add("n", 5) == 5 and s.add("n", -2) == 3
        assert c.check(["k"]) and not c.check(["k", "missing"])
        s.wait(["k"], 1.0)
        with pytest.raises(dlpg.DlpgError) as ei:
            c.get("missing", 0.2)
        assert ei.value.status == dlpg.ERR_TIMEOUT
        assert c.delete_key("k") and not c.check(["k"])
        c.close()

    class Host(object):  # torch.distributed.Store-like
        def __init__(self):
            self.d = {}

        def set(self, k, v):
            self.d[k] = v if isinstance(v, bytes) else v.encode()

        def get(self, k):
            return self.d[k]

        def add(self, k, n):
            self.d[k] = str(int(self.d.get(k, b"0")) + n).encode()
            return int(self.d[k])

        def wait(self, keys, timeout=None):
            missing = [k for k in keys if k not in self.d]
            if missing:
                raise RuntimeError("Timeout waiting for %s" % missing)

        def check(self, keys):
            return all(k in self.d for k in keys)

        def delete_key(self, k):
            return self.d.pop(k, None) is not None

    h = Host()
    s = dlpg.Store.from_host_store(h, 5)
    s.set("a", b"x" * 5000)
    assert s.get("a") == b"x" * 5000 and h.d["a"] == b"x" * 5000
    assert s.add("c", 7) == 7
    with pytest.raises(dlpg.DlpgError) as ei:
        s.get("nope", 0.1)
    assert ei.value.status == dlpg.ERR_TIMEOUT
    s.close()


def _run(code, env_extra, timeout=60):
    env = dict(os.environ)
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_library_not_found_message(tmp_path):
    code = textwrap.dedent("""
        import dlpg
        try:
            dlpg.version()
        except dlpg.LibraryNotFoundError as e:
            print("STATUS", e.status_name)
            print("MSG", e.message)
        else:
            print("LOADED", dlpg.library_path())
    """)
    r = _run(code, {"DLPG_LIBRARY": str(tmp_path / "nope" / "libdlpg.so")})
    assert "STATUS DLPG_ERR_SYSTEM" in r.stdout, r.stdout + r.stderr
    assert str(tmp_path / "nope" / "libdlpg.so") in r.stdout and "DLPG_LIBRARY" in r.stdout
    # Without DLPG_LIBRARY, a copy of the package away from any checkout names the package's
    # _native folder, pkg-config and the system loader, and no build*/ pattern (it is not in a
    # source checkout, so it does not look for one beside it).
    import shutil
    pkg = tmp_path / "site" / "dlpg"
    shutil.copytree(os.path.join(SHIM, "dlpg"), str(pkg),
                    ignore=shutil.ignore_patterns("_native", "__pycache__"))
    # LD_LIBRARY_PATH cleared too: where it names a folder holding libdlpg.so.0, the
    # system loader (the last place tried) would rightly find the library.
    env = {"PYTHONPATH": str(tmp_path / "site"), "DLPG_LIBRARY": "", "LD_LIBRARY_PATH": ""}
    r = _run(code, env)
    assert "MSG" in r.stdout, r.stdout + r.stderr
    assert str(pkg / "_native" / "libdlpg.so") in r.stdout  # where a wheel puts it
    assert "pkg-config" in r.stdout and "system loader" in r.stdout
    assert "build*" not in r.stdout.split("tried, in order:")[1].split(". Set")[0], r.stdout


def _ddp(backend, world, device, tmp_path):
    out = str(tmp_path / ("params-%s-%d.pt" % (backend, world)))
    with torch_store() as init:
        res = run_ranks(dlpg_workers.ddp_train, world,
                        lambda r: (world, init, backend, device, out), deadline_s=120)
    for rank, r in sorted(res.items()):
        assert r == {"ddp": "ok"}, "%s rank %d:\n%s" % (backend, rank, r)
    import torch
    return torch.load(out)


@pytest.mark.parametrize("world", [2, 4])
def test_ddp_matches_gloo(world, tmp_path):
    import torch
    a = _ddp("dlpg", world, "cpu", tmp_path)
    b = _ddp("gloo", world, "cpu", tmp_path)
    for x, y in zip(a, b):
        if world == 2:
            assert torch.equal(x, y), (x - y).abs().max()
        else:
            assert torch.allclose(x, y, rtol=1e-12, atol=0), (x - y).abs().max()


def test_ddp_cuda_matches_nccl(tmp_path):
    if cuda_devices() < 2:
        pytest.skip("needs 2 CUDA devices")
    import torch
    a = _ddp("dlpg", 2, "cuda", tmp_path)
    b = _ddp("nccl", 2, "cuda", tmp_path)
    for x, y in zip(a, b):
        assert torch.allclose(x, y, rtol=1e-12, atol=1e-14), (x - y).abs().max()


TORCHRUN_SCRIPT = """
import os, sys, torch, torch.distributed as dist
import dlpg.torch
dev = sys.argv[1]
if dev == "cuda":
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("dlpg")
r, w = dist.get_rank(), dist.get_world_size()
g = torch.Generator().manual_seed(5 + r)
x = torch.randn(100, generator=g, dtype=torch.float64)
ref = sum(torch.randn(100, generator=torch.Generator().manual_seed(5 + k), dtype=torch.float64)
          for k in range(w))
y = x.to(dev)
dist.all_reduce(y)
assert torch.allclose(y.cpu(), ref, rtol=1e-12), (y, ref)
dist.barrier()
print("TORCHRUN-OK", r, w, dist.get_backend())
dist.destroy_process_group()
"""


def _torchrun(cmd_of_port, cwd, env=None):
    """Run torchrun's command for a master port; torchrun's store cannot report a port it
    picked itself, so a launch that failed for a taken port is retried on another one."""
    def launch(port):
        try:
            r = subprocess.run(cmd_of_port(port), capture_output=True, text=True, timeout=120,
                               cwd=str(cwd), env=env)
        except subprocess.TimeoutExpired as e:
            pytest.fail("torchrun did not finish in 120 s: %s" % (e.stdout,))
        return r, ("" if r.returncode == 0 else r.stdout + r.stderr)
    return retry_on_taken_port(launch)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_torchrun_launch(device, tmp_path):
    if device == "cuda" and cuda_devices() < 2:
        pytest.skip("needs 2 CUDA devices")
    script = tmp_path / "train.py"
    script.write_text(TORCHRUN_SCRIPT)
    r = _torchrun(lambda port: [sys.executable, "-m", "torch.distributed.run",
                                "--nproc_per_node", "2",
                                "--master_addr", "127.0.0.1", "--master_port", str(port),
                                str(script), device], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert r.stdout.count("TORCHRUN-OK") == 2 and "dlpg" in r.stdout, r.stdout


def test_torchrun_launches_a_c_program(tmp_path):
    """`torchrun --no_python dlpg-demo`: a plain C host meets its peers through
    dlpg_group_create_from_env (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)."""
    lib = os.environ.get("DLPG_LIBRARY", "")
    demo = os.path.join(os.path.dirname(lib), "examples", "dlpg-demo") if lib else ""
    if not os.access(demo, os.X_OK):
        pytest.skip("dlpg-demo not found beside DLPG_LIBRARY (%r)" % lib)
    # The command exactly as README.md gives it, with this interpreter, a master port and the
    # build folder of DLPG_LIBRARY.
    import re
    with open(os.path.join(os.path.dirname(SHIM), "README.md")) as f:
        line = re.search(r"`(torchrun [^`]*dlpg-demo)`", f.read()).group(1)
    # torchrun is `python -m torch.distributed.run` of the interpreter torch is installed for.
    cmd = [sys.executable, "-m", "torch.distributed.run"] + line.split()[1:]
    assert cmd[-1] == "build/examples/dlpg-demo", line
    nproc = int(cmd[cmd.index("--nproc_per_node") + 1])
    # env:// serves dlpg's store on MASTER_PORT + 1: a taken one fails the launch as a taken
    # master port does, and the launch is retried on other ports.
    r = _torchrun(lambda port: (cmd[:-1] +
                                ["--master_addr", "127.0.0.1", "--master_port", str(port)] +
                                [demo]), tmp_path,
                 env={k: v for k, v in os.environ.items() if k != "DLPG_STORE_PORT"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for rank in range(nproc):
        assert "rank %d: results checked: OK" % rank in r.stdout, r.stdout
    # Rank 0 prints the allreduce of r*10+i over the ranks: 10 * sum(r) + nproc * i.
    base = 10 * sum(range(nproc))
    assert "[%d, %d, %d, %d]" % tuple(base + nproc * i for i in range(4)) in r.stdout, r.stdout


def test_dropped_work_is_parked_then_reaped():
    with dlpg_store() as url:
        res = run_ranks(dlpg_workers.dropped_works, 2, lambda r: (url,), deadline_s=60)
    for rank, r in sorted(res.items()):
        assert r == {"dlpg_work": "ok"}, "rank %d:\n%s" % (rank, r)


def test_flight_record_lists_the_operations():
    """Group.flight_record mirrors dlpg_group_flight_record: one line per operation, in issue
    order, with the op, dtype and count of each (world size 1, so no peer is needed)."""
    import numpy as np

    import dlpg
    with dlpg.Store("tcp://127.0.0.1:0?serve=1", 30) as store:
        g = dlpg.Group(store, 0, 1, timeout=30, name="flight")
        rng = np.random.default_rng(7)
        x = rng.standard_normal(37).astype(np.float32)
        y = np.zeros_like(x)
        g.allreduce(x, output=y)
        g.broadcast(rng.integers(0, 9, 5).astype(np.int64), root=0)
        lines = g.flight_record()
        g.destroy()
    assert np.array_equal(x, y)
    assert len(lines) == 2, lines
    assert "op=dlpg_allreduce" in lines[0] and "dtype=float32" in lines[0] and \
        "count=37" in lines[0] and "state=done" in lines[0], lines[0]
    assert "op=dlpg_broadcast" in lines[1] and "dtype=int64" in lines[1] and \
        "count=5" in lines[1], lines[1]
    assert "coll_seq=1" in lines[0] and "coll_seq=2" in lines[1], lines


def test_reduce_supported_asks_the_library():
    """dlpg.reduce_supported mirrors dlpg_reduce_supported: what dlpg.h promises on the CPU is
    supported, valid DLPack the library does not serve is False, bad arguments raise."""
    import dlpg
    cpu, f32 = (1, 0), (2, 32)  # kDLCPU; kDLFloat, 32 bits
    assert dlpg.reduce_supported(cpu, f32, dlpg.SUM)
    assert dlpg.reduce_supported(cpu, f32, dlpg.AVG)
    assert not dlpg.reduce_supported(cpu, (2, 32, 4), dlpg.SUM)  # lanes 4
    assert not dlpg.reduce_supported((4, 0), f32, dlpg.SUM)  # kDLOpenCL
    with pytest.raises(dlpg.DlpgError) as e:
        dlpg.reduce_supported(cpu, f32, 99)
    assert e.value.status == dlpg.ERR_INVALID_ARGUMENT and "99" in e.value.message
