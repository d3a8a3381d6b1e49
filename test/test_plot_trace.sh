#!/usr/bin/env bash
# test_plot_trace.sh: scripts/plot_trace.py draws what the trace holds. Plots the simulator's traces of
# 1f1b pp4 m8, interleaved pp2 m4 vpp2 and zb-h1 pp4 m8 (build/pipeline_sim, built by `make test`) and a
# real run's shape (pid = rank, two tids, send/recv/allreduce events, times in microseconds, as an object
# and as a plain list) and an overlapped DualPipeV pair's (the ops in pieces, the all-to-alls of each direction on
# a row of their own, category a2a, in their own colour), and checks the PNG (magic bytes, the requested width) and the rectangles it
# drew (--dump-boxes) against the trace: one row per (pid, tid), one box per X event at its ts and dur,
# no overlap of F/B/W in a row, the colour category of each, micro-batch labels, the title and the axis.
# Then the bad inputs: one line naming the file and a non-zero exit.
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0
ok()  { echo "ok   $*"; pass=$((pass+1)); }
bad() { echo "FAIL $*"; fail=$((fail+1)); }
finish() { echo "plot_trace: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }
PLOT=scripts/plot_trace.py SIM=build/pipeline_sim
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

if ! python3 -c "import matplotlib" > /dev/null 2>&1; then
    bad "matplotlib is missing: run bash scripts/deps.sh test (or python3 -m pip install matplotlib)"; finish
fi
if [ ! -x "$SIM" ]; then bad "$SIM is missing: make build/pipeline_sim"; finish; fi

# check_plot NAME TRACE WIDTH P EXPECT...: plot TRACE at WIDTH pixels and compare the drawing with the
# trace; P: the rows expected; EXPECT: words of test/test_plot_trace.sh's checker (see below)
check_plot() {
    local name=$1 trace=$2 width=$3 rows=$4; shift 4
    local png=$tmp/$name.png boxes=$tmp/$name.boxes.json out
    if out=$(python3 "$PLOT" "$trace" -o "$png" --width "$width" --dump-boxes "$boxes" "${PLOT_ARGS[@]}" 2>&1); then
        ok "$name: plot_trace.py exits 0"
    else
        bad "$name: plot_trace.py failed: $out"; return
    fi
    # each line the checker prints is a check: "ok ..." or "FAIL ..."
    while IFS= read -r line; do
        case $line in ok\ *) ok "$name: ${line#ok   }" ;; *) bad "$name: ${line#FAIL }" ;; esac
    done < <(python3 - "$trace" "$png" "$boxes" "$width" "$rows" "$@" <<'EOF' 2>&1
import json, struct, sys
from collections import Counter, defaultdict
trace, png, boxes_path, width, rows, expect = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6:]
def check(cond, what): print(("ok   " if cond else "FAIL ") + what)
# the PNG: signature, IHDR width and height
with open(png, "rb") as f: head = f.read(24)
check(head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", f"{png.split('/')[-1]} is a PNG (magic bytes, IHDR)")
w, h = struct.unpack(">II", head[16:24]) if len(head) == 24 else (0, 0)
check(abs(w - width) <= 1 and h > 50, f"PNG is {w} x {h} pixels, asked for width {width}")
# the trace, read here independently of the script
doc = json.load(open(trace))
events, other = (doc, {}) if isinstance(doc, list) else (doc["traceEvents"], doc.get("otherData", {}))
xs = [e for e in events if e.get("ph") == "X"]
keys = sorted({(e.get("pid", 0), e.get("tid", 0)) for e in xs})
t0 = min(e["ts"] for e in xs)
scale = 1.0 if "bubble" in other else 1e-3
d = json.load(open(boxes_path))
boxes = d["boxes"]
check(len(d["rows"]) == rows == len(keys), f"{len(d['rows'])} rows drawn, {len(keys)} (pid, tid) in the trace, {rows} expected")
per_row = Counter(b["row"] for b in boxes)
per_key = Counter((e.get("pid", 0), e.get("tid", 0)) for e in xs)
check(all(per_row[i] == per_key[k] for i, k in enumerate(keys)) and len(boxes) == len(xs),
      f"boxes per row {[per_row[i] for i in range(len(keys))]} = X events per (pid, tid) {[per_key[k] for k in keys]}")
# each box is one event: the same name, category and span (from the first event, in the axis unit)
want = sorted((i, e["name"], e["cat"], round((e["ts"] - t0) * scale, 6), round((e["ts"] + e["dur"] - t0) * scale, 6))
              for i, k in enumerate(keys) for e in xs if (e.get("pid", 0), e.get("tid", 0)) == k)
got = sorted((b["row"], b["name"], b["cat"], round(b["x0"], 6), round(b["x1"], 6)) for b in boxes)
check(want == got, f"every box at its event's row, name, cat, start and end ({len(got)} boxes)")
cats = Counter(b["category"] for b in boxes)
check(all(b["category"] == (b["cat"] if b["cat"] in ("F", "B", "W", "a2a") else "other") for b in boxes),
      f"colour categories F/B/W/a2a by cat, the rest 'other': {dict(sorted(cats.items()))}")
check(all((b["color"] == "#8c8c8c") == (b["category"] == "other") for b in boxes), "grey exactly for the other categories")
overlaps = 0
by_row = defaultdict(list)
for b in boxes:
    if b["category"] in ("F", "B", "W"): by_row[b["row"]].append((b["x0"], b["x1"]))
for r, spans in by_row.items():
    spans.sort()
    overlaps += sum(1 for a, c in zip(spans, spans[1:]) if c[0] < a[1] - 1e-9)
check(overlaps == 0, f"no F/B/W boxes overlap in a row ({overlaps} overlaps)")
labelled = [b for b in boxes if b["label"]]
check(all(b["label"] == b["name"].split(".")[0][1:] for b in labelled if b["category"] in ("F", "B", "W"))
      and all(b["label"] == b["name"].split(".")[0] for b in labelled if b["category"] == "a2a")
      and not any(b["label"] for b in boxes if b["category"] == "other"),
      f"labels are micro-batch numbers (an all-to-all's with its direction) ({len(labelled)} of {len(boxes)} labelled)")
for word in expect:
    kind, _, arg = word.partition("=")
    if kind == "labels_all":
        check(len(labelled) == sum(1 for b in boxes if b["category"] != "other"), "every F/B/W/a2a box labelled at this width")
    elif kind == "labels_none":
        check(not labelled, f"no label where the boxes are too narrow ({len(labelled)} labelled)")
    elif kind == "title":
        check(arg in d["title"], f"title has {arg!r}: {d['title']!r}")
    elif kind == "xlabel":
        check(arg in d["xlabel"], f"axis label has {arg!r}: {d['xlabel']!r}")
    elif kind == "chunks":  # F and B of chunk 0 and 1 differ in shade
        col = {(b["category"], b["chunk"]): b["color"] for b in boxes}
        check(all(col.get((c, 0)) and col.get((c, 1)) and col[(c, 0)] != col[(c, 1)] for c in "FB")
              and len({b["color"] for b in boxes if (b["category"], b["chunk"]) == ("F", 1)}) == 1,
              f"chunks 0 and 1 shaded apart: {sorted(set(col.items()))}")
    elif kind == "rowname":
        check(arg in d["rows"], f"row named {arg!r}: {d['rows']}")
    elif kind == "has":
        check(cats[arg] > 0, f"boxes of category {arg}: {cats[arg]}")
EOF
)
}

