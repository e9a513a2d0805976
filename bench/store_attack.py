"""The store server's resource limits measured against a dlpg-store process, as an attacker on
the same machine would cause them (loopback only):
  amplification  8 connections pipeline GETs of one 64 MiB value and never read: peak RSS
                 of the server, and how long another client's small SET takes meanwhile
  quota          sixteen 64 MiB SETs: how many are accepted
  parked         16 connections park WAITs on 1 000 missing keys each (16 000 keys): median
                 GET latency of another client
  descriptors    the server under ulimit -n 1024, 1 100 idle connections: what a new client
                 gets (error or success) and how long it takes
  partial        N connections (--conns, 16 000) each send the first 5 bytes of a frame:
                 the server's RSS before and after, per connection
  lockout        DLPG_STORE_MAX_CONNS_PER_PEER (4 096) idle sockets from 127.0.0.1, then a
                 real client: served or refused, how long it takes, and after how long the
                 idle sockets are closed (DLPG_STORE_FIRST_FRAME_TIMEOUT_S)
Prints one line per figure (docs/security.md quotes them).

  DLPG_LIBRARY=build/libdlpg.so /usr/bin/python3 bench/store_attack.py --store build/tools/dlpg-store
"""
import argparse
import os
import resource
import socket
import statistics
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from store_scale import DlpgClient, load_dlpg  # noqa: E402


ARGS = None  # the command line (main)


def frame(t, fields):
    body = bytes([t]) + struct.pack(">I", len(fields)) + b"".join(
        struct.pack(">I", len(f)) + f for f in fields)
    return struct.pack(">I", len(body)) + body


def rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def cpu_s(pid):
    """User + system CPU seconds of pid so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(store, nofile=None, env=None):
    def limit():
        if nofile:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    p = subprocess.Popen([store, "--host", "127.0.0.1", "--port", "0"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, preexec_fn=limit,
                         env=dict(os.environ, **(env or {})))
    banner = p.stdout.readline().decode()
    port = int(banner.split("127.0.0.1:")[1].split()[0])
    return p, port


def raw(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.setblocking(True)
    return s


def amplification(lib, store):
    p, port = start(store)
    c = DlpgClient(lib, "tcp://127.0.0.1:%d" % port)
    c.set("big", b"v" * (64 << 20))
    base = rss_mb(p.pid)
    socks = []
    for _ in range(8):
        s = raw(port)
        s.settimeout(2.0)
        try:
            s.sendall(frame(2, [b"big"]) * 32)
        except OSError:
            pass
        socks.append(s)
    peak, t_set = base, []
    end = time.time() + 5
    while time.time() < end:
        peak = max(peak, rss_mb(p.pid))
        t0 = time.perf_counter()
        c.set("small", b"x")
        t_set.append(time.perf_counter() - t0)
        time.sleep(0.1)
    print("amplification: server RSS %.0f MB before, peak %.0f MB under 8 unread 64 MiB GET "
          "pipelines; small SET meanwhile: median %.1f ms, max %.1f ms"
          % (base, peak, statistics.median(t_set) * 1e3, max(t_set) * 1e3))
    for s in socks:
        s.close()
    c.close()
    p.terminate()
    p.wait()


def quota(lib, store):
    p, port = start(store)
    c = DlpgClient(lib, "tcp://127.0.0.1:%d" % port)
    ok = 0
    v = b"q" * (64 << 20)
    for i in range(16):
        try:
            c.set("blob/%d" % i, v)
            ok += 1
        except RuntimeError as e:
            last = str(e)
    print("quota: %d of 16 SETs of 64 MiB accepted; server RSS %.0f MB%s"
          % (ok, rss_mb(p.pid), "; refusal: " + last[:160] if ok < 16 else ""))
    c.close()
    p.terminate()
    p.wait()


def parked(lib, store, conns=16):
    # The per-peer limit would refuse 16 000 connections from one address: lift it here.
    p, port = start(store, nofile=20000, env={"DLPG_STORE_MAX_CONNS_PER_PEER": "20000"})
    c = DlpgClient(lib, "tcp://127.0.0.1:%d" % port)
    c.set("hot", b"v")

    def median_get_ms():
        """Median and p99 GET latency, and the server's CPU time per GET (robust to other
        load on the machine), over 20 000 GETs."""
        t = []
        cpu0 = cpu_s(p.pid)
        for _ in range(20000):
            t0 = time.perf_counter()
            c.get("hot")
            t.append(time.perf_counter() - t0)
        cpu = (cpu_s(p.pid) - cpu0) / len(t)
        return statistics.median(t) * 1e3, sorted(t)[int(len(t) * 0.99)] * 1e3, cpu * 1e3

    quiet = median_get_ms()
    socks = []
    if conns == 16:
        for cn in range(16):  # 16 connections, 1 000 keys each
            s = raw(port)
            keys = [("parked/%d/%d" % (cn, i)).encode() for i in range(1000)]
            s.sendall(frame(6, [struct.pack(">Q", 600000)] + keys))
            socks.append(s)
    else:
        for cn in range(16000):  # 16 000 connections, one key each
            s = raw(port)
            s.sendall(frame(6, [struct.pack(">Q", 600000), ("parked/%d" % cn).encode()]))
            socks.append(s)
    time.sleep(3.0)  # every WAIT parked (accepting 16 000 connections takes a moment)
    busy = median_get_ms()
    print("parked: dlpg_store_get median %.3f ms (p99 %.3f, server CPU %.3f ms "
          "per GET) with no parked keys; %.3f ms (p99 %.3f, server CPU %.3f ms per GET) with "
          "16 000 parked keys on %d connections" % (quiet + busy + (conns,)))
    for s in socks:
        s.close()
    c.close()
    p.terminate()
    p.wait()


def parked_conns(lib, store):
    parked(lib, store, conns=16000)


def descriptors(lib, store):
    p, port = start(store, nofile=1024)
    socks = []
    for _ in range(1100):
        try:
            socks.append(raw(port))
        except OSError:
            break
    time.sleep(0.3)
    t0 = time.perf_counter()
    try:
        c = DlpgClient(lib, "tcp://127.0.0.1:%d" % port)
        c.set("k", b"v")
        what = "served"
        c.close()
    except RuntimeError as e:
        what = "error: " + str(e)[:200]
    print("descriptors: ulimit -n 1024, %d idle connections opened; a new client after %.2f s: %s"
          % (len(socks), time.perf_counter() - t0, what))
    for s in socks:
        s.close()
    p.terminate()
    p.wait()


def settled_rss_mb(pid, port, lib):
    """RSS once the server has read everything sent so far: a client's round trip queues
    behind the earlier events, then RSS is sampled until it stops changing."""
    try:
        c = DlpgClient(lib, "tcp://127.0.0.1:%d" % port)
        c.set("sync", b"1")
        c.close()
    except RuntimeError:
        pass
    last = rss_mb(pid)
    for _ in range(50):
        time.sleep(0.2)
        now = rss_mb(pid)
        if now == last:
            break
        last = now
    return last


def partial(lib, store, conns=None):
    n = conns or ARGS.conns
    # Timeouts lifted so the measurement sees every connection still open.
    p, port = start(store, nofile=n + 1000,
                    env={"DLPG_STORE_MAX_CONNS_PER_PEER": str(n + 1000),
                         "DLPG_STORE_MAX_CONNS": str(n + 1000),
                         "DLPG_STORE_FRAME_TIMEOUT_S": "600",
                         "DLPG_STORE_FIRST_FRAME_TIMEOUT_S": "600"})
    five = struct.pack(">I", 1000) + b"\x01"  # a SET frame's length and type, then nothing
    socks = []
    for _ in range(100):  # warm-up: one-time structures belong to the baseline
        s = raw(port)
        s.sendall(five)
        socks.append(s)
    base = settled_rss_mb(p.pid, port, lib)
    t0 = time.perf_counter()
    for _ in range(n):
        s = raw(port)
        s.sendall(five)
        socks.append(s)
    took = time.perf_counter() - t0
    after = settled_rss_mb(p.pid, port, lib)
    alive = sum(1 for s in socks if not readable(s))
    print("partial: %d connections sending 5 bytes each (opened in %.1f s): server RSS %.1f MB "
          "-> %.1f MB, %.0f bytes per connection; %d of %d still open"
          % (n, took, base, after, (after - base) * 1048576 / n, alive, len(socks)))
    for s in socks:
        s.close()
    p.terminate()
    p.wait()


def readable(s):
    """Whether the server has answered or closed s (nothing is expected on a live one)."""
    import select
    p = select.poll()
    p.register(s, select.POLLIN)
    return bool(p.poll(0))


def lockout(lib, store):
    limit = 4096
    p, port = start(store, nofile=limit + 1000)
    socks = [raw(port) for _ in range(limit)]
    time.sleep(0.3)
    t0 = time.perf_counter()
    try:
        c = DlpgClient(lib, "tcp://127.0.0.1:%d" % port)
        c.set("k", b"v")
        what = "served"
        c.close()
    except RuntimeError as e:
        what = "error: " + str(e)[:200]
    took = time.perf_counter() - t0
    closed_by = None
    end = time.time() + 30
    t1 = time.perf_counter()
    while time.time() < end:
        if all(readable(s) for s in socks[1:]):
            closed_by = time.perf_counter() - t1
            break
        time.sleep(0.5)
    print("lockout: %d idle sockets from 127.0.0.1 (DLPG_STORE_MAX_CONNS_PER_PEER %d); a new "
          "client after %.3f s: %s; the idle sockets %s"
          % (limit, limit, took, what,
             "closed %.1f s later" % closed_by if closed_by is not None
             else "still open after 30 s"))
    for s in socks:
        s.close()
    p.terminate()
    p.wait()


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", default="build/tools/dlpg-store")
    ap.add_argument("--lib", default=os.environ.get("DLPG_LIBRARY", "build/libdlpg.so"))
    ap.add_argument("--only", nargs="*", default=["amplification", "quota", "parked",
                                                  "parked_conns", "descriptors", "partial",
                                                  "lockout"])
    ap.add_argument("--conns", type=int, default=16000, help="connections of 'partial'")
    args = ARGS = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    lib = load_dlpg(args.lib)
    for name in args.only:
        globals()[name](lib, args.store)


if __name__ == "__main__":
    main()
