#!/usr/bin/env python3
"""Markdown tables of dlpg against its NCCL baseline from dlpg-bench JSON files
(bench/run-gpu-bench.sh writes one per operation), with the GPU targets checked per row:

  - bandwidth: dlpg busbw >= 0.98 x the baseline's, from 32 MiB to 1 GiB;
  - latency:   dlpg time <= the baseline's + 1 us, from 8 B to 64 KiB.

Each row in a target's range says PASS or MISS; other rows say '-'.
Usage: gpu_table.py [-o table.md] [--strict] FILE.json...   (--strict: exit 1 on any MISS)
"""
import argparse
import sys

from bench_util import fmt_size, load_json_docs

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
BW_RANGE, BW_RATIO = (32 * MIB, 1 * GIB), 0.98
LAT_RANGE, LAT_SLACK_US = (8, 64 * KIB), 1.0
OP_ORDER = ["allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "alltoall",
            "sendrecv"]


def verdict(size, d, b):
    """(target name, PASS/MISS) for a row, or ('', '-') outside both ranges."""
    if not (d and b and d.get("ok") and b.get("ok")):
        return "", "-" if not (d and b) else "MISS"
    if BW_RANGE[0] <= size <= BW_RANGE[1]:
        ok = d["busbw_GBps"] >= BW_RATIO * b["busbw_GBps"]
        return "busbw >= %.2fx" % BW_RATIO, "PASS" if ok else "MISS"
    if LAT_RANGE[0] <= size <= LAT_RANGE[1]:
        ok = d["time_us"] <= b["time_us"] + LAT_SLACK_US
        return "time <= +%g us" % LAT_SLACK_US, "PASS" if ok else "MISS"
    return "", "-"


def table(doc):
    head = "### %s, %s, %d rank(s) x %d GPU(s) (%s)" % (
        doc["op"], doc["dtype"], doc["ranks"], doc["gpus_per_rank"], doc.get("date", "?"))
    out = [head, "",
           "first op incl. communicator creation: dlpg %.0f us, baseline %.0f us" % (
               doc.get("first_op_us", -1), doc.get("baseline_first_op_us", -1)), "",
           "| size | dlpg time (us) | nccl time (us) | time diff (us) | dlpg busbw (GB/s) | "
           "nccl busbw (GB/s) | busbw ratio | #wrong (dlpg/nccl) | target | result |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    npass = nmiss = 0
    for row in doc["rows"]:
        d, b = row.get("dlpg"), row.get("baseline")
        target, res = verdict(row["size"], d, b)
        npass += res == "PASS"
        nmiss += res == "MISS"

        def cell(r, key, f="%.2f"):
            return f % r[key] if r and r.get("ok") else ("failed" if r else "-")
        diff = "%.2f" % (d["time_us"] - b["time_us"]) if d and b and d["ok"] and b["ok"] else "-"
        ratio = ("%.3f" % (d["busbw_GBps"] / b["busbw_GBps"])
                 if d and b and d["ok"] and b["ok"] and b["busbw_GBps"] > 0 else "-")
        wrong = "%s/%s" % (d["wrong"] if d else "-", b["wrong"] if b else "-")
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            fmt_size(row["size"]), cell(d, "time_us"), cell(b, "time_us"), diff,
            cell(d, "busbw_GBps", "%.1f"), cell(b, "busbw_GBps", "%.1f"), ratio, wrong,
            target, res))
    out += ["", "%s: %d PASS, %d MISS" % (doc["op"], npass, nmiss), ""]
    return out, npass, nmiss


def main():
    ap = argparse.ArgumentParser(description="dlpg vs NCCL target table")
    ap.add_argument("files", nargs="+")
    ap.add_argument("-o", "--out")
    ap.add_argument("--strict", action="store_true")
    a = ap.parse_args()
    docs = load_json_docs(a.files, "gpu_table")
    docs.sort(key=lambda d: OP_ORDER.index(d["op"]) if d.get("op") in OP_ORDER else 99)
    lines = ["# dlpg vs NCCL (same process, same buffers, interleaved per size)", "",
             "Targets: busbw >= %.2fx baseline from %s to %s; time <= baseline + %g us from "
             "%s to %s." % (BW_RATIO, fmt_size(BW_RANGE[0]), fmt_size(BW_RANGE[1]),
                            LAT_SLACK_US, fmt_size(LAT_RANGE[0]), fmt_size(LAT_RANGE[1])), ""]
    tp = tm = 0
    for doc in docs:
        if not doc.get("baseline") or not doc.get("dlpg", True):
            print("gpu_table: %s has no dlpg+baseline pair; skipped" % doc.get("op"),
                  file=sys.stderr)
            continue
        t, p, m = table(doc)
        lines += t
        tp += p
        tm += m
    lines.append("**Total: %d PASS, %d MISS**" % (tp, tm))
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 1 if a.strict and tm else 0


if __name__ == "__main__":
    sys.exit(main())
