"""Rendezvous of N simulated clients (forked processes) through a store, timed, for:
dlpg's TCP store without and with a token, a Redis server through dlpg's redis:// store,
and torch's TCPStore, all measured in the same run on loopback.

Each client: open the store, set "addr/<rank>" (a 64-byte value), add 1 to "arrived", wait
for all N "addr/*" keys, get its neighbour's address (checked), close. That is the all-gather
Gloo's full-mesh rendezvous needs. Clients are forked before the clock starts and released
together through a pipe; the time is from release to the last client's report. Writes a
markdown table (--out) with the command, date and machine.

  DLPG_LIBRARY=build/libdlpg.so /usr/bin/python3 bench/store_scale.py --clients 1024 256 \
      --out bench/results/store-scale.md
"""
import argparse
import ctypes
import datetime
import os
import platform
import random
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_util import cpu_model  # noqa: E402

TIMEOUT = 120.0
THREADS = False  # --threads: clients are threads of one process, not forked processes


HEADER = """# Store rendezvous: dlpg's TCP store, Redis, torch's TCPStore

Written by bench/store_scale.py. Each client: open the store, set its 64-byte address
(addr/RANK), add 1 to a counter, wait for all N addresses (one WAIT of N keys), get its
neighbour's address (checked), close: the all-gather Gloo's full-mesh rendezvous needs.
The time runs from the release of all clients (forked processes, or threads of one process)
to the last one's report. The machine (2 vCPUs) is shared with other jobs, so figures move
with its load; the harness-alone row shows how much of each is the clients' own start-up.
"""


