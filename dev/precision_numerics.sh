#!/usr/bin/env bash
# dev/precision_numerics.sh: one training run, the same model, seed and data, in every precision:
# FP32, BF16, FP16 (dynamic loss scaling) and the four FP8 recipes (on top of FP8_BASE, BF16 by
# default, as FP8 training runs on top of BF16 everywhere). Writes each run's log and console
# output under OUT/<run>/, the loss curves (scripts/plot_logs.py) as OUT/curves.png, and OUT/summary.md:
# final train/val losses, gaps to FP32, step time and, on the addition task, exact-match accuracy.
#
#   bash dev/precision_numerics.sh [--data addition|pytext] [--out DIR] [--model SPEC] [-b B] [-t T]
#                                  [--steps N] [--lr LR] [--runs fp32,bf16,fp16,delayed,current,block,mx]
#                                  [--jobs J]
#
# Defaults: d6 C=384 T=256, 300 steps on the addition task (tens of minutes on 2 cores).
# test/test_precision.sh runs a small model through this script and bounds the gaps.
# --jobs J: J runs at a time (default 1: one after the other, each on OMP_NUM_THREADS threads, by default
# every core). The runs share nothing but the data files; their lines print in the order of --runs once all
# have ended. The ms/step of runs side by side are those of a shared machine: leave J at 1 to compare speeds.
set -euo pipefail
cd "$(dirname "$0")/.."

data=addition out=out/precision model="d6,C=384,NH=6,maxT=256,V=257" B=8 T=256 steps=300 lr=1e-3
runs=fp32,bf16,fp16,delayed,current,block,mx jobs=1
FP8_BASE=${FP8_BASE:-bf16}
while [ $# -gt 0 ]; do
    case "$1" in
        --data) data=$2 ;; --out) out=$2 ;; --model) model=$2 ;; -b) B=$2 ;; -t) T=$2 ;;
        --steps) steps=$2 ;; --lr) lr=$2 ;; --runs) runs=$2 ;; --jobs) jobs=$2 ;;
        *) echo "error: dev/precision_numerics.sh: unknown argument '$1'"; exit 2 ;;
    esac
    shift 2
done
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "error: --jobs: expected a positive integer, found '$jobs'"; exit 2; }
case "$data" in
    addition) [ -f data/addition/addition_train.bin ] || python3 dev/data/addition.py --digits 3 --out data/addition > /dev/null
              prefix=data/addition/addition; eval_flags=(--eval-file data/addition/addition_test.bin) ;;
    pytext)   [ -f data/pytext/pytext_train.bin ] || python3 dev/data/pytext.py --out data/pytext > /dev/null
              prefix=data/pytext/pytext; eval_flags=() ;;
    *) echo "error: --data: expected addition or pytext, found '$data'"; exit 2 ;;
esac

# the CPU build of each storage precision (make builds what is missing or stale)
binary() {
    case "$1" in
        fp32) echo train_gpt_cpu ;; bf16) echo build/train_gpt_cpu_bf16 ;; fp16) echo build/train_gpt_cpu_fp16 ;;
        *) echo "error: no build for precision '$1'" >&2; exit 2 ;;
    esac
}
IFS=, read -r -a list <<< "$runs"
bins=()
for r in "${list[@]}"; do
    case "$r" in fp32|bf16|fp16) bins+=("$(binary "$r")") ;; delayed|current|block|mx) bins+=("$(binary "$FP8_BASE")") ;;
        *) echo "error: --runs: expected fp32,bf16,fp16,delayed,current,block,mx, found '$r'"; exit 2 ;; esac
done
make -s $(printf '%s\n' "${bins[@]}" | sort -u)

mkdir -p "$out"
common=(--model "$model" --train-data "${prefix}_train.bin" --val-data "${prefix}_val.bin" -b "$B" -t "$T"
        --steps "$steps" --lr "$lr" --warmup $((steps / 10)) --lr-final 0.1 --weight-decay 0.1 --seed 1337
        --val-every $((steps / 10)) --val-steps 8 --sample-every 0 "${eval_flags[@]}")
