#!/usr/bin/python3
"""The file-level dependency graph of plugin/, read from the built objects and the sources.

A file depends on another when it uses a symbol the other defines (nm: an undefined symbol of
one object that another object of the same library defines) or when it #includes it. Each
library is its own link unit: libdlpg.so's objects resolve among themselves, the NCCL
module's among its own (it links no part of core).

Headers are nodes of their own. A header holds declarations and types; it depends on the
headers it includes, never on a source, so an #include is an edge to the header and a use of
a definition an edge to the source that defines it. (Counted as part of the source of the
same stem, a header such as core/group.h, whose struct both sides of a call read, would put
every file that reads the struct on a circle with every file its source calls: a circle of
the merge, not of the code.) A file and its own header therefore never make a circle; two
headers that include each other, or two sources that use each other's definitions, do.

Prints the file graph and the folder graph (a folder is plugin/'s first path component),
then every circle: a strongly connected component of more than one file, or of more than one
folder. Exit status 1 when there is a circle, unless --report.

Usage: file_graph.py [--report] [--quiet] [--layers] [--drop FROM=TO ...] --root DIR --unit NAME=OBJDIR ...
"""
import argparse
import os
import re
import subprocess
import sys

INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# nm -P types: defined strong, defined weak (may be emitted by several objects: an inline
# function or a template instance; it names its definer only when one object defines it),
# undefined.
STRONG = set("TDBRGSCi")
WEAK = set("WVu")
UNDEF = set("Uwv")


def plugin_rel(root, path):
    return os.path.relpath(path, os.path.join(root, "plugin"))


def objects(root, objdir):
    """(object path, source path relative to plugin/) for each plugin object under objdir."""
    out = []
    for d, _, files in os.walk(objdir):
        for f in files:
            if not f.endswith(".o"):
                continue
            obj = os.path.join(d, f)
            rel = os.path.relpath(obj, objdir)[:-2]  # plugin/core/group.c
            if rel.startswith("plugin/") and os.path.exists(os.path.join(root, rel)):
                out.append((obj, rel[len("plugin/"):]))
    return sorted(out)


def nm_symbols(obj):
    """(defined strong, defined weak, undefined) global symbol names of one object, mangled."""
    text = subprocess.run(["nm", "-P", obj], check=True, capture_output=True, text=True).stdout
    strong, weak, undef = set(), set(), set()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind in STRONG:
            strong.add(name)
        elif kind in WEAK:
            weak.add(name)
        elif kind in UNDEF:
            undef.add(name)
    return strong, weak, undef


def demangle(names):
    if not names:
        return {}
    res = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    if res.returncode != 0:
        return {n: n for n in names}
    return dict(zip(names, res.stdout.splitlines()))


class Graph:
    def __init__(self):
        self.nodes = set()
        self.edges = {}  # (from, to) -> {"sym": set(), "inc": bool}

    def add(self, a, b, sym=None, inc=False):
        self.nodes.update((a, b))
        if a == b:
            return  # a file using itself (or its own header) is no dependency
        e = self.edges.setdefault((a, b), {"sym": set(), "inc": False})
        if sym:
            e["sym"].add(sym)
        e["inc"] = e["inc"] or inc

    def succ(self):
        s = {n: [] for n in self.nodes}
        for a, b in self.edges:
            s[a].append(b)
        for n in s:
            s[n].sort()
        return s


