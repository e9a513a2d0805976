"""dlpg-bench speaks nccl-tests: its short options mean what they mean there, its table has
nccl-tests' columns (read back here the way a parsing script reads them), one program name
per collective picks the collective, and nccl-tests' -N and -R, which have no dlpg meaning,
are refused. Runs 2 local CPU ranks (--nranks 2) with the result check on (-c 1).

The bench is DLPG_BENCH, else bench/dlpg-bench beside DLPG_LIBRARY's build tree."""
import os
import shutil
import subprocess

import pytest

TIMEOUT = 240 * float(os.environ.get("DLPG_TEST_TIME_SCALE", "1"))


def bench_path():
    p = os.environ.get("DLPG_BENCH")
    if p:
        return p
    lib = os.environ.get("DLPG_LIBRARY")
    if lib:
        d = os.path.dirname(os.path.abspath(lib))
        for c in (os.path.join(d, "bench", "dlpg-bench"), os.path.join(d, "..", "bin", "dlpg-bench")):
            if os.path.exists(c):
                return c
    return None


BENCH = bench_path()
pytestmark = pytest.mark.skipif(BENCH is None or not os.access(BENCH, os.X_OK),
                                reason="no dlpg-bench (set DLPG_BENCH or DLPG_LIBRARY)")


def run(argv, env=None):
    e = dict(os.environ)
    # The bench's own children must not see a launcher's variables from the test's caller.
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        e.pop(k, None)
    e.update(env or {})
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=TIMEOUT, env=e)


def parse_table(out):
    """nccl-tests' table as its parsers read it: the header's column names, then every line
    not starting with '#' split on whitespace into 13 fields (size count type redop root,
    then time algbw busbw #wrong out of place and in place)."""
    lines = out.splitlines()
    names = [l for l in lines if l.startswith("#") and "#wrong" in l]
    assert names, out
    assert names[0].split() == ["#", "size", "count", "type", "redop", "root", "time", "algbw",
                                "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"], names[0]
    units = lines[lines.index(names[0]) + 1]
    assert units.split() == ["#", "(B)", "(elements)", "(us)", "(GB/s)", "(GB/s)", "(us)",
                             "(GB/s)", "(GB/s)"], units
    rows = []
    for l in lines:
        if l.startswith("#") or not l.strip():
            continue
        f = l.split()
        assert len(f) == 13, l
        rows.append({"size": int(f[0]), "count": int(f[1]), "type": f[2], "redop": f[3],
                     "root": int(f[4]), "oop": f[5:9], "ip": f[9:13]})
    avg = [l for l in lines if l.startswith("# Avg bus bandwidth")]
    assert len(avg) == 1, out
    float(avg[0].split(":")[1])
    return rows


def test_allreduce_nccl_tests_flags_two_ranks_checked():
    r = run([BENCH, "allreduce", "--nranks", "2", "-b", "8", "-e", "64K", "-f", "8", "-n", "3",
             "-w", "1", "-c", "1", "-o", "sum", "-d", "float", "-r", "0", "--reps", "2"])
    assert r.returncode == 0, r.stdout + r.stderr
    # -n is the iteration count here, as in nccl-tests, not a rank count.
    assert "iters: 3" in r.stdout and "2 rank(s)" in r.stdout, r.stdout
    rows = parse_table(r.stdout)
    assert [x["size"] for x in rows] == [8, 64, 512, 4096, 32768], r.stdout
    for x in rows:
        assert x["count"] == x["size"] // 4 and x["type"] == "float" and x["redop"] == "sum"
        assert x["root"] == -1
        for cols in (x["oop"], x["ip"]):
            assert float(cols[0]) > 0 and cols[3] == "0", x  # time, #wrong
    assert "# Out of bounds values : 0 OK" in r.stdout


def test_stepbytes_adds_when_no_factor():
    # nccl-tests' rule: without -f (> 1), -i adds to the size.
    r = run([BENCH, "broadcast", "--nranks", "2", "-b", "1K", "-e", "3K", "-i", "1K", "-n", "2",
             "-w", "0", "-c", "1", "-r", "1", "--reps", "1", "-d", "int32"])
    assert r.returncode == 0, r.stdout + r.stderr
    rows = parse_table(r.stdout)
    assert [x["size"] for x in rows] == [1024, 2048, 3072]
    assert all(x["root"] == 1 and x["redop"] == "none" and x["type"] == "int32" for x in rows)
    assert all(x["oop"][3] == "0" and x["ip"][3] == "0" for x in rows), r.stdout


