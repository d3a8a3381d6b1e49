#!/usr/bin/env bash
# test_plot_experts.sh: scripts/plot_experts.py draws each expert's share of the tokens from log.jsonl's
# "moe_routed" counts. On two small logs written here (moe layers 0 and 2, E = 4; one with a resume mark after
# step 3 whose steps 4..7 logged before it are another course, and a rollback), checked against shares computed
# here from the counts this script wrote: the script's --dump (the steps kept, the layers, every share to 1e-12),
# its markdown table (largest share at the last step, at any step, the means), --layer 2 (that layer alone), the
# PNG (magic bytes, 420 pixels wide per run). Then the bad inputs: one line "error: ..." naming the file or flag,
# exit 1. Ends with "plot_experts: N passed, M failed".
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0
ok()  { echo "ok   $*"; pass=$((pass+1)); }
bad() { echo "FAIL $*"; fail=$((fail+1)); }
finish() { echo "plot_experts: $pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit; }
PLOT=scripts/plot_experts.py
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if ! python3 -c "import matplotlib" > /dev/null 2>&1; then
    bad "matplotlib is missing: run bash scripts/deps.sh test (or python3 -m pip install matplotlib)"; finish
fi

# the logs: run a has steps 1..7, a resume from step 3 (steps 4..7 dropped: 7 is never logged again), steps 4..6 again, a rollback from 6 to 5
# (step 6 dropped), step 6 again; run b steps 1..4, collapsing onto expert 3. Counts: moe layers 0 and 2, E = 4.
python3 - "$tmp" <<'EOF'
import json, sys
tmp = sys.argv[1]
def line(f, step, routed, **kw):
    o = {"step": step, "train_loss": 5.0 - 0.1 * step, "moe_layers": [0, 2], "moe_routed": routed,
         "moe_dropped": [[0] * 4 for _ in routed]}
    o.update(kw)
    f.write(json.dumps(o) + "\n")
with open(tmp + "/a.jsonl", "w") as f:
    f.write(json.dumps({"step": 0, "val_loss": 5.5}) + "\n")
    for s in range(1, 8):
        line(f, s, [[10 * s, 20, 30, 40], [64, 0, 0, 36 + s]])
    f.write(json.dumps({"step": 3, "resumed_from": "x/state_00000003.bin"}) + "\n")
    for s in range(4, 7):
        line(f, s, [[1, 2, 3, 4 * s], [7, 7, 7, 7]])
    f.write(json.dumps({"step": 6, "rollback_to": 5, "reason": "test"}) + "\n")
    line(f, 6, [[0, 0, 5, 95], [25, 25, 25, 25]])
with open(tmp + "/b.jsonl", "w") as f:
    for s in range(1, 5):
        line(f, s, [[25 - 5 * s, 25, 25, 25 + 5 * s], [100 - 25 * s, 0, 0, 25 * s]])
with open(tmp + "/dense.jsonl", "w") as f:
    f.write(json.dumps({"step": 1, "train_loss": 5.0}) + "\n")
with open(tmp + "/ragged.jsonl", "w") as f:
    f.write(json.dumps({"step": 1, "moe_layers": [0, 2], "moe_routed": [[1, 2, 3, 4], [1, 2]]}) + "\n")
with open(tmp + "/garbage.jsonl", "w") as f:
    f.write("{not json\n")
EOF

if out=$(python3 "$PLOT" --out "$tmp/ab.png" --dump "$tmp/ab.json" "run a=$tmp/a.jsonl" "run b=$tmp/b.jsonl" 2>&1); then
    ok "plot_experts.py on two logs exits 0"
else
    bad "plot_experts.py failed: $out"; finish
fi
echo "$out" > "$tmp/ab.out"
python3 "$PLOT" --out "$tmp/l2.png" --dump "$tmp/l2.json" --layer 2 "run a=$tmp/a.jsonl" > "$tmp/l2.out" 2>&1 || bad "--layer 2 failed: $(cat "$tmp/l2.out")"

while IFS= read -r l; do case $l in "ok   "*) ok "${l#ok   }" ;; *) bad "${l#FAIL }" ;; esac; done < <(python3 - "$tmp" <<'EOF' 2>&1
import json, struct, sys
tmp = sys.argv[1]
def check(c, what): print(("ok   " if c else "FAIL ") + what)
# what the logs hold, as this script wrote them: run a's course is steps 1..3 of the first part, 4, 5 of the
# second, 6 of the last; run b's steps 1..4
a = {s: [[10 * s, 20, 30, 40], [64, 0, 0, 36 + s]] for s in (1, 2, 3)}
a.update({s: [[1, 2, 3, 4 * s], [7, 7, 7, 7]] for s in (4, 5)})
a[6] = [[0, 0, 5, 95], [25, 25, 25, 25]]
b = {s: [[25 - 5 * s, 25, 25, 25 + 5 * s], [100 - 25 * s, 0, 0, 25 * s]] for s in (1, 2, 3, 4)}
def shares(run, layer):
    return [[c / sum(run[s][layer]) for c in run[s][layer]] for s in sorted(run)]
d = json.load(open(tmp + "/ab.json"))
for label, run in (("run a", a), ("run b", b)):
    got = d.get(label, {})
    good = got.get("steps") == sorted(run) and got.get("layers") == [0, 2]
    err = max(abs(x - y) for l in (0, 1) for gs, ws in zip(got.get("shares", [[], []])[l], shares(run, l))
              for x, y in zip(gs, ws)) if good else 1.0
    check(good and err < 1e-12, "%s: --dump's steps %s (resume and rollback marks applied), layers %s, shares max err %.2g" % (
          label, got.get("steps"), got.get("layers"), err))
# the table: largest share at the last step, at any step, mean over all steps, mean over the last 10% (>= 1 step)
rows = [l.split("|")[1:-1] for l in open(tmp + "/ab.out") if l.startswith("| run a") or l.startswith("| run b")]
want = []
for label, run in (("run a", a), ("run b", b)):
    for li, l in enumerate((0, 2)):
        mx = [max(r) for r in shares(run, li)]
        want.append([label, str(l), "4", str(len(run)), "%.3f" % mx[-1], "%.3f" % max(mx), "%.3f" % (sum(mx) / len(mx)),
                     "%.3f" % mx[-1]])
got = [[c.strip() for c in r] for r in rows]
check(got == want, "the table's rows = the shares' largest values (%d rows): %s" % (len(got), got if got != want else "same"))
l2 = json.load(open(tmp + "/l2.json")).get("run a", {})
check(l2.get("layers") == [2] and len(l2.get("shares", [])) == 1 and
      max(abs(x - y) for gs, ws in zip(l2["shares"][0], shares(a, 1)) for x, y in zip(gs, ws)) < 1e-12,
      "--layer 2: that moe layer alone, its shares")
for name, runs in (("ab", 2), ("l2", 1)):
    head = open("%s/%s.png" % (tmp, name), "rb").read(24)
    w, h = struct.unpack(">II", head[16:24])
    check(head[:8] == b"\x89PNG\r\n\x1a\n" and w == 420 * runs and h > 100,
          "%s.png: a PNG %d x %d pixels (420 wide per run, %d runs)" % (name, w, h, runs))
EOF
)

# bad inputs: one line naming the file or flag, exit 1
badrun() {  # NAME SUBSTRING ARGS...
    local name=$1 sub=$2; shift 2
    local out rc
    out=$(python3 "$PLOT" --out "$tmp/bad.png" "$@" 2>&1); rc=$?
    if [ $rc -eq 1 ] && [ "$(printf '%s\n' "$out" | grep -c .)" -eq 1 ] && [[ "$out" == "error: "*"$sub"* ]] && [ ! -e "$tmp/bad.png" ]; then
        ok "bad input $name: exit 1, one line: $out"
    else bad "bad input $name: exit $rc: $out"; fi
}
badrun missing "$tmp/none.jsonl" "x=$tmp/none.jsonl"
badrun dense "$tmp/dense.jsonl" "x=$tmp/dense.jsonl"
badrun ragged "$tmp/ragged.jsonl: line 1" "x=$tmp/ragged.jsonl"
badrun garbage "$tmp/garbage.jsonl: line 1" "x=$tmp/garbage.jsonl"
badrun layer "--layer 1" --layer 1 "x=$tmp/a.jsonl"
badrun label "LABEL=PATH" "$tmp/a.jsonl"
finish
