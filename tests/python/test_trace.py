"""Stall warnings and flight-record dumps read back by `python -m dlpg.trace`, from a real
run through dlpg's Python API (dlpg.Group over dlpg.Store, NumPy): 4 rank processes, rank 2
stalls before its second allreduce and is then killed (SIGKILL). The survivors warn once
naming rank 2 before they fail, each writes <group>.<rank>.json into
DLPG_FLIGHT_RECORDER_DUMP, and dlpg.trace names rank 2 as the rank without a dump and the
survivors as waiting in coll_seq 2."""

import json
import os
import subprocess
import sys
import uuid

import pytest

from conftest import dlpg_store

np = pytest.importorskip("numpy")

WORLD = 4
VICTIM = 2

RANK = r"""
import os, signal, sys, time
import numpy as np
import dlpg
url, rank, world, name = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
g = dlpg.Group(dlpg.Store(url, 30), rank, world, timeout=8, name=name)
rng = np.random.default_rng(1234 + rank)
x = rng.standard_normal(64).astype(np.float32)
want = sum(np.random.default_rng(1234 + r).standard_normal(64).astype(np.float32)
           for r in range(world))
g.allreduce(x)
assert np.allclose(x, want, rtol=1e-5, atol=1e-5), (x, want)
if rank == %d:
    time.sleep(2.5)           # stalled: the others warn at 1 s
    os.kill(os.getpid(), signal.SIGKILL)
y = np.ones(1024, np.float32)
try:
    g.allreduce(y)
    print("op: ok")
except dlpg.DlpgError as e:
    print("op: failed: %%s" %% e)
""" % VICTIM


