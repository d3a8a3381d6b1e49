#!/usr/bin/env bash
# dpv_overlap_demo.sh: DualPipeV's overlapped pairs measured (docs/moe.md, "DualPipeV's overlap"). The same short
# training of a mixture-of-experts model under dualpipev pp 2 x ep 2 (-np 4, the CPU build: its all-to-alls over Open
# MPI), with --overlap-pairs 1 and 0 in turn, REPS times each, every run traced (--trace: its last step). For each run
# it prints the last step's time and, over the trace's all-to-alls (every rank's; each from its start to its wait's
# end), the time in flight, the time the host spent in their starts and waits (exposed), and the part of their flight
# during which the other direction of the pair computed; then the mean exposed time with and without the overlap and
# the share of the non-overlapped runs' all-to-all time the overlap hid (1 - exposed on / exposed off). It draws the
# first overlapped run's trace (scripts/plot_trace.py: a row per rank for its ops, two under it for the pair's
# all-to-alls of the forward and of the backward), and the first run without the overlap beside it (OUT_PNG's name
# with _off).
#
#   bash dev/dpv_overlap_demo.sh [OUT_PNG]   (default docs/moe_dualpipev_overlap.png; needs ./train_gpt_cpu, mpirun)
#
# Model: d4, C=128, NH=4, E=8 experts, top-2, capacity factor 1.25, -b 8 -t 64, 8 micro-batches a step, 3 steps, one
# thread a rank. Runs and logs in build/dpv_overlap/.
set -eu
cd "$(dirname "$0")/.."
OUT_PNG=${1:-docs/moe_dualpipev_overlap.png}
CPU=${CPU:-./train_gpt_cpu}
REPS=${REPS:-3}
W=build/dpv_overlap
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
[ -x "$CPU" ] || { echo "error: $CPU not built (make train_gpt_cpu)" >&2; exit 1; }
rm -rf "$W"; mkdir -p "$W"
python3 dev/data/addition.py --train 3000 --val 200 --test 20 --out "$W/data" > /dev/null
common=(--train-data "$W/data/addition_train.bin" --val-data "$W/data/addition_val.bin" --tokenizer "$W/data/addition_tokenizer.bin"
        --model d4,C=128,NH=4,maxT=64,V=257 --experts 8 --top-k 2 --capacity-factor 1.25 -b 8 -t 64 --total-batch 8192
        --steps 3 --lr 1e-3 --seed 1337 --val-every 0 --sample-every 0 --checkpoint-every 0
        --ep 2 --pp 2 --schedule dualpipev)
for rep in $(seq 1 "$REPS"); do
    for ov in 1 0; do
        name=r${rep}_ov$ov
        mpirun -q --oversubscribe -x OMP_NUM_THREADS -np 4 "$CPU" "${common[@]}" --overlap-pairs $ov --trace "$W/$name.json" \
            --output-dir "$W/$name" > "$W/$name.log" 2>&1 || { echo "error: run $name failed: see $W/$name.log" >&2; exit 1; }
    done
done
python3 - "$W" "$REPS" <<'EOF'
import json, os, re, sys
W, reps = sys.argv[1], int(sys.argv[2])
def stats(name):
    xs = [e for e in json.load(open(os.path.join(W, name + ".json")))["traceEvents"] if e.get("ph") == "X"]
    a2a = [e for e in xs if e["cat"] == "a2a"]
    comp = [e for e in xs if e["cat"] in ("F", "B")]
    inside = 0.0
    for a in a2a:  # the other direction's compute within the all-to-all's flight
        for c in comp:
            if c["pid"] == a["pid"] and c["cat"] != a["name"][0]:
                inside += max(0.0, min(a["ts"] + a["dur"], c["ts"] + c["dur"]) - max(a["ts"], c["ts"]))
    step = [l for l in open(os.path.join(W, name + ".log")) if re.match(r"^step\s+\d", l)][-1]
    ms = float(re.search(r"\|\s*([\d.]+) ms", step).group(1))
    return len(a2a), sum(a["dur"] for a in a2a) / 1e3, sum(a["args"]["exposed"] for a in a2a) / 1e3, inside / 1e3, ms
print("| run | overlap | last step (ms) | all-to-alls | in flight (ms) | exposed: start + wait (ms) | other direction computing inside (ms) |")
print("|---|---|---|---|---|---|---|")
exp = {0: [], 1: []}
for rep in range(1, reps + 1):
    for ov in (1, 0):
        n, fl, ex, ins, ms = stats("r%d_ov%d" % (rep, ov))
        exp[ov].append(ex)
        print("| %d | %d | %.0f | %d | %.0f | %.0f | %.0f |" % (rep, ov, ms, n, fl, ex, ins))
on, off = sum(exp[1]) / reps, sum(exp[0]) / reps
print("\nmean exposed all-to-all time per step (all 4 ranks): overlapped %.0f ms, not %.0f ms: %.0f%% of it hidden" % (
    on, off, 100 * (1 - on / off)))
EOF
python3 scripts/plot_trace.py "$W/r1_ov1.json" -o "$OUT_PNG" --width 1600 \
    --title "dualpipev pp 2 x ep 2, train_gpt_cpu -np 4 (Open MPI), --overlap-pairs 1: ops and the pairs' all-to-alls in flight"
OFF_PNG=${OUT_PNG%.png}_off.png
python3 scripts/plot_trace.py "$W/r1_ov0.json" -o "$OFF_PNG" --width 1600 \
    --title "the same, --overlap-pairs 0: each pair's F, then its B; every all-to-all waited at once"
echo "wrote $OUT_PNG and $OFF_PNG"
