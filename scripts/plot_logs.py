#!/usr/bin/env python3
"""plot_logs.py: loss curves of training runs (the trainer's JSON-lines logs) on one plot, and a table.

  python3 scripts/plot_logs.py --out curves.png LABEL=RUN/log.jsonl [LABEL=RUN/log.jsonl ...]
      [--ref LABEL] [--smooth N] [--title TEXT]

Each log line with "train_loss" is a step; "val_loss" where present. The plot has the train loss
(smoothed over N steps, default 1) of every run against the step, and the val losses as markers; the
table printed (markdown) gives per run the final train loss (mean of the last 10% of steps), the final
val loss, and with --ref the gaps to the reference run. Needs matplotlib (Agg backend: no display).
"""
import argparse
import json
import sys


def read_log(path):
    steps, train, val_steps, val = [], [], [], []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            o = json.loads(line)
            if "train_loss" in o:
                steps.append(o["step"])
                train.append(o["train_loss"])
            if o.get("val_loss") is not None and o["val_loss"] == o["val_loss"]:
                val_steps.append(o["step"])
                val.append(o["val_loss"])
    if not steps:
        sys.exit("error: %s: expected log lines with \"train_loss\", found none" % path)
    return steps, train, val_steps, val


def smooth(xs, n):
    if n <= 1:
        return xs
    out, acc = [], 0.0
    for i, x in enumerate(xs):
        acc += x
        if i >= n:
            acc -= xs[i - n]
        out.append(acc / min(i + 1, n))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="LABEL=PATH of a log.jsonl")
    ap.add_argument("--out", required=True, help="PNG to write")
    ap.add_argument("--ref", help="the label of the reference run (gaps in the table)")
    ap.add_argument("--smooth", type=int, default=1)
    ap.add_argument("--title", default="train loss")
    a = ap.parse_args()
    runs = []
    for r in a.runs:
        if "=" not in r:
            sys.exit("error: run '%s': expected LABEL=PATH" % r)
        label, path = r.split("=", 1)
        runs.append((label, read_log(path)))
    labels = [l for l, _ in runs]
    if a.ref and a.ref not in labels:
        sys.exit("error: --ref %s: expected one of the labels %s" % (a.ref, ", ".join(labels)))

    def final(d):
        train = d[1]
        k = max(1, len(train) // 10)
        return sum(train[-k:]) / k, (d[3][-1] if d[3] else float("nan"))

    ref = final(dict(runs)[a.ref]) if a.ref else None
    print("| run | steps | final train loss (last 10%) | final val loss |" + (" train gap | val gap |" if ref else ""))
    print("|---|---|---|---|" + ("---|---|" if ref else ""))
    for label, d in runs:
        t, v = final(d)
        row = "| %s | %d | %.4f | %.4f |" % (label, d[0][-1], t, v)
        if ref:
            row += " %+.4f | %+.4f |" % (t - ref[0], v - ref[1])
        print(row)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for label, (steps, train, vs, val) in runs:
        line, = ax.plot(steps, smooth(train, a.smooth), lw=1.2, label=label)
        if val:
            ax.plot(vs, val, "o", ms=4, color=line.get_color())
    ax.set_xlabel("step")
    ax.set_ylabel("loss (lines: train%s; dots: val)" % (", smoothed over %d steps" % a.smooth if a.smooth > 1 else ""))
    ax.set_title(a.title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(a.out, dpi=120)
    print("wrote %s" % a.out)


if __name__ == "__main__":
    main()
