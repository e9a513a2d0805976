"""Helpers shared by the bench scripts (compare_torch_gloo.py, torch_overhead.py,
torch_alltoall_uneven.py, torch_shared_gpu.py, gpu_table.py, plot_busbw.py), so each formats
sizes, names the CPU, reads dlpg-bench JSON and starts its torch ranks the same way. The
scripts import it from their own directory (sys.path[0])."""
import json
import sys


def fmt_size(n):
    """n bytes as '<k> GiB/MiB/KiB' when it is a whole multiple, else '<n> B'."""
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return "%d %s" % (n // div, unit)
    return "%d B" % n


def cpu_model(default):
    """The first 'model name' of /proc/cpuinfo, or default when there is none to read."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return default


def load_json_docs(paths, who):
    """The JSON documents of paths, in order; a file that cannot be read or parsed is
    reported on stderr as '<who>: skipping <path>: <why>' and left out."""
    docs = []
    for p in paths:
        try:
            with open(p) as f:
                docs.append(json.load(f))
        except (OSError, ValueError) as e:
            print("%s: skipping %s: %s" % (who, p, e), file=sys.stderr)
    return docs


def spawn_ranks(worker, world, extra, timeout=540):
    """Serve a TCPStore (port 0, read back: no port picked by bind-and-release), start world
    spawned processes worker(rank, world, port, *extra, q), and return {rank: result} from
    the (rank, result) each puts on q; a process still alive 30 s after is killed."""
    import datetime
    import multiprocessing as mp
    import torch.distributed as dist
    master = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=600),
                           wait_for_workers=False)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, world, master.port) + tuple(extra) + (q,))
             for r in range(world)]
    for p in procs:
        p.start()
    res = {}
    try:
        for _ in procs:
            rank, r = q.get(timeout=timeout)
            res[rank] = r
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    return res


def write_text(text, out):
    """Print text, and write it to the file out when one is named."""
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text)
