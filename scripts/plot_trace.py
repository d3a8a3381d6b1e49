#!/usr/bin/env python3
# plot_trace.py: draw a Chrome/Perfetto trace of a pipeline run as a PNG Gantt chart (matplotlib, Agg).
#   scripts/plot_trace.py TRACE.json -o OUT.png [--title T] [--width W] [--dump-boxes BOXES.json]
# The trace is what build/pipeline_sim --trace writes (pid 0, tid = rank, otherData {schedule, P, m, V,
# bubble}: a simulation, times in units of the op costs) or what a real run writes (pid = rank, a few
# tids, times in microseconds, otherData e.g. {measured_bubble}); the plain list of events is accepted too.
# One row per (pid, tid), named by the thread_name / process_name metadata; one box per complete ("X")
# event: F, B and W in their own colours (a lighter shade per model chunk, from names like "F3.1"), the
# micro-batch number inside when it fits; an overlapped pair's all-to-alls (category a2a, named like
# "B1.1 L3 dispatch": from the start to the wait's end; a row of their own, tid 1) in theirs; any other category (send, recv, allreduce, optimizer, ...) as a
# thin grey bar under the row's compute boxes. The title shows otherData's fields. --dump-boxes writes
# the drawn rectangles as JSON (for test/test_plot_trace.sh).
import argparse
import json
import os
import re
import sys
import textwrap

COMPUTE = {"F": ("#4c78a8", "F forward"), "B": ("#e4572e", "B backward"), "W": ("#54a24b", "W weight grad"),
           "a2a": ("#b279a2", "all-to-all in flight (start to wait)")}
ORDER = ["F", "B", "W", "a2a", "other"]
OTHER_COLOR = "#8c8c8c"
DPI = 100
NAME_RE = re.compile(r"^([A-Za-z]+)(\d+)(?:\.(\d+))?(?: .*)?$")  # "F3", "F3.1" (chunk 1), "F3.1 L2 dispatch"


