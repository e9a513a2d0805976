#!/usr/bin/python3
"""The file-level dependency graph of plugin/, read from the built objects and the sources.

A file depends on another when it uses a symbol the other defines (nm: an undefined symbol of
one object that another object of the same library defines) or when it #includes it. Each
library is its own link unit: libdlpg.so's objects resolve among themselves, the NCCL
module's among its own (it links no part of core).

Headers are nodes of their own. A header holds declarations and types; it depends on the
headers it includes, never on a source, so an #include is an edge to the header and a use of
a definition an edge to the source that defines it. (Counted as part of the source of the
same stem, a header such as core/group/group.h, whose struct both sides of a call read, would put
every file that reads the struct on a circle with every file its source calls: a circle of
the merge, not of the code.) A file and its own header therefore never make a circle; two
headers that include each other, or two sources that use each other's definitions, do.

Folders come at two granularities. A top folder is plugin/'s first path component (core,
gloo, ...); a file in a sub-folder (plugin/core/exec/worker.c) belongs to it (core) for the
edges between top folders, and to its own folder (core/exec) for the edges inside its top
folder: a top folder split into sub-folders has a graph of its own, and its sub-folders get
their own --layers. A top folder may declare the order of its sub-folders (its rooms) in a
file (--rooms core=ci/core-rooms.txt, top to bottom): a file of a lower room must not use a
file of a higher one, every file of the folder must sit in a declared room, and every
declared room must exist. While the folder has no sub-folder the order is not checked (one
line says so), so the file can be written before the files move.

Prints the file graph and the folder graphs, then every circle: a strongly connected
component of more than one file, or of more than one folder (top folders, or sub-folders of
one top folder); then the rooms' verdict. Exit status 1 when there is a circle or a room is
out of order, unless --report.

Usage: file_graph.py [--report] [--quiet | --summary] [--layers] [--sizes] [--rooms FOLDER=FILE]
                     [--drop FROM=TO ...] --root DIR --unit NAME=OBJDIR ...
"""
import argparse
import os
import re
import subprocess
import sys

SOURCE_EXTS = (".c", ".cc", ".h")
ROOM_RE = re.compile(r"^[a-z0-9_]+$")
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
            rel = os.path.relpath(obj, objdir)[:-2]  # plugin/core/door/group.c
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
    """The top folder: plugin/'s first path component."""
    return node.split("/")[0]


def subfolder(node):
    """The folder the file sits in (core/exec for core/exec/worker.c, gloo for gloo/peers.cc)."""
    return os.path.dirname(node)


def read_rooms(path):
    """The rooms a rooms file declares, top to bottom: [(name, purpose)]. One room a line, its
    name then its purpose; blank lines and lines starting with # are left out."""
    rooms = []
    with open(path, encoding="utf-8") as f:
        for num, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, purpose = line.partition(" ")
            if not ROOM_RE.match(name) or any(name == r for r, _ in rooms):
                sys.exit("file_graph.py: %s:%d: %r is no room name or is declared twice"
                         % (path, num, name))
            rooms.append((name, purpose.strip()))
    return rooms


def source_files(root, top):
    """Every .c, .cc and .h file under plugin/<top>, relative to plugin/, sorted."""
    out = []
    for d, dirs, files in os.walk(os.path.join(root, "plugin", top)):
        dirs.sort()
        for f in files:
            if f.endswith(SOURCE_EXTS):
                out.append(plugin_rel(root, os.path.join(d, f)))
    return sorted(out)


def folder_key(rooms):
    """Sorts folders by name, the declared rooms of a top folder in their order (top first)."""
    def key(f):
        top, _, sub = f.partition("/")
        order = [r for r, _ in rooms.get(top, [])]
        return (top, sub != "", order.index(sub) if sub in order else len(order), sub)
    return key


def check_rooms(root, g, names, top, rooms_file, rooms):
    """The order of top's rooms: the lines to print and whether it holds."""
    files = source_files(root, top)
    label = "rooms of %s (%s)" % (top, rooms_file)
    if not any("/" in f[len(top) + 1:] for f in files):
        return ["%s: plugin/%s has no sub-folders yet: order not checked" % (label, top)], True
    rank = {r: i for i, (r, _) in enumerate(rooms)}
    out, ok = [], True

    def room(n):
        parts = n.split("/")
        return parts[1] if len(parts) > 2 and parts[0] == top else None

    for r, _ in rooms:
        if not os.path.isdir(os.path.join(root, "plugin", top, r)):
            out.append("%s: declared room %s/%s does not exist" % (label, top, r))
            ok = False
    for f in files:
        if room(f) not in rank:
            out.append("%s: %s sits in no declared room" % (label, f))
            ok = False
    bad = {}
    for (a, b), e in g.edges.items():
        ra, rb = room(a), room(b)
        if ra in rank and rb in rank and rank[ra] > rank[rb]:
            bad.setdefault((ra, rb), []).append("%s -> %s (%s)" % (a, b, reason(e, names)))
    for (ra, rb) in sorted(bad, key=lambda p: (rank[p[0]], rank[p[1]])):
        edges = sorted(bad[(ra, rb)])
        out.append("%s: %s/%s (lower) uses %s/%s (higher), %d file edge%s:"
                   % (label, top, ra, top, rb, len(edges), "" if len(edges) == 1 else "s"))
        out.extend("    " + e for e in edges)
        ok = False
    if ok:
        out.append("%s, top to bottom: %s: no room uses a room above it: OK"
                   % (label, " ".join(r for r, _ in rooms)))
    return out, ok


