"""torchrun elastic restarts and the dlpg:// rendezvous: a worker group whose rank 1 kills
itself in the first attempt re-initialises (env:// and dlpg://) and completes under
torchrun --max-restarts 1; a second dlpg:// rendezvous in one process works; pg_options are
checked on the dlpg:// path as on env://."""

import datetime
import os
import random
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import random_port, retry_on_taken_port, run_ranks

torch = pytest.importorskip("torch")

# Rank 1 of the first attempt dies after one all_reduce (the group worked, then lost a rank);
# torchrun stops rank 0 and starts both again, and the second attempt's sums must be right.
ELASTIC_SCRIPT = r"""
import os, sys, datetime
import numpy as np
import torch
import torch.distributed as dist
import dlpg.torch  # registers "dlpg" and dlpg://

init, seed = sys.argv[1], int(sys.argv[2])
r, w = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
dist.init_process_group("dlpg", init_method=init, timeout=datetime.timedelta(seconds=60))
vals = [np.random.RandomState(seed + attempt * 100 + k).randn(33) for k in range(w)]
x = torch.from_numpy(vals[r].copy())
dist.all_reduce(x)
assert np.allclose(x.numpy(), sum(vals), rtol=1e-12), (x, sum(vals))
if attempt == 0 and r == 1:
    sys.stdout.flush()
    os._exit(17)
dist.barrier()
y = torch.from_numpy(vals[r].copy())
dist.all_reduce(y)
assert np.allclose(y.numpy(), sum(vals), rtol=1e-12)
print("ELASTIC-OK rank %d attempt %d" % (r, attempt), flush=True)
dist.destroy_process_group()
"""


def _elastic(tmp_path, init_of_port):
    script = tmp_path / "elastic.py"
    script.write_text(ELASTIC_SCRIPT)
    seed = random.randrange(1 << 20)
    env = dict(os.environ)

    def launch(port):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--max-restarts", "1", "--monitor-interval", "0.2",
               "--master-addr", "127.0.0.1", "--master-port", str(port),
               str(script), init_of_port(port), str(seed)]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=180,
                               cwd=str(tmp_path), env=env)
        except subprocess.TimeoutExpired as e:
            pytest.fail("torchrun did not finish in 180 s: %s %s" % (e.stdout, e.stderr))
        return r, ("" if r.returncode == 0 else r.stdout + r.stderr)

    r = retry_on_taken_port(launch)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    # Both ranks end in the second attempt, none in the first (the two ranks share one pipe,
    # so their lines may run together).
    assert sorted(re.findall(r"ELASTIC-OK rank \d attempt \d", r.stdout)) == [
        "ELASTIC-OK rank 0 attempt 1", "ELASTIC-OK rank 1 attempt 1"], out[-4000:]


def test_torchrun_restart_reinitialises_through_env(tmp_path):
    _elastic(tmp_path, lambda port: "env://")


def test_torchrun_restart_reinitialises_through_dlpg_url(tmp_path):
    # Rank 0 serves the dlpg store (as tcp://'s rank 0 does) on the port after torchrun's:
    # the restarted rank 0 serves it again.
    _elastic(tmp_path, lambda port: "dlpg://127.0.0.1:%d?name=elastic" % (port + 1))


def _twice(rank, url, seed, queue):
    import torch.distributed as dist
    import dlpg.torch  # noqa: F401
    out = {}
    try:
        for k in range(2):
            dist.init_process_group("dlpg", init_method=url, rank=rank, world_size=2,
                                    timeout=datetime.timedelta(seconds=60),
                                    pg_options={"name": "again"} if k else None)
            vals = [np.random.RandomState(seed + 10 * k + j).randn(9) for j in range(2)]
            x = torch.from_numpy(vals[rank].copy())
            dist.all_reduce(x)
            out["sum%d" % k] = bool(np.allclose(x.numpy(), vals[0] + vals[1], rtol=1e-12))
            dist.destroy_process_group()
        try:
            dist.init_process_group("dlpg", init_method=url, rank=rank, world_size=2,
                                    timeout=datetime.timedelta(seconds=60),
                                    pg_options={"nme": "x"})
            out["refused"] = "no error"
        except ValueError as e:
            out["refused"] = "unknown pg_options 'nme'" in str(e)
    except Exception as e:  # the test reports it with the rank
        out["error"] = repr(e)
    queue.put((rank, out))


def test_dlpg_url_second_rendezvous_in_one_process_and_pg_options():
    seed = random.randrange(1 << 20)

    def launch(port):
        url = "dlpg://127.0.0.1:%d?name=twice" % port
        res = run_ranks(_twice, 2, lambda r: (url, seed), deadline_s=120)
        return res, " ".join(v.get("error", "") for v in res.values())

    res = retry_on_taken_port(launch)
    want = {"sum0": True, "sum1": True, "refused": True}
    assert res == {0: want, 1: want}, res


def test_dlpg_url_serve_must_be_0_or_1():
    import torch.distributed as dist
    import dlpg.torch  # noqa: F401
    with pytest.raises(ValueError, match="serve is 'yes'"):
        next(dist.rendezvous("dlpg://127.0.0.1:1?serve=yes", 0, 2,
                             timeout=datetime.timedelta(seconds=5)))