def sccs(nodes, succ):
    """Tarjan's strongly connected components (iterative), each sorted; larger than one."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on.add(v)
            recurse = False
            for j in range(i, len(succ[v])):
                w = succ[v][j]
                if w not in index:
                    work.append((v, j + 1))
                    work.append((w, 0))
                    recurse = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if recurse:
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
    return sorted(out, key=lambda c: (c[0].split("/")[0], -len(c), c))


def folder(node):
    return node.split("/")[0]


def reason(e, names, limit=3):
    parts = []
    if e["sym"]:
        syms = sorted(names.get(s, s) for s in e["sym"])
        shown = ", ".join(syms[:limit]) + (", ..." if len(syms) > limit else "")
        parts.append("%d symbol%s: %s" % (len(syms), "" if len(syms) == 1 else "s", shown))
    if e["inc"]:
        parts.append("#include")
    return "; ".join(parts)


def print_layers(g, succ, circles):
    """Each folder's sources by layer (files of one circle share a layer, marked *)."""
    comp = {n: (n,) for n in g.nodes}
    for c in circles:  # a circle's files within one folder
        for n in c:
            comp[n] = tuple(m for m in c if folder(m) == folder(n))
    memo = {}

    def layer(c):
        if c not in memo:
            memo[c] = 0  # a circle's own edges do not raise it
            deps = {comp[t] for n in c for t in succ[n]
                    if folder(t) == folder(n) and not t.endswith(".h") and comp[t] != c}
            memo[c] = 1 + max((layer(d) for d in deps), default=-1)
        return memo[c]

    print("layers of plugin/ (sources, bottom up; * on a circle)")
    for f in sorted({folder(n) for n in g.nodes}):
        rows = {}
        for n in sorted(g.nodes):
            if folder(n) == f and not n.endswith(".h"):
                on_circle = any(n in c for c in circles)
                rows.setdefault(layer(comp[n]), []).append(
                    n.split("/", 1)[1] + ("*" if on_circle else ""))
        for k in sorted(rows):
            print("  %-9s %2d  %s" % (f if k == min(rows) else "", k, " ".join(rows[k])))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", required=True, help="the repository root")
    ap.add_argument("--unit", action="append", required=True,
                    help="NAME=OBJDIR: the object files of one library")
    ap.add_argument("--report", action="store_true", help="print the circles, exit 0")
    ap.add_argument("--quiet", action="store_true", help="print the circles only")
    ap.add_argument("--layers", action="store_true",
                    help="also print each folder's sources bottom up: a source's layer is one "
                         "above the highest of the sources of its folder it uses")
    ap.add_argument("--drop", action="append", default=[], metavar="FROM=TO",
                    help="leave out the edge FROM -> TO (files relative to plugin/): shows what "
                         "remains once a cut under way elsewhere lands")
    args = ap.parse_args()
    root = os.path.abspath(args.root)

    g = Graph()
    sources = set()
    names = {}
    for unit in args.unit:
        uname, _, objdir = unit.partition("=")
        objs = objects(root, objdir)
        if not objs:
            sys.exit("file_graph.py: no plugin objects under %s (%s); build first" % (objdir, uname))
        strong_def, weak_def, uses = {}, {}, {}
        for obj, rel in objs:
            sources.add(rel)
            g.nodes.add(rel)
            s, w, u = nm_symbols(obj)
            for n in s:
                strong_def.setdefault(n, set()).add(rel)
            for n in w:
                weak_def.setdefault(n, set()).add(rel)
            uses[rel] = u
        definer = {}
        for n, files in weak_def.items():
            if len(files) == 1:
                definer[n] = next(iter(files))
        for n, files in strong_def.items():
            if len(files) > 1:
                sys.exit("file_graph.py: %s is defined in %s (%s)" % (n, ", ".join(sorted(files)), uname))
            definer[n] = next(iter(files))
        used = set()
        for rel, u in uses.items():
            for n in u:
                if n in definer:
                    g.add(rel, definer[n], sym=n)
                    used.add(n)
        names.update(demangle(sorted(n for n in used if n.startswith("_Z"))))

    # #include edges, from every compiled source and every header it reaches.
    todo = sorted(sources)
    seen = set(todo)
    while todo:
        rel = todo.pop()
        path = os.path.join(root, "plugin", rel)
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for inc in INCLUDE_RE.findall(text):
            target = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
            if not os.path.exists(os.path.join(root, "plugin", target)):
                target = inc  # "core/group.h": relative to plugin/
            if not os.path.exists(os.path.join(root, "plugin", target)):
                continue  # dlpg/dlpg.h (the public header), a system or third-party header
            g.add(rel, target, inc=True)
            if target not in seen:
                seen.add(target)
                todo.append(target)

    for d in args.drop:
        a, _, b = d.partition("=")
        if g.edges.pop((a, b), None) is None:
            sys.exit("file_graph.py: --drop %s: no such edge" % d)
        print("file_graph: leaving out %s -> %s (--drop)" % (a, b))

    succ = g.succ()
    fg = Graph()  # folder -> folder; each edge counts the file edges that make it
    nfiles = {}
    for (a, b) in g.edges:
        fg.add(folder(a), folder(b))
        if folder(a) != folder(b):
            nfiles[(folder(a), folder(b))] = nfiles.get((folder(a), folder(b)), 0) + 1
    fsucc = fg.succ()

    if not args.quiet:
        print("file graph of plugin/ (file -> files it uses; s = symbols used, i = #include)")
        for n in sorted(g.nodes):
            outs = []
            for t in succ[n]:
                e = g.edges[(n, t)]
                tag = ("s%d" % len(e["sym"]) if e["sym"] else "") + ("i" if e["inc"] else "")
                outs.append("%s[%s]" % (t, tag))
            print("  %-28s -> %s" % (n, " ".join(outs) if outs else "(nothing)"))
        print("folder graph of plugin/ (folder -> folder: file edges)")
        for (a, b) in sorted(fg.edges):
            print("  %-9s -> %-9s %3d" % (a, b, nfiles[(a, b)]))

    file_circles = sccs(g.nodes, succ)
    if args.layers:
        print_layers(g, succ, file_circles)
    folder_circles = sccs(fg.nodes, fsucc)
    for comp in file_circles:
        members = set(comp)
        print("circle between %d files: %s" % (len(comp), " ".join(comp)))
        for a in comp:
            for b in succ[a]:
                if b in members:
                    print("    %s -> %s (%s)" % (a, b, reason(g.edges[(a, b)], names)))
    for comp in folder_circles:
        members = set(comp)
        print("circle between %d folders: %s" % (len(comp), " ".join(comp)))
        for a in comp:
            for b in fsucc[a]:
                if b in members:
                    files = sorted("%s -> %s" % (x, y) for (x, y) in g.edges
                                   if folder(x) == a and folder(y) == b)
                    shown = ", ".join(files[:4]) + (", ..." if len(files) > 4 else "")
                    print("    %s -> %s (%d file edge%s: %s)" % (a, b, len(files),
                                                            "" if len(files) == 1 else "s", shown))
    n = len(file_circles) + len(folder_circles)
    if n == 0:
        print("file_graph: %d files, %d edges, no circle between files or folders: OK"
              % (len(g.nodes), len(g.edges)))
        return 0
    print("file_graph: %d files, %d edges, %d circle%s between files, %d between folders%s"
          % (len(g.nodes), len(g.edges), len(file_circles), "" if len(file_circles) == 1 else "s",
             len(folder_circles), " (report only)" if args.report else ""))
    return 0 if args.report else 1


if __name__ == "__main__":
    sys.exit(main())