# the simulator's traces
PLOT_ARGS=()
$SIM --schedule 1f1b --pp 4 -m 8 --trace "$tmp/1f1b.json" > /dev/null && ok "pipeline_sim wrote the 1f1b pp4 m8 trace" || bad "pipeline_sim 1f1b pp4 m8"
check_plot 1f1b "$tmp/1f1b.json" 1200 4 labels_all "title=1f1b" "title=P=4" "title=m=8" "title=V=1" "title=bubble 27.3%" \
    "xlabel=units" "rowname=rank 3" has=F has=B
$SIM --schedule interleaved --pp 2 -m 4 --vpp 2 --trace "$tmp/interleaved.json" > /dev/null && ok "pipeline_sim wrote the interleaved pp2 m4 vpp2 trace" || bad "pipeline_sim interleaved pp2 m4 vpp2"
check_plot interleaved "$tmp/interleaved.json" 900 2 chunks "title=interleaved" "title=V=2" "title=bubble 11.1%"
$SIM --schedule zb-h1 --pp 4 -m 8 --trace "$tmp/zbh1.json" > /dev/null && ok "pipeline_sim wrote the zb-h1 pp4 m8 trace" || bad "pipeline_sim zb-h1 pp4 m8"
check_plot zbh1 "$tmp/zbh1.json" 1601 4 has=W "title=zb-h1"
check_plot zbh1_narrow "$tmp/zbh1.json" 300 4 labels_none
PLOT_ARGS=(--title "my title")
check_plot 1f1b_title "$tmp/1f1b.json" 800 4 "title=my title" "title=1f1b"

