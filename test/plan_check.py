#!/usr/bin/env python3
"""plan_check.py: the planner's prediction (scripts/plan.py --json) against what the trainer measured (its
--report-json), per rank: each memory kind live and peak, and each ledger row (kind, group: calls, payload
bytes, sent bytes). Exact kinds must be equal to the byte; the kinds named with --approx are printed with their
error and not required (docs/plan.md says why each is not exact).

  plan_check.py NAME REPORT.json [--approx KIND,...] -- PLANNER FLAGS...
Prints "ok   NAME: ..." or "FAIL NAME: ..." lines; exit 1 on a failure.
"""
import json
import os
import subprocess
import sys

KINDS = ["params", "grads", "moments", "master", "activations", "comm_buffers", "workspace"]


def main():
    if "--" not in sys.argv or len(sys.argv) < 4:
        print("usage: plan_check.py NAME REPORT.json [--approx KIND,...] -- PLANNER FLAGS...", file=sys.stderr)
        return 2
    cut = sys.argv.index("--")
    mine, flags = sys.argv[1:cut], sys.argv[cut + 1:]
    name, report = mine[0], mine[1]
    approx = set(mine[mine.index("--approx") + 1].split(",")) if "--approx" in mine else set()
    here = os.path.dirname(os.path.abspath(__file__))
    r = subprocess.run([sys.executable, os.path.join(here, "..", "scripts", "plan.py"), "--json", "--build", "cpu",
                        ] + flags, capture_output=True, text=True)
    if r.returncode != 0:
        print(f"FAIL {name}: the planner failed: {r.stderr.strip()}")
        return 1
    plan = json.loads(r.stdout)
    meas = json.load(open(report))
    bad, notes = [], []
    if len(plan["ranks"]) != len(meas["ranks"]):
        print(f"FAIL {name}: {len(plan['ranks'])} ranks planned, {len(meas['ranks'])} measured")
        return 1
    for p, m in zip(plan["ranks"], meas["ranks"]):
        rk = m["rank"]
        for k in KINDS:
            for key in (k + "_bytes", k + "_peak_bytes"):
                if p[key] == m[key]:
                    continue
                line = f"rank {rk} {key}: planned {p[key]} measured {m[key]} ({(p[key] - m[key]) / max(m[key], 1):+.1%})"
                (notes if k in approx else bad).append(line)
        if "ledger" in approx:
            continue
        prow = {(x["kind"], x["group"]): x for x in p["ledger_step"]["rows"]}
        mrow = {(x["kind"], x["group"]): x for x in m["ledger_step"]["rows"]}
        for key in sorted(set(prow) | set(mrow)):
            a, b = prow.get(key), mrow.get(key)
            if a is None or b is None:
                bad.append(f"rank {rk} ledger {key}: planned {a}, measured {b}")
                continue
            for f in ("size", "calls", "payload_bytes", "sent_bytes"):
                if a[f] != b[f]:
                    bad.append(f"rank {rk} ledger {key} {f}: planned {a[f]} measured {b[f]}")
    n = len(meas["ranks"])
    for line in notes:
        print(f"note {name}: {line}")
    if bad:
        for line in bad[:12]:
            print(f"FAIL {name}: {line}")
        if len(bad) > 12:
            print(f"FAIL {name}: ... {len(bad) - 12} more")
        return 1
    exact = [k for k in KINDS if k not in approx]
    print(f"ok   {name}: {n} ranks, {', '.join(exact)} (live and peak) equal to the byte"
          + ("" if "ledger" in approx else ", every ledger row (calls, payload, sent) equal"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