rm -f "$out/runs.txt.tmp"
echo "precision runs: $data, $model, B=$B T=$T, $steps steps; logs under $out/"
# one_run R: the run R; its console line to $out/R/line.txt, its row of runs.txt to $out/R/row.txt
one_run() {
    local r=$1 bin extra label t0 acc ms bpp act
    case "$r" in
        fp32|bf16) bin=$(binary "$r"); extra=(); label=${r^^} ;;
        fp16) bin=$(binary fp16); extra=(--loss-scale dynamic); label=FP16 ;;
        *) bin=$(binary "$FP8_BASE"); extra=(--fp8 "$r"); label="FP8-$r" ;;
    esac
    rm -rf "${out:?}/$r"; mkdir -p "$out/$r"
    t0=$(date +%s)
    if ! OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)} "./$bin" "${common[@]}" "${extra[@]}" --output-dir "$out/$r" \
            > "$out/$r/stdout.txt" 2>&1; then
        { printf '  %-12s %s ... ' "$label" "$bin"; echo "FAILED (exit $?): $out/$r/stdout.txt"; tail -3 "$out/$r/stdout.txt"; } > "$out/$r/line.txt"
        return 1
    fi
    acc=$(sed -nE 's/^held-out exact-match accuracy: ([0-9.]+)%.*/\1/p' "$out/$r/stdout.txt")
    ms=$(sed -nE 's/^average step time ([0-9.]+) ms.*/\1/p' "$out/$r/stdout.txt")
    printf '  %-12s %s ... %s\n' "$label" "$bin" "$(( $(date +%s) - t0 )) s, ${ms:-?} ms/step${acc:+, exact match $acc%}" > "$out/$r/line.txt"
    # memory (the tagged allocator's report): model-state bytes per parameter and activation bytes per layer
    bpp=$(sed -nE 's/.*= ([0-9.]+) B\/parameter measured \| ZeRO paper \(Table 1\) predicts ([0-9+]+) = ([0-9.]+) B\/parameter.*/\1 \2=\3/p' "$out/$r/stdout.txt" | head -1)
    act=$(sed -nE 's/.*activations per layer per micro-batch.*: ([0-9]+) B measured \| ([0-9]+) B predicted.*/\1 \2/p' "$out/$r/stdout.txt" | head -1)
    echo "$label $r ${ms:-nan} ${acc:-nan} ${bpp:-nan nan} ${act:-nan nan}" > "$out/$r/row.txt"
}
# the runs, --jobs at a time; then their lines and rows in the order of --runs (the first failure ends the script)
for r in "${list[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
    one_run "$r" &
done
wait
labels=()
for r in "${list[@]}"; do
    cat "$out/$r/line.txt" 2>/dev/null || echo "  $r: the run printed no line (see $out/$r/stdout.txt)"
    [ -f "$out/$r/row.txt" ] || exit 1
    cat "$out/$r/row.txt" >> "$out/runs.txt.tmp"
    label=$(cut -d' ' -f1 "$out/$r/row.txt")
    labels+=("$label=$out/$r/log.jsonl")
done
mv "$out/runs.txt.tmp" "$out/runs.txt"
{
    echo "# precision runs: $data, $model, B=$B T=$T, $steps steps, lr $lr, seed 1337 (FP8 on $FP8_BASE)"
    echo
    python3 scripts/plot_logs.py --out "$out/curves.png" --ref FP32 --smooth 10 \
        --title "$data, $model, B=$B T=$T: train loss per precision" "${labels[@]}" | grep -v '^wrote'
    echo
    echo "| run | ms/step | exact match (%) | model states, B/param measured | ZeRO paper | activations/layer, B measured | predicted |"
    echo "|---|---|---|---|---|---|---|"
    while read -r label r ms acc bpp formula act actp; do
        echo "| $label | $ms | $acc | $bpp | ${formula/=/ = } | $act | $actp |"
    done < "$out/runs.txt"
} > "$out/summary.md"
cat "$out/summary.md"
echo "wrote $out/summary.md and $out/curves.png"