def print_sizes(root, rooms):
    """Files and lines (as wc -l counts them) of each folder and sub-folder of plugin/."""
    tops = sorted(d for d in os.listdir(os.path.join(root, "plugin"))
                  if os.path.isdir(os.path.join(root, "plugin", d)))
    count = {}
    for top in tops:
        for f in source_files(root, top):
            with open(os.path.join(root, "plugin", f), "rb") as fh:
                n = fh.read().count(b"\n")
            for k in {top, subfolder(f)}:
                c = count.setdefault(k, [0, 0])
                c[0] += 1
                c[1] += n
    total = [sum(count[t][0] for t in tops if t in count),
             sum(count[t][1] for t in tops if t in count)]
    width = max([len(k) for k in count] + [9])
    print("files and lines of plugin/ (.c, .cc, .h; lines as wc -l counts them)")
    for k in sorted(count, key=folder_key(rooms)):
        print("  %-*s %4d %6d" % (width, k, count[k][0], count[k][1]))
    print("  %-*s %4d %6d" % (width, "total", total[0], total[1]))


def reason(e, names, limit=3):
    parts = []
    if e["sym"]:
        syms = sorted(names.get(s, s) for s in e["sym"])
        shown = ", ".join(syms[:limit]) + (", ..." if len(syms) > limit else "")
        parts.append("%d symbol%s: %s" % (len(syms), "" if len(syms) == 1 else "s", shown))
    if e["inc"]:
        parts.append("#include")
    return "; ".join(parts)


