#!/usr/bin/env python3
# watchdog_lines.py: checks the watchdog lines of a run with a dead or hung rank (test/test_faults.sh)
# against the process mesh computed here, independently of llm/comm/mesh.h and llm/comm/watchdog.h:
# world_rank = ((dp_rank * pp + pp_rank) * cp + cp_rank) * tp + tp_rank (tp innermost, then cp, pp, dp; the
# mesh's documented order), and the groups of a rank: dp (the gradient group: same pp and tp, every dp and
# cp, ordered dp-major), tp (same dp, pp, cp), pp (same dp, cp, tp), cp (same dp, pp, tp), embed (the first
# and the last stage with the same dp, cp and tp, pp > 1; else the rank alone), world.
#
#   python3 test/watchdog_lines.py LOG --np N --tp T --pp P [--cp C] --faulty R [--expect RANK:GROUP ...]
#
# For each line "watchdog: rank r: step S: ... in NAME [#SEQ] of the G group (world ranks a,b,...)
# called|waited at FILE:LINE...: missing rank x (why), rank y (why); no report from rank R":
#   - the world ranks listed are r's group G of the mesh, in group order;
#   - every missing rank is a member of G other than r;
#   - the chain of waits holds: a rank named "waiting in collective #k of the H group" printed a line
#     of its own in "#k of the H group", one "waiting in a P2P of the H group" a line in a P2P (no #)
#     of the H group, and "no report: dead or hung" is the faulty rank alone;
#   - the silent ranks ("no report from rank ...") are the faulty rank alone.
# --expect RANK:GROUP: RANK's line waits in GROUP and names the faulty rank missing with no report
# (e.g. the tied-embedding partner of a rank that hangs before the embedding's all-reduce).
# Prints the problems on one line ("" when there are none); exit status 0 either way (the caller counts).
import argparse
import re
import sys

LINE = re.compile(r"(?:^| )watchdog: rank (\d+): step (\d+): .*? in (\S+) (?:#(\d+) )?of the (\w+) group "
                  r"\(world ranks ([\d,]+)\) (?:called|waited) at \S+?:\d+(?: \(started at \S+?:\d+\))?(.*)$")
MISSING = re.compile(r"(?:: missing rank |, rank )(\d+) \(([^)]*)\)")


def members(r, g, n, tp, pp, cp=1):
    dp = n // (tp * pp * cp)
    t, q, p, d = r % tp, (r // tp) % cp, (r // (tp * cp)) % pp, r // (tp * cp * pp)
    at = lambda d, p, q, t: ((d * pp + p) * cp + q) * tp + t  # noqa: E731
    if g == "world":
        return list(range(n))
    if g == "dp":
        return [at(x, p, y, t) for x in range(dp) for y in range(cp)]
    if g == "tp":
        return [at(d, p, q, x) for x in range(tp)]
    if g == "pp":
        return [at(d, x, q, t) for x in range(pp)]
    if g == "cp":
        return [at(d, p, y, t) for y in range(cp)]
    if g == "embed":
        return [at(d, 0, q, t), at(d, pp - 1, q, t)] if pp > 1 and p in (0, pp - 1) else [r]
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--np", type=int, required=True)
    ap.add_argument("--tp", type=int, required=True)
    ap.add_argument("--pp", type=int, required=True)
    ap.add_argument("--cp", type=int, default=1)
    ap.add_argument("--faulty", type=int, required=True)
    ap.add_argument("--expect", action="append", default=[])
    a = ap.parse_args()
    lines = {}  # rank -> (name, seq, group, members, tail)
    problems = []
    with open(a.log, errors="replace") as f:
        for raw in f:
            if "watchdog: rank " not in raw:
                continue
            m = LINE.search(raw.rstrip("\n"))
            if not m:
                problems.append("unparsed line '%s'" % raw.strip()[:120])
                continue
            r = int(m.group(1))
            lines[r] = (m.group(3), m.group(4), m.group(5), [int(x) for x in m.group(6).split(",")], m.group(7))
    for r, (name, seq, g, listed, tail) in sorted(lines.items()):
        want = members(r, g, a.np, a.tp, a.pp, a.cp)
        if listed != want:
            problems.append("rank %d: %s group listed as world ranks %s, expected %s" % (r, g, listed, want))
        silent = re.search(r"; no report from rank ([\d,]+)", tail)
        if not silent or [int(x) for x in silent.group(1).split(",")] != [a.faulty]:
            problems.append("rank %d: silent ranks %s, expected %d alone" % (r, silent.group(1) if silent else "none", a.faulty))
        for x, why in MISSING.findall(tail.split("; no report from")[0]):
            x = int(x)
            if want is None or x == r or x not in want:
                problems.append("rank %d: missing rank %d is not another member of its %s group %s" % (r, x, g, want))
            w = re.match(r"waiting in collective #(\d+) of the (\w+) group", why)
            p2p = re.match(r"waiting in a P2P of the (\w+) group", why)
            other = lines.get(x)
            if why == "no report: dead or hung":
                if x != a.faulty:
                    problems.append("rank %d: names rank %d dead or hung, the faulty rank is %d" % (r, x, a.faulty))
            elif w:
                if other is None or other[1] != w.group(1) or other[2] != w.group(2):
                    problems.append("rank %d: says rank %d waits in #%s of the %s group, its own line: %s" % (
                        r, x, w.group(1), w.group(2), "none" if other is None else "%s #%s of the %s group" % (other[0], other[1], other[2])))
            elif p2p:
                if other is None or other[1] is not None or other[2] != p2p.group(1):
                    problems.append("rank %d: says rank %d waits in a P2P of the %s group, its own line: %s" % (
                        r, x, p2p.group(1), "none" if other is None else "%s #%s of the %s group" % (other[0], other[1], other[2])))
            else:
                problems.append("rank %d: rank %d missing for an unknown reason '%s'" % (r, x, why))
    for e in a.expect:
        r, g = e.split(":")
        r = int(r)
        if r not in lines:
            problems.append("rank %d printed no line" % r)
            continue
        name, seq, got_g, listed, tail = lines[r]
        miss = MISSING.findall(tail.split("; no report from")[0])
        if got_g != g or miss != [(str(a.faulty), "no report: dead or hung")]:
            problems.append("rank %d waits in %s of the %s group, missing %s (expected the %s group, missing rank %d alone, no report)" % (
                r, name, got_g, ", ".join("%s (%s)" % m for m in miss) or "none", g, a.faulty))
    print("; ".join(problems))


if __name__ == "__main__":
    sys.exit(main())
