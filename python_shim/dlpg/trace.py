"""Read the flight-record dumps of all ranks and say which rank stopped where.

    python -m dlpg.trace DIR [DIR_OR_FILE ...]

Each rank of a group writes <group>.<rank>.json into DLPG_FLIGHT_RECORDER_DUMP on a timeout,
an abort or a peer's failure (docs/debugging.md lists the fields). This reads every *.json
dump it is given (files, or the *.json files of directories), groups them by group name and
prints, per group: which ranks' dumps are missing, the collective the furthest ranks were
waiting in, which ranks had not reached it and which called it late (by their own dumps:
a rank that issued it more than a second after the first, slow outside dlpg), the point-to-point
operations still pending, and each rank's reason for dumping. It says only what the dumps
show: a rank without a dump may have stopped anywhere.

Standard library only, so it runs where the dumps are copied to, without the library.
"""

import argparse
import glob
import json
import os
import sys

FORMAT = "dlpg-flight-record"
PENDING = ("queued", "started", "enqueued")


def _ranks(rs):
    return ",".join(str(r) for r in sorted(rs))


def _plural(rs, one, many):
    return ("%s %s" % (many, _ranks(rs))) if len(rs) > 1 else ("%s %s" % (one, _ranks(rs)))


def load(paths):
    """The dumps under paths: (list of dicts, list of (path, problem))."""
    files, problems = [], []
    for p in paths:
        if os.path.isdir(p):
            files.extend(sorted(glob.glob(os.path.join(p, "*.json"))))
        elif os.path.exists(p):
            files.append(p)
        else:
            problems.append((p, "no such file or directory"))
    dumps = []
    for f in files:
        try:
            with open(f, "rb") as fh:
                d = json.loads(fh.read().decode("utf-8", "replace"))
        except (OSError, ValueError) as e:
            problems.append((f, "not a readable JSON file (%s)" % e))
            continue
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            problems.append((f, "not a dlpg flight record"))
            continue
        d["_path"] = f
        dumps.append(d)
    return dumps, problems


def describe(op):
    """ "allreduce float32 x1024" for an op entry (None: the ring no longer holds it)."""
    if op is None:
        return None
    text = op.get("kind") or "?"
    if op.get("dtype"):
        text += " %s x%s" % (op["dtype"], op.get("count"))
    if op.get("seq_kind") == "p2p" and op.get("peer") is not None:
        text += " %s rank %d" % ("to" if op.get("kind") == "send" else "from", op["peer"])
    elif op.get("peer") is not None:
        text += " root %d" % op["peer"]
    return text


def _coll_op(d, seq):
    for op in d.get("ops", []):
        if op.get("seq_kind") == "coll" and op.get("seq") == seq:
            return op
    return None


# A rank that issued a collective this much later than the first rank is named as late.
LATE_S = 1.0


def _issued(d, seq):
    op = _coll_op(d, seq)
    t = op.get("issued") if op else None
    return t if isinstance(t, (int, float)) else None


def _late_lines(dumps, seq, what, ranks):
    """ "rank 1 called coll_seq 5 (...) late: 12.5 s after rank 0, the first; ..." for each of
    ranks whose dump shows it issued coll_seq seq more than LATE_S after the first did (a
    rank slow outside dlpg: its peers waited for it). Issue times are each host's clock."""
    t = {r: _issued(dumps[r], seq) for r in ranks}
    t = {r: v for r, v in t.items() if v is not None}
    if len(t) < 2:
        return []
    first = min(t, key=lambda r: (t[r], r))
    lines = []
    for r in sorted(t):
        late = t[r] - t[first]
        if late <= LATE_S:
            continue
        prev = _issued(dumps[r], seq - 1) if seq > 1 else None
        lines.append("  rank %d called coll_seq %d%s late: %.1f s after rank %d, the first%s" %
                     (r, seq, " (%s)" % what if what else "", late, first,
                      "; its previous call, coll_seq %d, was %.1f s before that" %
                      (seq - 1, t[r] - prev) if prev is not None else ""))
    return lines