def print_layers(g, succ, circles, rooms):
    """Each folder's sources by layer (files of one circle share a layer, marked *). A folder
    here is the one a file sits in, so each room of core has its own layers."""
    comp = {n: (n,) for n in g.nodes}
    for c in circles:  # a circle's files within one folder
        for n in c:
            comp[n] = tuple(m for m in c if subfolder(m) == subfolder(n))
    memo = {}

    def layer(c):
        if c not in memo:
            memo[c] = 0  # a circle's own edges do not raise it
            deps = {comp[t] for n in c for t in succ[n]
                    if subfolder(t) == subfolder(n) and not t.endswith(".h") and comp[t] != c}
            memo[c] = 1 + max((layer(d) for d in deps), default=-1)
        return memo[c]

    folders = sorted({subfolder(n) for n in g.nodes}, key=folder_key(rooms))
    width = max([len(f) for f in folders] + [9])
    print("layers of plugin/ (sources, bottom up; * on a circle)")
    for f in folders:
        rows = {}
        for n in sorted(g.nodes):
            if subfolder(n) == f and not n.endswith(".h"):
                on_circle = any(n in c for c in circles)
                rows.setdefault(layer(comp[n]), []).append(
                    os.path.basename(n) + ("*" if on_circle else ""))
        for k in sorted(rows):
            print("  %-*s %2d  %s" % (width, f if k == min(rows) else "", k, " ".join(rows[k])))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", required=True, help="the repository root")
    ap.add_argument("--unit", action="append", required=True,
                    help="NAME=OBJDIR: the object files of one library")
    ap.add_argument("--report", action="store_true", help="print the circles, exit 0")
    ap.add_argument("--quiet", action="store_true", help="print the circles only")
    ap.add_argument("--summary", action="store_true",
                    help="print the folder graphs, not the file graph")
    ap.add_argument("--layers", action="store_true",
                    help="also print each folder's sources bottom up: a source's layer is one "
                         "above the highest of the sources of its folder it uses (a folder: "
                         "the one the file sits in, so each room of core has its own)")
    ap.add_argument("--sizes", action="store_true",
                    help="also print the files and lines of each folder and sub-folder")
    ap.add_argument("--rooms", action="append", default=[], metavar="FOLDER=FILE",
                    help="the order of FOLDER's sub-folders, top to bottom, one a line in FILE: "
                         "a lower one must not use a higher one")
    ap.add_argument("--drop", action="append", default=[], metavar="FROM=TO",
                    help="leave out the edge FROM -> TO (files relative to plugin/): shows what "
                         "remains once a cut under way elsewhere lands")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    rooms, rooms_files = {}, {}
    for r in args.rooms:
        top, _, path = r.partition("=")
        rooms[top] = read_rooms(path)
        rooms_files[top] = path

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
                target = inc  # "core/group/group.h": relative to plugin/
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
    # Top folder -> top folder, and inside a top folder sub-folder -> sub-folder; each edge
    # counts the file edges that make it.
    fg, sg = Graph(), Graph()
    nfiles = {}
    for (a, b) in g.edges:
        fg.add(folder(a), folder(b))
        if folder(a) != folder(b):
            nfiles[(folder(a), folder(b))] = nfiles.get((folder(a), folder(b)), 0) + 1
        else:
            sg.add(subfolder(a), subfolder(b))
            if subfolder(a) != subfolder(b):
                nfiles[(subfolder(a), subfolder(b))] = nfiles.get((subfolder(a), subfolder(b)), 0) + 1
    fsucc, ssucc = fg.succ(), sg.succ()
    key = folder_key(rooms)

    if not args.quiet and not args.summary:
        print("file graph of plugin/ (file -> files it uses; s = symbols used, i = #include)")
        for n in sorted(g.nodes):
            outs = []
            for t in succ[n]:
                e = g.edges[(n, t)]
                tag = ("s%d" % len(e["sym"]) if e["sym"] else "") + ("i" if e["inc"] else "")
                outs.append("%s[%s]" % (t, tag))
            print("  %-28s -> %s" % (n, " ".join(outs) if outs else "(nothing)"))
    if not args.quiet:
        print("folder graph of plugin/ (folder -> folder: file edges)")
        for (a, b) in sorted(fg.edges):
            print("  %-9s -> %-9s %3d" % (a, b, nfiles[(a, b)]))
        for top in sorted({folder(a) for (a, _) in sg.edges}):
            print("folder graph inside %s/ (sub-folder -> sub-folder: file edges)" % top)
            inside = sorted((e for e in sg.edges if folder(e[0]) == top),
                            key=lambda e: (key(e[0]), key(e[1])))
            width = max(len(x) for e in inside for x in e)
            for (a, b) in inside:
                print("  %-*s -> %-*s %3d" % (width, a, width, b, nfiles[(a, b)]))
    if args.sizes:
        print_sizes(root, rooms)

    file_circles = sccs(g.nodes, succ)
    if args.layers:
        print_layers(g, succ, file_circles, rooms)
    # (circle, whether between the sub-folders of one top folder)
    folder_circles = [(c, False) for c in sccs(fg.nodes, fsucc)] + \
        [(c, True) for c in sccs(sg.nodes, ssucc)]
    for comp in file_circles:
        members = set(comp)
        print("circle between %d files: %s" % (len(comp), " ".join(comp)))
        for a in comp:
            for b in succ[a]:
                if b in members:
                    print("    %s -> %s (%s)" % (a, b, reason(g.edges[(a, b)], names)))
    for comp, inner in folder_circles:
        members = set(comp)
        fold = subfolder if inner else folder
        print("circle between %d folders: %s" % (len(comp), " ".join(comp)))
        for a in comp:
            for b in (ssucc if inner else fsucc)[a]:
                if b in members:
                    files = sorted("%s -> %s" % (x, y) for (x, y) in g.edges
                                   if fold(x) == a and fold(y) == b)
                    shown = ", ".join(files[:4]) + (", ..." if len(files) > 4 else "")
                    print("    %s -> %s (%d file edge%s: %s)" % (a, b, len(files),
                                                            "" if len(files) == 1 else "s", shown))
    rooms_ok = True
    for top in sorted(rooms):
        lines, ok = check_rooms(root, g, names, top, rooms_files[top], rooms[top])
        for line in lines:
            print(line)
        rooms_ok = rooms_ok and ok
    n = len(file_circles) + len(folder_circles)
    if n == 0 and rooms_ok:
        print("file_graph: %d files, %d edges, no circle between files or folders: OK"
              % (len(g.nodes), len(g.edges)))
        return 0
    print("file_graph: %d files, %d edges, %d circle%s between files, %d between folders%s%s"
          % (len(g.nodes), len(g.edges), len(file_circles), "" if len(file_circles) == 1 else "s",
             len(folder_circles), "" if rooms_ok else "; rooms not as declared (above)",
             " (report only)" if args.report else ""))
    return 0 if args.report else 1


if __name__ == "__main__":
    sys.exit(main())
