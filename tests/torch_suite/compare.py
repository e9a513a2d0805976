"""Compares dlpg's outcomes of torch's DistributedTest with gloo's recorded ones: every test
gloo passes must pass on dlpg, except the deliberate exceptions tests/torch_suite/README.md
lists (a line "- `TEST` (world size N|all): reason" under its "## Exceptions" heading).

    python tests/torch_suite/compare.py --world-size 2 GLOO_LIST DLPG_LIST [DLPG_LIST...]

Several dlpg lists (shards of one run) are read as one. Exit status 1 when a test gloo passes
fails or skips on dlpg without an exception, or when a listed exception now passes (the list
would hide a regression nobody sees), or when the lists do not cover the same tests.
"""

import argparse
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def read_outcomes(paths):
    out = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#"):
                    name, outcome = line.split()[:2]
                    out[name] = outcome
    return out


def read_exceptions(world_size, readme=os.path.join(HERE, "README.md")):
    """{test: reason} for this world size, from the README's "## Exceptions" section."""
    out, inside = {}, False
    with open(readme) as f:
        for line in f:
            if line.startswith("## "):
                inside = line.strip() == "## Exceptions"
                continue
            m = inside and re.match(r"- `(test_\w+)` \((world size (\d+)|all)\): (.+)", line)
            if m and (m.group(3) is None or int(m.group(3)) == world_size):
                out[m.group(1)] = m.group(4).strip()
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("gloo")
    p.add_argument("dlpg", nargs="+")
    a = p.parse_args(argv)
    gloo, dlpg = read_outcomes([a.gloo]), read_outcomes(a.dlpg)
    exceptions = read_exceptions(a.world_size)
    bad = []
    if set(gloo) != set(dlpg):
        bad.append("the lists differ in tests: only gloo's: %s; only dlpg's: %s" % (
            sorted(set(gloo) - set(dlpg))[:10], sorted(set(dlpg) - set(gloo))[:10]))
    for name in sorted(gloo):
        g, d = gloo[name], dlpg.get(name, "missing")
        if g == "pass" and d != "pass" and name not in exceptions:
            bad.append("%s: gloo pass, dlpg %s" % (name, d))
        elif name in exceptions and d == "pass":
            bad.append("%s: passes on dlpg now; delete its exception from "
                       "tests/torch_suite/README.md" % name)
        elif g != d:
            print("differs (allowed): %s: gloo %s, dlpg %s%s" % (
                name, g, d, " (%s)" % exceptions[name] if name in exceptions else ""))
    n_gloo = sum(v == "pass" for v in gloo.values())
    n_dlpg = sum(v == "pass" for v in dlpg.values())
    print("world size %d: gloo passes %d of %d tests, dlpg %d; %d listed exceptions" % (
        a.world_size, n_gloo, len(gloo), n_dlpg, len(exceptions)))
    for b in bad:
        print("FAIL " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