# a real run's shape: pid = rank with a process name, tids 0 (compute) and 1 (comm), other categories,
# epoch microseconds; as an object with otherData and as the plain list of events
python3 - "$tmp" <<'EOF'
import json, sys
ev, t0 = [], 1732300000000000.0
for r in range(2):
    ev.append({"name": "process_name", "ph": "M", "pid": r, "args": {"name": f"rank {r}"}})
    ev.append({"name": "thread_name", "ph": "M", "pid": r, "tid": 1, "args": {"name": "comm"}})
    t = t0 + r * 1500
    for mb in range(3):
        ev.append({"name": f"F{mb}", "cat": "F", "ph": "X", "pid": r, "tid": 0, "ts": t, "dur": 1400})
        ev.append({"name": "send", "cat": "send", "ph": "X", "pid": r, "tid": 0, "ts": t + 1400, "dur": 100})
        ev.append({"name": "recv", "cat": "recv", "ph": "X", "pid": r, "tid": 1, "ts": t + 200, "dur": 300})
        t += 1500
    for mb in range(3):
        ev.append({"name": f"B{mb}", "cat": "B", "ph": "X", "pid": r, "tid": 0, "ts": t, "dur": 2900})
        t += 3000
    ev.append({"name": "allreduce", "cat": "allreduce", "ph": "X", "pid": r, "tid": 1, "ts": t, "dur": 2000})
json.dump({"traceEvents": ev, "otherData": {"schedule": "1f1b", "dp": 2, "measured_bubble": 0.3142}}, open(sys.argv[1] + "/real.json", "w"))
json.dump(ev, open(sys.argv[1] + "/real_list.json", "w"))
EOF
PLOT_ARGS=()
check_plot real "$tmp/real.json" 1000 4 "xlabel=ms" "title=measured_bubble 31.4%" "title=dp=2" "rowname=rank 1 / comm" has=other
check_plot real_list "$tmp/real_list.json" 1000 4 "xlabel=ms" "rowname=rank 0 / tid 0" has=other

# an overlapped DualPipeV pair's trace (llm/parallel/pipeline_report.h's shape): each rank's ops in pieces on tid 0, the
# pair's all-to-alls of the forward on tid 1 and of the backward on tid 2 (cat a2a, from start to wait), in their colour
python3 - "$tmp" <<'EOF'
import json, sys
ev = []
for r in range(2):
    ev.append({"name": "process_name", "ph": "M", "pid": r, "args": {"name": f"rank {r}"}})
    for tid, row in enumerate(("ops", "all-to-all F", "all-to-all B")):
        ev.append({"name": "thread_name", "ph": "M", "pid": r, "tid": tid, "args": {"name": row}})
    t = 1000.0 * r
    for k in range(2):  # F3.0 and B1.1 in turns, each piece ending where its all-to-all starts
        ev.append({"name": "F3.0", "cat": "F", "ph": "X", "pid": r, "tid": 0, "ts": t, "dur": 4000, "args": {"piece": k}})
        ev.append({"name": "F3.0 L0 %s" % ("dispatch", "combine")[k], "cat": "a2a", "ph": "X", "pid": r, "tid": 1, "ts": t + 3900,
                   "dur": 4300, "args": {"piece": 0, "exposed": 300}})
        ev.append({"name": "B1.1", "cat": "B", "ph": "X", "pid": r, "tid": 0, "ts": t + 4000, "dur": 4000, "args": {"piece": k}})
        ev.append({"name": "B1.1 L3 %s" % ("dispatch", "combine")[k], "cat": "a2a", "ph": "X", "pid": r, "tid": 2, "ts": t + 7900,
                   "dur": 4300, "args": {"piece": 0, "exposed": 300}})
        t += 8000
json.dump({"traceEvents": ev, "otherData": {"schedule": "dualpipev", "measured_bubble": 0.1}}, open(sys.argv[1] + "/pair.json", "w"))
EOF
check_plot pair "$tmp/pair.json" 1200 6 labels_all "rowname=rank 0 / all-to-all F" "rowname=rank 1 / all-to-all B" has=a2a has=F has=B

# bad inputs: one line, "error: " and the file's name, a non-zero exit, no traceback, no PNG
bad_input() {  # NAME FILE
    local name=$1 file=$2 out rc lines
    out=$(python3 "$PLOT" "$file" -o "$tmp/bad_$name.png" 2>&1); rc=$?
    lines=$(printf '%s\n' "$out" | grep -c .)
    if [ $rc -ne 0 ] && [ "$lines" -eq 1 ] && [[ "$out" == "error: "*"$file"* ]] && [ ! -e "$tmp/bad_$name.png" ]; then
        ok "bad input $name: exit $rc, one line: $out"
    else
        bad "bad input $name: exit $rc, $lines lines, PNG $( [ -e "$tmp/bad_$name.png" ] && echo written || echo absent): $out"
    fi
}
bad_input missing "$tmp/no_such_trace.json"
printf '{"traceEvents":[{"ph":"X",' > "$tmp/truncated.json"
bad_input not_json "$tmp/truncated.json"
printf '{"traceEvents":[{"name":"thread_name","ph":"M","pid":0,"tid":0,"args":{"name":"rank 0"}}],"otherData":{}}\n' > "$tmp/no_x.json"
bad_input no_x_events "$tmp/no_x.json"
printf '{"foo":1}\n' > "$tmp/not_trace.json"
bad_input not_a_trace "$tmp/not_trace.json"
finish
