#!/usr/bin/env python3
"""plot_logs.py: loss curves of training runs (the trainer's JSON-lines logs) on one plot, and a table.

  python3 scripts/plot_logs.py --out curves.png LABEL=RUN/log.jsonl [LABEL=RUN/log.jsonl ...]
      [--ref LABEL] [--smooth N] [--title TEXT]

Each log line with "train_loss" is a step; "val_loss" and "hellaswag_acc_norm" where present. A log that a resumed run appended to,
or in which a rollback repeated steps, is drawn as the course the run took: each step once, the last time
it was logged after the last mark before it (read_log). The plot has the train loss
(smoothed over N steps, default 1) of every run against the step, and the val losses as markers; the
table printed (markdown) gives per run the final train loss (mean of the last 10% of steps), the final
val loss, and with --ref the gaps to the reference run. Where a log holds HellaSwag's acc_norm (--hellaswag), a
second panel draws it against the step, beside OpenAI's GPT-2 124M's 0.2955 (llm.c's dev/data/hellaswag.py, scored
the same way), and the table gets its last value. Needs matplotlib (Agg backend: no display).
"""
import argparse
import json
import sys


def log_objects(path):
    """each line of a log.jsonl as (line number, its object), blank lines skipped; a file that cannot be opened or a
    line that is no JSON ends the program with one line (scripts/plot_experts.py reads its logs through this too)"""
    try:
        f = open(path)
    except OSError as e:
        sys.exit("error: %s: cannot open: %s" % (path, e.strerror))
    with f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                o = json.loads(line)
            except ValueError:
                sys.exit("error: %s: line %d: expected a JSON object, found %r" % (path, n, line[:60]))
            yield n, o


def read_log(path):
    """The course the run took: (steps, train losses, val steps, val losses, {step: HellaSwag acc_norm}), each step once. A resumed run
    appends to its predecessor's log, which may hold steps after the checkpoint it resumed from; a rollback
    repeats steps. Both write a mark ({"step": s, "resumed_from": ...} or {"step": t, "rollback_to": s}):
    the steps after s logged before the mark are another course, dropped; a step logged again replaces."""
    train, val, hs = {}, {}, {}
    for _, o in log_objects(path):
        back = o.get("rollback_to", o["step"] if "resumed_from" in o else None)
        if back is not None:
            for d in (train, val, hs):
                for s in [s for s in d if s > back]:
                    del d[s]
        if "train_loss" in o:
            train[o["step"]] = o["train_loss"]
        if o.get("val_loss") is not None and o["val_loss"] == o["val_loss"]:
            val[o["step"]] = o["val_loss"]
        if o.get("hellaswag_acc_norm") is not None:
            hs[o["step"]] = o["hellaswag_acc_norm"]
    if not train:
        sys.exit("error: %s: expected log lines with \"train_loss\", found none" % path)
    steps, vsteps = sorted(train), sorted(val)
    return steps, [train[s] for s in steps], vsteps, [val[s] for s in vsteps], hs


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
    ap.add_argument("--dump", action="store_true", help="print each run's drawn points (label step train_loss) and draw nothing")
    a = ap.parse_args()
    runs = []
    for r in a.runs:
        if "=" not in r:
            sys.exit("error: run '%s': expected LABEL=PATH" % r)
        label, path = r.split("=", 1)
        runs.append((label, read_log(path)))
    if a.dump:
        for label, d in runs:
            for s, x in zip(d[0], d[1]):
                print("%s %d %r" % (label, s, x))
        return
    labels = [l for l, _ in runs]
    if a.ref and a.ref not in labels:
        sys.exit("error: --ref %s: expected one of the labels %s" % (a.ref, ", ".join(labels)))

    def final(d):
        train = d[1]
        k = max(1, len(train) // 10)
        return sum(train[-k:]) / k, (d[3][-1] if d[3] else float("nan"))

    ref = final(dict(runs)[a.ref]) if a.ref else None
    has_hs = any(d[4] for _, d in runs)
    print("| run | steps | final train loss (last 10%) | final val loss |" + (" train gap | val gap |" if ref else "") +
          (" HellaSwag acc_norm (last) |" if has_hs else ""))
    print("|---|---|---|---|" + ("---|---|" if ref else "") + ("---|" if has_hs else ""))
    for label, d in runs:
        t, v = final(d)
        row = "| %s | %d | %.4f | %.4f |" % (label, d[0][-1], t, v)
        if ref:
            row += " %+.4f | %+.4f |" % (t - ref[0], v - ref[1])
        if has_hs:
            row += (" %.4f (step %d) |" % (d[4][max(d[4])], max(d[4]))) if d[4] else " |"
        print(row)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if has_hs:
        fig, (ax, axh) = plt.subplots(1, 2, figsize=(14, 5.5))
    else:
        fig, ax = plt.subplots(figsize=(9, 5.5))
    for label, (steps, train, vs, val, hs) in runs:
        line, = ax.plot(steps, smooth(train, a.smooth), lw=1.2, label=label)
        if val:
            ax.plot(vs, val, "o", ms=4, color=line.get_color())
        if hs:
            axh.plot(sorted(hs), [hs[k] for k in sorted(hs)], "o-", ms=4, lw=1.2, color=line.get_color(), label=label)
    if has_hs:
        axh.axhline(0.2955, color="gray", ls="--", lw=1, label="GPT-2 124M (OpenAI), 0.2955")
        axh.set_xlabel("step")
        axh.set_ylabel("HellaSwag acc_norm")
        axh.set_title("HellaSwag")
        axh.grid(alpha=0.3)
        axh.legend()
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
