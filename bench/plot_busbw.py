#!/usr/bin/env python3
"""Bus bandwidth against message size, dlpg and its NCCL baseline per operation, from
dlpg-bench JSON files (bench/run-gpu-bench.sh writes one per operation), as one PNG.
Usage: plot_busbw.py [-o busbw.png] FILE.json...
"""
import argparse
import sys

import matplotlib
matplotlib.use("Agg")  # no display on the GPU machine
import matplotlib.pyplot as plt  # noqa: E402

from bench_util import load_json_docs  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("-o", "--out", default="busbw.png")
    a = ap.parse_args()
    docs = load_json_docs(a.files, "plot_busbw")
    if not docs:
        print("plot_busbw: no data", file=sys.stderr)
        return 1
    fig, ax = plt.subplots(figsize=(10, 6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, doc in enumerate(docs):
        c = colors[i % len(colors)]
        for key, style, label in (("dlpg", "-", "dlpg"), ("baseline", "--", "nccl")):
            pts = [(r["size"], r[key]["busbw_GBps"]) for r in doc["rows"]
                   if key in r and r[key].get("ok")]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, style, color=c, marker="o" if key == "dlpg" else "x",
                        markersize=3, label="%s %s" % (doc["op"], label))
    d0 = docs[0]
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes, nccl-tests convention)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title("dlpg vs NCCL, %s, %d rank(s) x %d GPU(s), %s" % (
        d0.get("dtype", "?"), d0.get("ranks", 0), d0.get("gpus_per_rank", 0),
        d0.get("date", "")))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(a.out, dpi=120)
    print("plot_busbw: wrote %s" % a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