def _run_job(dump_dir, name):
    env = dict(os.environ, DLPG_FLIGHT_RECORDER_DUMP=str(dump_dir) + "/", DLPG_STALL_WARN_S="1")
    with dlpg_store() as url:
        procs = [subprocess.Popen([sys.executable, "-c", RANK, url, str(r), str(WORLD), name],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for r in range(WORLD)]
        out = {}
        try:
            for r, p in enumerate(procs):
                o, e = p.communicate(timeout=90)
                out[r] = (p.returncode, o, e)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(5)
    return out


def test_killed_rank_warning_dumps_and_trace(tmp_path):
    name = "trace-" + uuid.uuid4().hex[:8]
    out = _run_job(tmp_path, name)
    assert out[VICTIM][0] == -9, out[VICTIM]
    survivors = [r for r in range(WORLD) if r != VICTIM]
    for r in survivors:
        code, o, e = out[r]
        assert code == 0, (r, o, e)
        assert "op: failed" in o, (r, o, e)
        warnings = [line for line in e.splitlines() if "still blocked after" in line]
        assert len(warnings) == 1, (r, e)
        w = warnings[0]
        assert " WARN " in w and "dlpg_allreduce (coll_seq 2, float32 x1024)" in w, w
        assert ("rank %d had not reached coll_seq 2" % VICTIM in w or
                "rank %d published no progress" % VICTIM in w), w
        for other in survivors:
            assert "rank %d had not" % other not in w, w
        # The warning comes before the failure's dump.
        assert e.index("still blocked after") < e.index("flight record written to"), e
        print("rank %d: %s" % (r, w))

        path = tmp_path / ("%s.%d.json" % (name, r))
        d = json.loads(path.read_text())
        assert d["format"] == "dlpg-flight-record" and d["version"] == 1
        assert (d["group"], d["rank"], d["size"]) == (name, r, WORLD)
        assert isinstance(d["host"], str) and d["host"]
        assert isinstance(d["pid"], int) and d["pid"] > 0
        assert d["reason"] and isinstance(d["dumped_at"], float)
        assert d["progress"]["coll_seq_started"] == 2
        assert d["progress"]["coll_seq_completed"] == 1
        ops = d["ops"]
        assert [(o["seq_kind"], o["seq"], o["kind"], o["dtype"], o["count"]) for o in ops] == [
            ("coll", 1, "allreduce", "float32", 64), ("coll", 2, "allreduce", "float32", 1024)]
        assert ops[0]["state"] == "done" and ops[0]["status"] == "DLPG_OK"
        assert ops[1]["state"] != "done"
        for o in ops:
            assert o["backend"] and o["device"] == "cpu" and o["peer"] is None
            assert o["issued"] <= d["dumped_at"]
            assert set(o) >= {"id", "seq", "kind", "dtype", "count", "peer", "state", "status",
                              "issued", "started", "ended", "backend"}
    assert not (tmp_path / ("%s.%d.json" % (name, VICTIM))).exists()

    r = subprocess.run([sys.executable, "-m", "dlpg.trace", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    print(r.stdout)
    assert r.returncode == 0, r.stderr
    assert 'group "%s": 4 ranks, dumps of 0,1,3' % name in r.stdout, r.stdout
    assert "rank %d wrote no dump" % VICTIM in r.stdout, r.stdout
    assert "ranks 0,1,3 are waiting in coll_seq 2 (allreduce float32 x1024)" in r.stdout, r.stdout


def test_trace_names_the_rank_behind(tmp_path):
    """Dumps of 3 ranks where rank 1 had only started coll_seq 4 (it dumped too): trace says
    rank 1 never reached coll_seq 5 and ranks 0, 2 wait in it; no dump is missing."""
    def dump(rank, started):
        ops = [{"id": s, "seq_kind": "coll", "seq": s, "kind": "allreduce", "dtype": "float32",
                "count": 8, "peer": None, "backend": "gloo", "state": "done" if s < 5 else
                "failed", "status": "DLPG_OK" if s < 5 else "DLPG_ERR_TIMEOUT", "issued": 1.0,
                "started": 1.0, "ended": 2.0} for s in range(1, started + 1)]
        d = {"format": "dlpg-flight-record", "version": 1, "group": "g", "rank": rank,
             "size": 3, "host": "h", "pid": 100 + rank, "reason": "test", "dumped_at": 3.0,
             "progress": {"coll_seq_started": started, "coll_seq_completed": min(started, 4)},
             "ops": ops}
        (tmp_path / ("g.%d.json" % rank)).write_text(json.dumps(d))
    dump(0, 5)
    dump(1, 4)
    dump(2, 5)
    (tmp_path / "other.json").write_text("{}")
    r = subprocess.run([sys.executable, "-m", "dlpg.trace", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "rank 1 never reached coll_seq 5 (allreduce float32 x8)" in r.stdout, r.stdout
    assert "issued 2.0 s before its dump" in r.stdout, r.stdout
    assert "ranks 0,2 are waiting in it" in r.stdout, r.stdout
    assert "wrote no dump" not in r.stdout, r.stdout
    assert "not a dlpg flight record" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "dlpg.trace", str(tmp_path / "none")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "no flight-record dumps" in r.stderr, r.stderr


def test_trace_names_the_rank_that_issued_late(tmp_path):
    """Dumps of 3 ranks that all issued coll_seq 5, rank 1 12.5 s after ranks 0 and 2 (it was
    slow outside dlpg, in its data loader say): trace says rank 1 called it late, by how much,
    and when its previous collective was issued; the others are not called late."""
    issued = {0: 100.0, 1: 112.5, 2: 100.25}

    def dump(rank):
        ops = []
        for s in range(1, 6):
            t = 90.0 + s if s < 5 else issued[rank]
            ops.append({"id": s, "seq_kind": "coll", "seq": s, "kind": "allreduce",
                        "dtype": "float32", "count": 8, "peer": None, "backend": "gloo",
                        "state": "done" if s < 5 else "failed",
                        "status": "DLPG_OK" if s < 5 else "DLPG_ERR_TIMEOUT", "issued": t,
                        "started": t, "ended": t + 0.01 if s < 5 else 113.0})
        d = {"format": "dlpg-flight-record", "version": 1, "group": "g", "rank": rank,
             "size": 3, "host": "h", "pid": 100 + rank, "reason": "test", "dumped_at": 113.0,
             "progress": {"coll_seq_started": 5, "coll_seq_completed": 4}, "ops": ops}
        (tmp_path / ("g.%d.json" % rank)).write_text(json.dumps(d))
    for r in range(3):
        dump(r)
    r = subprocess.run([sys.executable, "-m", "dlpg.trace", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    print(r.stdout)
    assert r.returncode == 0, r.stderr
    assert ("rank 1 called coll_seq 5 (allreduce float32 x8) late: 12.5 s after rank 0, the "
            "first; its previous call, coll_seq 4, was 18.5 s before that") in r.stdout, r.stdout
    assert "rank 0 called" not in r.stdout and "rank 2 called" not in r.stdout, r.stdout
