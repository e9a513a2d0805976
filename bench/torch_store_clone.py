#!/usr/bin/env python3
"""torch's TCPStore.clone() alone, no process group: N processes on this host, one store on
loopback (rank 0 serves), 5 rounds of (all ranks meet on a counter, then each clones its
store client and times the call). ProcessGroup.split_group clones the default store before
it calls any backend, so a stall here is in every split_group's time whatever the backend.
The 5 s stalls seen on the 2-core VM are glibc's resolver retry: TCPStore looks up the
peer's name at each connection (client and server), and that VM's resolver drops some of
those queries; run it under `unshare -n` (loopback only) to see the clone without them.

    python3 bench/torch_store_clone.py [--ranks 8] [--rounds 5]

Prints each rank's clone times in ms, one line per rank."""

import argparse
import datetime
import multiprocessing as mp
import time


def _rank(r, n, port, rounds, q):
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", port, n, False, datetime.timedelta(seconds=60))
    ts = []
    for i in range(rounds):
        store.add("meet%d" % i, 1)
        while int(store.add("meet%d" % i, 0)) < n:
            time.sleep(0.001)
        t0 = time.perf_counter()
        c = store.clone()
        ts.append(time.perf_counter() - t0)
        c.set("cloned%d" % r, "1")
    q.put((r, ts))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    import torch.distributed as dist
    server = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=60),
                           wait_for_workers=False)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=_rank, args=(r, a.ranks, server.port, a.rounds, q))
          for r in range(a.ranks)]
    for p in ps:
        p.start()
    res = dict(q.get(timeout=120) for _ in ps)
    for p in ps:
        p.join(30)
    for r in sorted(res):
        print("rank %d: clone ms %s" % (r, " ".join("%.1f" % (1e3 * t) for t in res[r])))


if __name__ == "__main__":
    main()