def test_program_name_picks_the_collective(tmp_path):
    link = tmp_path / "dlpg_all_gather_perf"
    os.symlink(os.path.abspath(BENCH), link)
    r = run([str(link), "--nranks", "2", "-b", "64", "-e", "256", "-f", "4", "-n", "2", "-w", "0",
             "-c", "1", "--reps", "1"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "# dlpg-bench allgather:" in r.stdout, r.stdout
    rows = parse_table(r.stdout)
    assert [x["size"] for x in rows] == [64, 256]
    for x in rows:
        assert x["oop"][3] == "0", x
        assert x["ip"] == ["N/A"] * 4, x  # dlpg has no in-place allgather


@pytest.mark.parametrize("flag,meaning", [("-N", "run cycles"), ("-R", "buffer registration")])
def test_nccl_tests_flags_without_dlpg_meaning_are_refused(flag, meaning):
    r = run([BENCH, "allreduce", "--nranks", "2", flag, "1"])
    assert r.returncode == 2, r.stdout + r.stderr
    assert flag in r.stderr and meaning in r.stderr and "no dlpg-bench meaning" in r.stderr
    assert "#wrong" not in r.stdout  # nothing ran


@pytest.mark.parametrize("argv,words", [
    (["-G", "1"], ["-G 1", "CUDA graphs"]),
    (["-t", "2"], ["-t 2", "one thread per rank"]),
    (["-c", "2"], ["-c", "0 or 1"]),
    (["-o", "mulsum"], ["-o", "mulsum"]),
    (["-d", "float8"], ["-d", "float8"]),
    (["--inplace", "--outofplace"], ["nothing to run"]),
])
def test_bad_options_are_named(argv, words):
    r = run([BENCH, "allreduce", "--nranks", "2"] + argv)
    assert r.returncode == 2, r.stdout + r.stderr
    for w in words:
        assert w in r.stderr, r.stderr


def test_unsupported_pair_named_alone_fails_clearly():
    r = run([BENCH, "allreduce", "--nranks", "2", "-b", "8", "-e", "8", "-d", "int32", "-o",
             "avg", "-n", "1", "-w", "0"])
    assert r.returncode != 0
    assert "-d int32 -o avg" in r.stderr, r.stderr


@pytest.mark.skipif(os.path.exists("/dev/nvidia0"), reason="this host has a GPU")
def test_cuda_without_a_gpu_fails_and_says_so():
    """A run whose operations fail reports the failure and exits non-zero: its trailer does
    not call the result OK."""
    r = run([BENCH, "allreduce", "--nranks", "1", "--device", "cuda", "-b", "8", "-e", "8",
             "-n", "1", "-w", "0"])
    assert r.returncode != 0, r.stdout + r.stderr
    assert " OK" not in r.stdout, r.stdout
    if "# Out of bounds values" in r.stdout:
        assert "FAILED" in r.stdout, r.stdout


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun")
def test_one_rank_of_an_mpirun_job():
    r = run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", BENCH, "reduce",
             "-b", "8", "-e", "512", "-f", "8", "-n", "2", "-w", "1", "-c", "1", "-r", "1",
             "-o", "max", "--reps", "1"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 rank(s)" in r.stdout and "ranks from mpirun" in r.stdout, r.stdout
    rows = parse_table(r.stdout)
    assert [x["size"] for x in rows] == [8, 64, 512]
    assert all(x["redop"] == "max" and x["root"] == 1 for x in rows)
    assert all(x["oop"][3] == "0" and x["ip"][3] == "0" for x in rows), r.stdout


def test_iters_bytes_scales_iterations(tmp_path):
    js = tmp_path / "a.json"
    r = run([BENCH, "allreduce", "--nranks", "2", "-b", "64", "-e", "4K", "-f", "4", "-n", "10",
             "-w", "3", "-c", "1", "--reps", "1", "--iters-bytes", "1K", "--outofplace", "-J", str(js)])
    assert r.returncode == 0, r.stdout + r.stderr
    import json
    doc = json.loads(js.read_text())
    # min(-n, 1 KiB / size), at least 1; warmup at most that.
    assert [(x["size"], x["iters"], x["warmup"]) for x in doc["rows"]] == \
        [(64, 10, 3), (256, 4, 3), (1024, 1, 1), (4096, 1, 1)], doc["rows"]
    assert all(x["dlpg"]["wrong"] == 0 and "dlpg_inplace" not in x for x in doc["rows"])


def test_memcpy_reference_table(tmp_path):
    js = tmp_path / "m.json"
    r = run([BENCH, "--memcpy", "-b", "1K", "-e", "1M", "-f", "32", "-n", "5", "-w", "1",
             "--reps", "3", "-J", str(js)])
    assert r.returncode == 0, r.stdout + r.stderr
    rows = parse_table(r.stdout)
    assert [x["size"] for x in rows] == [1024, 32768, 1048576]
    import json
    doc = json.loads(js.read_text())
    assert doc["op"] == "memcpy"
    for x, j in zip(rows, doc["rows"]):
        assert float(x["oop"][1]) >= 0 and j["memcpy"]["time_us"] > 0
        # time_us is written with 4 decimals: a 1 KiB copy takes a few hundredths of a
        # microsecond, so its rounding alone moves the recomputed bandwidth by up to
        # 0.5e-4 / time_us of itself.
        t = j["memcpy"]["time_us"]
        want = x["size"] / (t * 1e3)
        assert abs(j["memcpy"]["algbw_GBps"] - want) <= want * 0.5e-4 / t + 1e-3
