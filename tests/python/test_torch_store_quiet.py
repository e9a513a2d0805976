"""A rendezvous over torch's own store must not make torch complain. torch's TCPStore logs
"[c10d] waitForInput: socket ... timed out after 41ms" for every wait that expires, and a
4-rank CPU init_process_group("dlpg") printed it: dlpg's reads of keys not yet set were short
waits on the host's store. Now dlpg checks (non-blocking) until the keys exist, so no wait
on torch's store ever times out. Each rank counts the waits that expire itself, through a
store that wraps the TCPStore (whatever torch logs for them), and the ranks' stderr is
checked for torch's warning too."""
import os
import subprocess
import sys

import pytest

from conftest import torch_store

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

RANK_SCRIPT = r"""
import datetime, sys, time
import torch
import torch.distributed as dist
import dlpg.torch  # registers the "dlpg" backend

host, port, rank, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
expired = []


class Counting(dist.Store):
    # torch's TCPStore, counting the waits that time out (torch logs them too).
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def set(self, key, value):
        self.inner.set(key, value)

    def get(self, key):
        return self.inner.get(key)

    def add(self, key, value):
        return self.inner.add(key, value)

    def check(self, keys):
        return self.inner.check(keys)

    def delete_key(self, key):
        return self.inner.delete_key(key)

    def num_keys(self):
        return self.inner.num_keys()

    def set_timeout(self, timeout):
        self.inner.set_timeout(timeout)

    def wait(self, keys, timeout=None):
        try:
            if timeout is None:
                self.inner.wait(keys)
            else:
                self.inner.wait(keys, timeout)
        except Exception:
            expired.append(list(keys))
            raise


timeout = datetime.timedelta(seconds=60)
inner = dist.TCPStore(host, port, world, False, timeout)
if rank == world - 1:
    time.sleep(1.0)  # the others wait for this rank's keys meanwhile
# Kept referenced: torch holds only the C++ side of a Python store, so once the Python
# object is collected its overrides are gone ("Tried to call pure virtual function
# ::c10d::Store::add", seen from dlpg's threads on torch 2.11).
counting = Counting(inner)
dist.init_process_group("dlpg", store=counting, rank=rank, world_size=world,
                        timeout=timeout)
x = torch.arange(16, dtype=torch.float64) + 100 * rank
dist.all_reduce(x)
want = sum(torch.arange(16, dtype=torch.float64) + 100 * r for r in range(world))
assert torch.equal(x, want), (x, want)
dist.barrier()
dist.destroy_process_group()
print("EXPIRED %d %r" % (len(expired), expired[:3]))
"""


def test_init_process_group_on_a_tcpstore_lets_no_wait_expire(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    world = 4
    with torch_store() as (host, port):
        procs = [subprocess.Popen([sys.executable, str(script), host, str(port), str(r),
                                   str(world)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=dict(os.environ))
                 for r in range(world)]
        outs = []
        try:
            for p in procs:
                outs.append(p.communicate(timeout=180))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
    for r, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, "rank %d:\n%s\n%s" % (r, out[-2000:], err[-3000:])
        assert "EXPIRED 0 " in out, "rank %d: a wait on torch's store timed out: %s" % (r, out)
        for noise in ("waitForInput", "timed out", "Socket Timeout"):
            assert noise not in err, "rank %d's stderr: %s" % (r, err[-3000:])
