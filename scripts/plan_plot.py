#!/usr/bin/env python3
"""plan_plot.py: the scale planner's picture (scripts/plan.py --search --plot FILE): per layout the fullest rank's
memory as stacked bars of the allocator's kinds against the GPU's memory line, and the step time split."""
from plan_layout import KINDS, die


def draw(path, rows, cl, title):
    """the picture: per layout, the memory per GPU of its fullest rank as stacked bars of the kinds against the GPU's
    memory line, and beside it the step time split into compute, exposed communication per group and tier, and
    the bubble. rows: (label, plan) pairs."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        die("--plot: expected matplotlib (pip install matplotlib), found none")
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(15, 0.55 * len(rows) + 2.8), sharey=True)
    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3"]
    labels = [lab for lab, _ in rows]
    for i, (_, p) in enumerate(rows):
        worst = max(p["ranks"], key=lambda r: sum(r["rm"]["peak"].values()))["rm"]["peak"]
        left = 0.0
        for k, c in zip(KINDS, colors):
            v = worst[k] / 2**30
            ax.barh(i, v, left=left, color=c, label=k if i == 0 else None)
            left += v
        if left > 2.5 * cl["mem_gib"]:  # off the axis: its total written at the edge
            ax.text(2.5 * cl["mem_gib"], i, f" {left:.0f} GiB \u2192", va="center", ha="right", fontsize=8, color="white")
        parts = [("compute", p["compute_s"], "#4c72b0")]
        for (g, t), v in sorted(p["exposed_s"].items()):
            if v > 0:
                parts.append((f"{g} ({t})", v, {"dp": "#dd8452", "tp": "#55a868", "cp": "#8172b3", "pp": "#937860"}.get(g, "#999999")))
        parts.append(("bubble", p["bubble_s"], "#c44e52"))
        left = 0.0
        for name, v, c in parts:
            bx.barh(i, v, left=left, color=c, label=name, hatch="//" if "network" in name else None)
            left += v
    ax.set_xlim(0, 2.5 * cl["mem_gib"])
    ax.axvline(cl["mem_gib"], color="black", linestyle="--", label=f"GPU memory {cl['mem_gib']:g} GiB")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("memory per GPU, the fullest rank (GiB)")
    ax.legend(fontsize=7, loc="upper right")
    h, lab = bx.get_legend_handles_labels()
    seen = {}
    for hh, ll in zip(h, lab):
        seen.setdefault(ll, hh)
    bx.legend(seen.values(), seen.keys(), fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.09), ncol=5)
    bx.set_xlabel("predicted step time (s): compute, exposed communication (hatched: inter-node), bubble")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")