def load_dlpg(path):
    lib = ctypes.CDLL(path)
    P = ctypes.c_void_p
    lib.dlpg_store_open.argtypes = [ctypes.c_char_p, ctypes.c_double, ctypes.POINTER(P)]
    lib.dlpg_store_set.argtypes = [P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.dlpg_store_get.argtypes = [P, ctypes.c_char_p, ctypes.c_double, ctypes.c_char_p,
                                   ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
    lib.dlpg_store_add.argtypes = [P, ctypes.c_char_p, ctypes.c_int64,
                                   ctypes.POINTER(ctypes.c_int64)]
    lib.dlpg_store_wait.argtypes = [P, ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t,
                                    ctypes.c_double]
    lib.dlpg_store_port.argtypes = [P, ctypes.POINTER(ctypes.c_int)]
    lib.dlpg_store_close.argtypes = [P]
    lib.dlpg_last_error.restype = ctypes.c_char_p
    return lib


class DlpgClient:
    def __init__(self, lib, url):
        self.lib = lib
        self.s = ctypes.c_void_p()
        self.check(lib.dlpg_store_open(url.encode(), TIMEOUT, ctypes.byref(self.s)), "open")

    def check(self, st, what):
        if st != 0:
            raise RuntimeError("%s: %s" % (what, self.lib.dlpg_last_error().decode()))

    def set(self, k, v):
        self.check(self.lib.dlpg_store_set(self.s, k.encode(), v, len(v)), "set")

    def add(self, k, d):
        r = ctypes.c_int64()
        self.check(self.lib.dlpg_store_add(self.s, k.encode(), d, ctypes.byref(r)), "add")

    def wait(self, keys):
        arr = (ctypes.c_char_p * len(keys))(*[k.encode() for k in keys])
        self.check(self.lib.dlpg_store_wait(self.s, arr, len(keys), TIMEOUT), "wait")

    def get(self, k):
        buf = ctypes.create_string_buffer(256)
        n = ctypes.c_size_t()
        self.check(self.lib.dlpg_store_get(self.s, k.encode(), TIMEOUT, buf, 256,
                                           ctypes.byref(n)), "get")
        return buf.raw[:n.value]

    def close(self):
        self.lib.dlpg_store_close(self.s)


class TorchClient:
    def __init__(self, port, n):
        import torch.distributed as dist
        self.s = dist.TCPStore("127.0.0.1", port, n + 1, False,
                               timeout=datetime.timedelta(seconds=TIMEOUT))

    def set(self, k, v):
        self.s.set(k, v)

    def add(self, k, d):
        self.s.add(k, d)

    def wait(self, keys):
        self.s.wait(keys)

    def get(self, k):
        return self.s.get(k)

    def close(self):
        pass


class NoClient:
    """The harness alone (fork, release, report): what every row below includes."""

    def set(self, k, v):
        pass

    def add(self, k, d):
        pass

    def wait(self, keys):
        pass

    def get(self, k):
        return value(int(k.split("/")[1]))

    def close(self):
        pass


def value(rank):
    return ("rank-%06d-" % rank).encode().ljust(64, b"x")


def client(make, rank, n, go_r, done_w):
    """The body of one forked client: wait for the start signal, rendezvous, report."""
    ok = b"1"
    try:
        os.read(go_r, 1)
        c = make()
        c.set("addr/%d" % rank, value(rank))
        c.add("arrived", 1)
        c.wait(["addr/%d" % i for i in range(n)])
        if c.get("addr/%d" % ((rank + 1) % n)) != value((rank + 1) % n):
            ok = b"0"
        c.close()
    except Exception as e:  # reported as a failed client
        sys.stderr.write("client %d: %s\n" % (rank, e))
        ok = b"0"
    os.write(done_w, ok)
    os._exit(0)


def run(make, n):
    """Fork n clients (threads with --threads), release them together, return (seconds,
    failures)."""
    if THREADS:
        return run_threads(make, n)
    go_r, go_w = os.pipe()
    done_r, done_w = os.pipe()
    pids = []
    for rank in range(n):
        pid = os.fork()
        if pid == 0:
            os.close(go_w)
            os.close(done_r)
            client(make, rank, n, go_r, done_w)
        pids.append(pid)
    os.close(go_r)
    os.close(done_w)
    time.sleep(0.5)  # every child is at its read
    t0 = time.perf_counter()
    os.write(go_w, b"g" * n)
    got = b""
    while len(got) < n:
        chunk = os.read(done_r, n - len(got))
        if not chunk:
            break
        got += chunk
    dt = time.perf_counter() - t0
    for pid in pids:
        os.waitpid(pid, 0)
    os.close(go_w)
    os.close(done_r)
    return dt, n - got.count(b"1")


def run_threads(make, n):
    """The same rendezvous by n threads of this process (each with its own store client):
    no fork or process wake-ups in the time, so the stores' own costs show. Store calls of
    both dlpg (ctypes) and torch (pybind) release the GIL while they wait."""
    import threading
    go = threading.Event()
    fails = [0]
    done = threading.Semaphore(0)

    def body(rank):
        try:
            go.wait()
            c = make()
            c.set("addr/%d" % rank, value(rank))
            c.add("arrived", 1)
            c.wait(["addr/%d" % i for i in range(n)])
            if c.get("addr/%d" % ((rank + 1) % n)) != value((rank + 1) % n):
                fails[0] += 1
            c.close()
        except Exception as e:  # reported as a failed client
            sys.stderr.write("client %d: %s\n" % (rank, e))
            fails[0] += 1
        done.release()

    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    t0 = time.perf_counter()
    go.set()
    for _ in range(n):
        done.acquire()
    dt = time.perf_counter() - t0
    for t in threads:
        t.join()
    return dt, fails[0]


def start_redis():
    """A redis-server on a random port: it cannot report a port it picked itself, so a
    server that exits (its port was taken) is started again on another one."""
    exe = shutil.which("redis-server")
    if not exe:
        return None, None
    rng = random.SystemRandom()
    for _ in range(20):
        port = rng.randrange(20000, 32768)  # below Linux's ephemeral range
        proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--maxclients", "4096"],
                                stdout=subprocess.DEVNULL)
        for _ in range(500):
            if proc.poll() is not None:
                break  # exited: the port was taken
            try:
                socket.create_connection(("127.0.0.1", port), 0.1).close()
                return proc, port
            except OSError:
                time.sleep(0.01)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return None, None


def run_one(lib, kind, n):
    """One timed rendezvous of n clients on a fresh store of the given kind; (seconds,
    failed clients), or (None, 0) when the kind is unavailable (no redis-server)."""
    import torch.distributed as dist
    if kind is None:
        return run(NoClient, n)
    if kind in ("tcp", "tcp-token"):
        token = "bench-secret" if kind == "tcp-token" else None
        srv = ctypes.c_void_p()
        url = "tcp://127.0.0.1:0?serve=1" + ("&token=" + token if token else "")
        assert lib.dlpg_store_open(url.encode(), TIMEOUT, ctypes.byref(srv)) == 0, \
            lib.dlpg_last_error()
        port = ctypes.c_int()
        lib.dlpg_store_port(srv, ctypes.byref(port))
        curl = "tcp://127.0.0.1:%d" % port.value + ("?token=" + token if token else "")
        out = run(lambda: DlpgClient(lib, curl), n)
        lib.dlpg_store_close(srv)
        return out
    if kind == "redis":
        proc, rport = start_redis()
        if not proc:
            return None, 0
        rurl = "redis://127.0.0.1:%d" % rport
        out = run(lambda: DlpgClient(lib, rurl), n)
        proc.terminate()
        proc.wait()
        return out
    master = dist.TCPStore("127.0.0.1", 0, n + 1, True,
                           timeout=datetime.timedelta(seconds=TIMEOUT), wait_for_workers=False)
    tport = master.port  # port 0: the kernel's pick, read back
    out = run(lambda: TorchClient(tport, n), n)
    del master
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, nargs="+", default=[1024])
    ap.add_argument("--out", help="markdown file for the table")
    ap.add_argument("--repeat", type=int, default=3, help="rounds (the table shows the median)")
    ap.add_argument("--append", action="store_true", help="add to --out instead of replacing it")
    ap.add_argument("--threads", action="store_true",
                    help="clients are threads of this process instead of forked processes")
    ap.add_argument("--lib", default=os.environ.get("DLPG_LIBRARY", "build/libdlpg.so"))
    args = ap.parse_args()
    global THREADS
    THREADS = args.threads
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # servers here hold N sockets
    lib = load_dlpg(args.lib)
    import torch

    backends = [("(no store: the harness alone)", None), ("dlpg tcp://", "tcp"),
                ("dlpg tcp:// + token", "tcp-token"), ("dlpg redis:// (redis-server)", "redis"),
                ("torch TCPStore %s" % torch.__version__, "torch")]
    rows = []
    for n in args.clients:
        times = {name: [] for name, _ in backends}
        fails = {name: 0 for name, _ in backends}
        # Rounds interleave the stores, so a burst of other load hits all of them alike.
        for _ in range(args.repeat):
            for name, kind in backends:
                dt, f = run_one(lib, kind, n)
                if dt is None:
                    continue
                times[name].append(dt)
                fails[name] += f
                print("%5d clients  %-32s %8.3f s  failures %d" % (n, name, dt, f), flush=True)
        for name, _ in backends:
            if times[name]:
                rows.append((n, name, statistics.median(times[name]), min(times[name]),
                             fails[name]))

    how = "threads of one process" if args.threads else "forked processes"
    lines = ["## %s clients as %s" % (" and ".join(map(str, args.clients)), how),
             "",
             "Command: `DLPG_LIBRARY=%s /usr/bin/python3 bench/store_scale.py --clients %s "
             "--repeat %d%s`" % (args.lib, " ".join(map(str, args.clients)), args.repeat,
                                 " --threads" if args.threads else ""),
             "Date: %s. Machine: %s, %d CPUs, %s, Python %s." %
             (datetime.date.today(), cpu_model("unknown CPU"), os.cpu_count(),
              platform.platform(), platform.python_version()),
             "",
             "Median and best of %d rounds, the stores interleaved within each round. The "
             "first row is the harness alone (%s, release, report), included in every other "
             "row." % (args.repeat, "start threads" if args.threads else "fork"),
             "",
             "| clients | store | median s | best s | failed clients (all rounds) |",
             "|---:|---|---:|---:|---:|"]
    for n, name, med, best, fails in rows:
        lines.append("| %d | %s | %.3f | %.3f | %d |" % (n, name, med, best, fails))
    text = "\n".join(lines) + "\n"
    if args.out:
        fresh = not args.append or not os.path.exists(args.out)
        with open(args.out, "w" if fresh else "a") as f:
            if fresh:
                f.write(HEADER)
            f.write("\n" + text)
    print(text)
    return 0 if all(r[4] == 0 for r in rows) else 1



if __name__ == "__main__":
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    sys.exit(main())