def die(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(1)


def load_trace(path):
    """(events, otherData) of the trace at path; exits with one line on a bad file."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        die(f"{path}: cannot read: {e.strerror}")
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        die(f"{path}: not JSON: {e}")
    if isinstance(doc, list):
        events, other = doc, {}
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events, other = doc["traceEvents"], doc.get("otherData") or {}
    else:
        die(f"{path}: not a Chrome trace (expected an object with a traceEvents list, or a list of events)")
    if not isinstance(other, dict):
        other = {}
    return [e for e in events if isinstance(e, dict)], other


def rows_and_boxes(path, events):
    """The rows (sorted (pid, tid) keys and their names) and the X events as boxes, times from the first."""
    thread_names, process_names, xs = {}, {}, []
    for i, e in enumerate(events):
        ph, pid, tid = e.get("ph"), e.get("pid", 0), e.get("tid", 0)
        if ph == "M":
            name = (e.get("args") or {}).get("name")
            if e.get("name") == "thread_name" and name is not None:
                thread_names[(pid, tid)] = str(name)
            elif e.get("name") == "process_name" and name is not None:
                process_names[pid] = str(name)
        elif ph == "X":
            ts, dur = e.get("ts"), e.get("dur", 0)
            if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)):
                die(f"{path}: event {i} ({e.get('name')!r}): an X event needs numeric ts and dur")
            xs.append(e)
    if not xs:
        die(f"{path}: no complete (\"ph\":\"X\") events to draw")
    keys = sorted({(e.get("pid", 0), e.get("tid", 0)) for e in xs}, key=lambda k: (str(type(k[0])), k[0], str(type(k[1])), k[1]))
    tids_of = {}
    for pid, tid in keys:
        tids_of.setdefault(pid, []).append(tid)
    names = []
    for pid, tid in keys:
        parts = [p for p in (process_names.get(pid), thread_names.get((pid, tid))) if p]
        if not parts:
            parts = [f"pid {pid}"]
        if (pid, tid) not in thread_names and len(tids_of[pid]) > 1:
            parts.append(f"tid {tid}")
        names.append(" / ".join(parts))
    row_of = {k: i for i, k in enumerate(keys)}
    t0 = min(e["ts"] for e in xs)
    boxes = []
    for e in xs:
        name, cat = str(e.get("name", "")), str(e.get("cat", ""))
        m = NAME_RE.match(name)
        boxes.append({"row": row_of[(e.get("pid", 0), e.get("tid", 0))], "name": name, "cat": cat,
                      "category": cat if cat in COMPUTE else "other",
                      "mb": int(m.group(2)) if m else None, "chunk": int(m.group(3)) if m and m.group(3) else 0,
                      "t0": e["ts"] - t0, "t1": e["ts"] + e["dur"] - t0})
    return names, boxes


def shade(hex_color, chunk, nchunks):
    """hex_color mixed with white, more for later chunks (chunk 0: the colour itself)."""
    if nchunks <= 1 or chunk <= 0:
        return hex_color
    a = 0.55 * min(chunk, nchunks - 1) / (nchunks - 1)
    rgb = [int(hex_color[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * a):02x}" for c in rgb)


def text_color(hex_color):
    r, g, b = (int(hex_color[i:i + 2], 16) / 255 for i in (1, 3, 5))
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.6 else "white"


def fmt_value(key, v):
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if "bubble" in key.lower() and 0.0 <= v <= 1.0:
            return f"{100 * v:.1f}%"
        return f"{v:.4g}"
    return str(v)


def subtitle(other):
    """otherData's scalar fields, compactly: the schedule's name bare, then key=value (bubbles in %)."""
    parts = []
    if isinstance(other.get("schedule"), str):
        parts.append(other["schedule"])
    for k, v in other.items():
        if k == "schedule" or isinstance(v, (dict, list)) or v is None:
            continue
        parts.append(f"{k} {fmt_value(k, v)}" if "bubble" in k.lower() else f"{k}={fmt_value(k, v)}")
    return parts


def wrap_parts(parts, width):
    """The parts joined by ", " into lines of at most width characters, breaking only between parts."""
    lines = []
    for p in parts:
        if lines and len(lines[-1]) + 2 + len(p) <= width:
            lines[-1] += ", " + p
        else:
            if lines:
                lines[-1] += ","
            lines.append(p)
    return lines


def main():
    ap = argparse.ArgumentParser(description="Draw a Chrome/Perfetto trace of a pipeline run as a PNG Gantt chart.")
    ap.add_argument("trace", help="trace JSON ({\"traceEvents\": [...], \"otherData\": {...}} or a list of events)")
    ap.add_argument("-o", "--output", required=True, help="the PNG to write")
    ap.add_argument("--title", help="the title's first line (default: the trace's file name)")
    ap.add_argument("--width", type=int, default=1200, help="the PNG's width in pixels (default 1200)")
    ap.add_argument("--dump-boxes", metavar="FILE", help="also write the drawn rectangles as JSON to FILE")
    args = ap.parse_args()
    if args.width < 200 or args.width > 20000:
        die(f"--width {args.width}: expected 200 to 20000 pixels")

    events, other = load_trace(args.trace)
    names, boxes = rows_and_boxes(args.trace, events)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        die("scripts/plot_trace.py needs matplotlib: run bash scripts/deps.sh test (or python3 -m pip install matplotlib)")

    simulated = bool(other.get("simulated")) or "bubble" in other  # real runs write measured_bubble
    scale, unit = (1.0, "units") if simulated else (1e-3, "ms")  # trace times are microseconds
    for b in boxes:
        b["x0"], b["x1"] = b["t0"] * scale, b["t1"] * scale
    nrows = len(names)
    nchunks = max(b["chunk"] for b in boxes) + 1
    xmax = max(b["x1"] for b in boxes) or 1.0

    title = args.title if args.title is not None else os.path.basename(args.trace)
    sub = subtitle(other)
    fontsize = 9
    char_px = fontsize * DPI / 72 * 0.62  # a digit's width, about
    # the layout in pixels: row labels on the left, the title above, axis label and legend below
    label_px = max(len(n) for n in names) * char_px + 20
    left, right = label_px + 10, 20
    wrap = max(30, int((args.width - 40) / (char_px * 1.25)))
    head, sub_lines = textwrap.wrap(title, wrap) or [""], wrap_parts(sub, wrap)
    top = 18 + 20 * (len(head) + len(sub_lines))
    row_px = 30 if nrows <= 16 else max(12, 480 // nrows)
    ncat = len({(b["category"], b["chunk"]) for b in boxes})
    # as many legend columns as the longest entry's text leaves room for
    longest = max(len(COMPUTE[c][1]) + 10 if c in COMPUTE else 30 for c, _ in {(b["category"], b["chunk"]) for b in boxes})
    legend_cols = min(ncat, max(1, int((args.width - 40) // (longest * char_px + 40))))
    bottom = 62 + 18 * -(-ncat // legend_cols)
    height = top + row_px * nrows + bottom
    fig = plt.figure(figsize=(args.width / DPI, height / DPI), dpi=DPI)
    ax_w_px = args.width - left - right
    fig.subplots_adjust(left=left / args.width, right=1 - right / args.width, top=1 - top / height, bottom=bottom / height)
    ax = fig.add_subplot(111)
    pad = 0.01 * xmax
    ax.set_xlim(-pad, xmax + pad)
    ax.set_ylim(nrows - 0.5, -0.5)  # row 0 on top
    px_per_x = ax_w_px / (xmax + 2 * pad)

    # a light band per row over the run's span: the idle time (the bubble) shows as the band
    for r in range(nrows):
        ax.broken_barh([(0, xmax)], (r - 0.42, 0.84), facecolors="#f2f2f2", edgecolors="none", zorder=0)
    has_other = any(b["category"] == "other" for b in boxes)
    # compute boxes fill the band, or its top when the row also has thin bars of other categories
    cy0, ch = (-0.40, 0.64) if has_other else (-0.40, 0.80)
    oy0, oh = 0.28, 0.12
    legend = {}
    for b in boxes:
        r = b["row"]
        if b["category"] == "other":
            color = OTHER_COLOR
            y0, h = r + oy0, oh
            legend.setdefault(("other", 0), (OTHER_COLOR, None))
        else:
            base, desc = COMPUTE[b["category"]]
            color = shade(base, b["chunk"], nchunks)
            y0, h = r + cy0, ch
            legend.setdefault((b["category"], b["chunk"]), (color, desc))
        ax.broken_barh([(b["x0"], b["x1"] - b["x0"])], (y0, h), facecolors=color, edgecolors="white",
                       linewidth=0.6, zorder=2 if b["category"] != "other" else 1)
        label = ""
        if b["category"] != "other":
            label = str(b["mb"]) if b["mb"] is not None else b["name"]
            if b["category"] == "a2a" and b["mb"] is not None:  # the direction too: "F3" or "B1"
                label = b["name"][0] + label
            if (b["x1"] - b["x0"]) * px_per_x < len(label) * char_px + 4 or ch * row_px < fontsize * DPI / 72 + 2:
                label = ""
            if label:
                ax.text((b["x0"] + b["x1"]) / 2, y0 + h / 2, label, ha="center", va="center", fontsize=fontsize,
                        color=text_color(color), zorder=3)
        b["color"], b["label"], b["y0"], b["y1"] = color, label, y0, y0 + h

    ax.set_yticks(range(nrows))
    ax.set_yticklabels(names, fontsize=fontsize)
    ax.tick_params(axis="y", length=0)
    ax.tick_params(axis="x", labelsize=fontsize)
    ax.set_xlabel(f"time ({unit}, simulated)" if simulated else f"time ({unit} from the first event)", fontsize=fontsize)
    for s in ("top", "right", "left"):
        ax.spines[s].set_visible(False)
    ax.grid(axis="x", color="#dddddd", linewidth=0.5, zorder=-1)
    ax.set_axisbelow(True)
    fig.text(left / args.width, 1 - 10 / height, "\n".join(head), ha="left", va="top", fontsize=10.5,
             fontweight="bold", linespacing=1.4)
    if sub_lines:
        fig.text(left / args.width, 1 - (12 + 20 * len(head)) / height, "\n".join(sub_lines), ha="left", va="top",
                 fontsize=fontsize + 0.5, linespacing=1.4)

    handles = []
    for (cat, chunk), (color, desc) in sorted(legend.items(), key=lambda kv: (ORDER.index(kv[0][0]), kv[0][1])):
        if cat == "other":
            others = sorted({b["cat"] or "?" for b in boxes if b["category"] == "other"})
            text = "other: " + ", ".join(others[:6]) + (", ..." if len(others) > 6 else "")
        else:
            if cat == "B" and any(b["category"] == "W" for b in boxes):
                desc = "B backward (input grad)"
            text = desc + (f", chunk {chunk}" if nchunks > 1 else "")
        handles.append(Patch(facecolor=color, edgecolor="none", label=text))
    fig.legend(handles=handles, loc="lower center", ncol=legend_cols,
               fontsize=fontsize, frameon=False, bbox_to_anchor=(0.5, 0.0), handlelength=1.2, columnspacing=1.2)

    try:
        fig.savefig(args.output, dpi=DPI)
    except OSError as e:
        die(f"{args.output}: cannot write: {e.strerror}")
    if args.dump_boxes:
        dump = {"trace": args.trace, "width": args.width, "height": height, "title": "\n".join(head + sub_lines),
                "xlabel": ax.get_xlabel(), "rows": names,
                "boxes": [{k: b[k] for k in ("row", "x0", "x1", "y0", "y1", "name", "cat", "category", "chunk", "label",
                                             "color")} for b in boxes]}
        try:
            with open(args.dump_boxes, "w") as f:
                json.dump(dump, f, indent=1)
        except OSError as e:
            die(f"{args.dump_boxes}: cannot write: {e.strerror}")


if __name__ == "__main__":
    main()
