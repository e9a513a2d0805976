"""Helpers shared by the bench scripts (compare_torch_gloo.py, torch_overhead.py,
gpu_table.py, plot_busbw.py), so each formats sizes, names the CPU and reads dlpg-bench
JSON the same way. The scripts import it from their own directory (sys.path[0])."""
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