def analyse_group(name, dumps):
    """Lines describing one group's dumps (dumps: rank -> dump)."""
    lines = []
    size = max(int(d.get("size", 0)) for d in dumps.values())
    present = set(dumps)
    missing = [r for r in range(size) if r not in present]
    lines.append('group "%s": %d rank%s, dumps of %s' %
                 (name, size, "" if size == 1 else "s", _ranks(present)))
    if missing:
        lines.append("  %s wrote no dump, so where %s stopped is unknown (killed, or "
                     "DLPG_FLIGHT_RECORDER_DUMP not set there)" %
                     (_plural(missing, "rank", "ranks"), "it" if len(missing) == 1 else "they"))

    started = {r: int(d.get("progress", {}).get("coll_seq_started", 0)) for r, d in dumps.items()}
    top = max(started.values()) if started else 0
    if top > 0:
        waiting, done, behind = [], [], []
        state = {}
        for r, d in dumps.items():
            if started[r] < top:
                behind.append(r)
                continue
            op = _coll_op(d, top)
            st = op.get("state") if op else None
            if st == "done":
                done.append(r)
            else:
                waiting.append(r)
                state[r] = (st or "?", (op or {}).get("status"))
        what = None
        for r in sorted(dumps):
            what = describe(_coll_op(dumps[r], top))
            if what:
                break
        label = "coll_seq %d%s" % (top, " (%s)" % what if what else "")
        lines.extend(_late_lines(dumps, top, what, [r for r in dumps if r not in behind]))
        if behind:
            for r in sorted(behind):
                last = _coll_op(dumps[r], started[r])
                lastd = describe(last)
                t, dumped = _issued(dumps[r], started[r]), dumps[r].get("dumped_at")
                ago = (", issued %.1f s before its dump" % (dumped - t)
                       if t is not None and isinstance(dumped, (int, float)) else "")
                lines.append("  rank %d never reached %s; its last collective was coll_seq %d%s%s%s"
                             % (r, label, started[r], " (%s)" % lastd if lastd else "",
                                ", %s" % last.get("state") if last else "", ago))
        if waiting:
            states = sorted(set("state %s%s" % (s, ", %s" % st if st else "")
                                for s, st in state.values()))
            who = ("rank %s is" if len(waiting) == 1 else "ranks %s are") % _ranks(waiting)
            lines.append("  %s waiting in %s (%s)" %
                         (who, "it" if behind else label, "; ".join(states)))
        if done and not waiting and not behind:
            lines.append("  every dumped rank completed %s; no collective was pending" % label)
        elif done:
            lines.append("  %s completed %s" % (_plural(done, "rank", "ranks"), label))
        if missing and waiting:
            lines.append("  (the missing %s may be what %s waiting for)" %
                         (_plural(missing, "rank", "ranks"),
                          "it was" if len(waiting) == 1 else "they were"))

    for r in sorted(dumps):
        for op in dumps[r].get("ops", []):
            if op.get("seq_kind") != "p2p" or op.get("state") == "done":
                continue
            peer = op.get("peer")
            note = ""
            if peer is not None and peer not in present:
                note = "; rank %d wrote no dump" % peer
            lines.append("  rank %d: p2p_seq %d (%s) %s%s%s" %
                         (r, op.get("seq", 0), describe(op), op.get("state"),
                          ", %s" % op["status"] if op.get("status") else "", note))

    reasons = {}
    for r, d in dumps.items():
        reasons.setdefault(d.get("reason") or "?", []).append(r)
    for reason, rs in sorted(reasons.items(), key=lambda kv: min(kv[1])):
        lines.append("  %s dumped because: %s" % (_plural(rs, "rank", "ranks"), reason))
    return lines


def report(dumps):
    """The report's lines for a list of dumps."""
    groups = {}
    for d in dumps:
        groups.setdefault(d.get("group", "?"), {})[int(d.get("rank", -1))] = d
    lines = []
    for name in sorted(groups):
        lines.extend(analyse_group(name, groups[name]))
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m dlpg.trace",
                                 description="Which rank stopped where, from the flight-record "
                                             "dumps of DLPG_FLIGHT_RECORDER_DUMP.")
    ap.add_argument("paths", nargs="+", metavar="DIR_OR_FILE",
                    help="a dump directory, or dump files")
    args = ap.parse_args(argv)
    dumps, problems = load(args.paths)
    for path, why in problems:
        sys.stderr.write("dlpg.trace: %s: %s\n" % (path, why))
    if not dumps:
        sys.stderr.write("dlpg.trace: no flight-record dumps found in %s\n" % " ".join(args.paths))
        return 1
    for line in report(dumps):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
