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
    # expert parallelism's all-to-alls (group ep): a rank's payload is its kept copies dispatched and the copies its
    # experts received combined back, which the routing decides; the planner gives the uniform routing's expectation.
    # Per rank the calls and the group size must be equal; the payload summed over each ep group equal too when
    # nothing is dropped (every token sends K copies: the copies received over the group are the copies sent); the
    # bytes that leave each rank (the routing's) are printed with their error against the uniform (ep-1)/ep.
    A2A = ("all_to_all", "ep")
    drops = "--capacity-factor" in flags and float(flags[flags.index("--capacity-factor") + 1]) > 0
    a2a_sum = {}
    for i, p in enumerate(plan["ranks"]):
        key = (p["dp_rank"] - p["ep_rank"], p["pp_rank"], p["tp_rank"], p["cp_rank"])
        for who, rk in (("plan", p), ("meas", meas["ranks"][i])):
            row = [x for x in rk["ledger_step"]["rows"] if (x["kind"], x["group"]) == A2A]
            s = a2a_sum.setdefault(key, {"plan": [0, 0.0], "meas": [0, 0.0]})
            if row:
                s[who][0] += row[0]["payload_bytes"]
                s[who][1] += row[0]["sent_bytes"]
    for key, s in sorted(a2a_sum.items()):
        if s["plan"][0] == 0 and s["meas"][0] == 0:
            continue
        line = (f"ep group of dp ranks {key[0]}.. (pp {key[1]} tp {key[2]}): all_to_all payload summed over the group planned "
                f"{s['plan'][0]} measured {s['meas'][0]}")
        same = s["plan"][0] == s["meas"][0]
        (notes if drops or same else bad).append(line + (" (capacity drops: the planner's is the no-drop bound)" if drops else " (equal)" if same else ""))
        notes.append(f"ep group of dp ranks {key[0]}.. (pp {key[1]} tp {key[2]}): bytes sent (the routing's) planned {s['plan'][1]:.0f} "
                     f"(uniform) measured {s['meas'][1]:.0f} ({(s['plan'][1] - s['meas'][1]) / max(s['meas'][1], 1):+.1%})")
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
                if key == A2A and f in ("payload_bytes", "sent_bytes"):
                    continue  # the routing's (above)
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
          + ("" if "ledger" in approx else ", every ledger row (calls, payload, sent) equal")
          + (" (the ep all-to-alls: calls per rank, payload per ep group)" if any(s["meas"][0] for s in a2a_sum.values()) else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
