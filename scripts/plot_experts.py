#!/usr/bin/env python3
"""plot_experts.py: each expert's share of the tokens over a training run of a mixture-of-experts model, from the
trainer's JSON-lines logs (docs/moe.md: "moe_layers", "moe_routed": per step, one list of E routed assignment
counts per moe layer, summed over the step's micro-batches and ranks).

  python3 scripts/plot_experts.py --out shares.png LABEL=RUN/log.jsonl [LABEL=RUN/log.jsonl ...]
      [--layer L] [--title TEXT] [--dump FILE.json]

The share of expert e in moe layer l at step s is routed[l][e] / sum over e of routed[l][e] (the top-K choices
before capacity drops; 1/E each when balanced). One column per run, one row per moe layer (or only layer L with
--layer L); each panel stacks the E shares over the steps, so a collapsed router shows one band filling the
panel; a dashed line marks 1/E, every expert's share when balanced. Printed (markdown): per run and layer, the
largest share at the last step, the largest at any step, and the mean of each step's largest share over all the
steps and over the last 10% of them. --dump writes those shares as JSON
({label: {"steps": [...], "layers": [l, ...], "shares": [layer][step][expert]}}) for the tests.
A log that a resumed run appended to, or in which a rollback repeated steps, is read as the course the run took
(scripts/plot_logs.py's rule: the steps after a resume or rollback mark's step, logged before it, are dropped).
Needs matplotlib (Agg backend: no display). Bad input: one line naming the file, exit 1.
"""
import argparse
import json
import sys

from plot_logs import log_objects  # (scripts/: the log's lines, one error line for a bad one)


def read_counts(path):
    """(steps, layers, counts[step index][layer index][expert]) of a log's moe steps, each step once"""
    by_step, layers = {}, None
    for n, o in log_objects(path):
        back = o.get("rollback_to", o.get("step") if "resumed_from" in o else None)
        if back is not None:
            for s in [s for s in by_step if s > back]:
                del by_step[s]
        if "moe_routed" not in o:
            continue
        lay, routed = o.get("moe_layers"), o["moe_routed"]
        if (not isinstance(lay, list) or not isinstance(routed, list) or len(lay) != len(routed) or not routed or
                any(not isinstance(r, list) or len(r) != len(routed[0]) or any(c < 0 for c in r) for r in routed)):
            sys.exit("error: %s: line %d: expected \"moe_layers\" and \"moe_routed\" (one list of E counts >= 0 per "
                     "moe layer), found %r and %r" % (path, n, lay, routed))
        if layers is not None and lay != layers:
            sys.exit("error: %s: line %d: expected the moe layers %s of the earlier lines, found %s" % (path, n, layers, lay))
        layers = lay
        by_step[o["step"]] = routed
    if not by_step:
        sys.exit("error: %s: expected log lines with \"moe_routed\" (a run with --experts), found none" % path)
    steps = sorted(by_step)
    return steps, layers, [by_step[s] for s in steps]


def shares_of(counts):
    """counts[step][layer][expert] -> shares[layer][step][expert]"""
    L = len(counts[0])
    out = [[] for _ in range(L)]
    for step in counts:
        for l, row in enumerate(step):
            total = float(sum(row))
            out[l].append([c / total if total > 0 else 0.0 for c in row])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", metavar="LABEL=LOG", help="a run's label and its log.jsonl")
    ap.add_argument("--out", required=True, help="the PNG to write")
    ap.add_argument("--layer", type=int, default=None, help="only this moe layer (default: every moe layer)")
    ap.add_argument("--title", default="each expert's share of the routed tokens")
    ap.add_argument("--dump", default=None, help="write the shares as JSON here")
    a = ap.parse_args()
    runs = []
    for spec in a.runs:
        label, sep, path = spec.partition("=")
        if not sep or not label or not path:
            sys.exit("error: run %r: expected LABEL=PATH/log.jsonl" % spec)
        steps, layers, counts = read_counts(path)
        shares = shares_of(counts)
        if a.layer is not None:
            if a.layer not in layers:
                sys.exit("error: --layer %d: expected one of the moe layers of %s, %s" % (a.layer, path, layers))
            i = layers.index(a.layer)
            layers, shares = [a.layer], [shares[i]]
        runs.append((label, path, steps, layers, shares))

    print("| run | moe layer | experts | steps | largest share, last step | largest share, any step | "
          "mean largest share, all steps | mean largest share, last 10% |")
    print("|---|---|---|---|---|---|---|---|")
    for label, _, steps, layers, shares in runs:
        for l, sh in zip(layers, shares):
            tail = max(1, len(steps) // 10)
            mx = [max(s) for s in sh]
            print("| %s | %d | %d | %d | %.3f | %.3f | %.3f | %.3f |" % (label, l, len(sh[0]), len(steps), mx[-1], max(mx),
                                                                      sum(mx) / len(mx), sum(mx[-tail:]) / tail))
    if a.dump:
        with open(a.dump, "w") as f:
            json.dump({label: {"steps": steps, "layers": layers, "shares": shares} for label, _, steps, layers, shares in runs}, f)

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("error: matplotlib is missing: python3 -m pip install matplotlib (or bash scripts/deps.sh test)")
    rows = max(len(r[3]) for r in runs)
    fig, axes = plt.subplots(rows, len(runs), figsize=(4.2 * len(runs), 2.6 * rows + 0.8), squeeze=False, sharey=True)
    cmap = plt.get_cmap("tab20" if max(len(r[4][0][0]) for r in runs) > 10 else "tab10")
    for c, (label, _, steps, layers, shares) in enumerate(runs):
        for r in range(rows):
            ax = axes[r][c]
            if r >= len(layers):
                ax.axis("off")
                continue
            sh = shares[r]
            E = len(sh[0])
            ax.stackplot(steps, [[s[e] for s in sh] for e in range(E)], colors=[cmap(e % cmap.N) for e in range(E)],
                         labels=["expert %d" % e for e in range(E)], linewidth=0)
            ax.axhline(1.0 / E, color="black", linewidth=0.8, linestyle="--")
            ax.set_xlim(steps[0], steps[-1])
            ax.set_ylim(0, 1)
            ax.set_title("%s: layer %d (max share %.2f at the end)" % (label, layers[r], max(sh[-1])), fontsize=9)
            if r == len(layers) - 1:
                ax.set_xlabel("step")
            if c == 0:
                ax.set_ylabel("share of tokens")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4 * len(runs)), fontsize=8)
    fig.suptitle(a.title)
    fig.tight_layout(rect=(0, 0.07, 1, 0.95))
    fig.savefig(a.out, dpi=100)
    print("wrote %s" % a.out)


if __name__ == "__main__":
    main()
