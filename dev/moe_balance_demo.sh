#!/usr/bin/env bash
# moe_balance_demo.sh: the collapse that load balancing prevents, drawn (docs/moe.md, "Balancing measured"). Three
# short trainings of the same small mixture-of-experts model on the same addition data (dev/data/addition.py), from
# the same seed, that differ only in how the router is balanced:
#   none  --aux-loss-coef 0 --z-loss-coef 0 --expert-bias-rate 0   (nothing pulls the router back)
#   aux   --aux-loss-coef $AUX --z-loss-coef 0                      (Switch's load-balancing loss)
#   bias  --aux-loss-coef 0 --z-loss-coef 0 --expert-bias-rate $RATE (DeepSeek-V3's aux-loss-free bias)
# then scripts/plot_experts.py draws each expert's share of the tokens over the steps, per run and moe layer, and
# prints the largest shares (markdown).
#
#   bash dev/moe_balance_demo.sh [OUT_PNG]      (default docs/moe_expert_share.png; needs ./train_gpt_cpu)
#
# Model: d2, C=64, NH=4, E=8 experts, top-1 (Switch), no capacity limit (--capacity-factor 0: nothing dropped, the
# shares are the router's choices alone), -b 8 -t 64, lr 6e-4, 300 steps, one thread (about 10 s a run).
# Runs and logs in build/moe_balance/.
set -eu
cd "$(dirname "$0")/.."
OUT_PNG=${1:-docs/moe_expert_share.png}
CPU=${CPU:-./train_gpt_cpu}
AUX=${AUX:-0.01}
RATE=${RATE:-0.001}
STEPS=${STEPS:-300}
W=build/moe_balance
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
[ -x "$CPU" ] || { echo "error: $CPU not built (make train_gpt_cpu)" >&2; exit 1; }
rm -rf "$W"; mkdir -p "$W"
python3 dev/data/addition.py --train 20000 --val 500 --test 20 --out "$W/data" > /dev/null
common=(--train-data "$W/data/addition_train.bin" --val-data "$W/data/addition_val.bin" --tokenizer "$W/data/addition_tokenizer.bin"
        --model d2,C=64,NH=4,maxT=64,V=257 --experts 8 --top-k 1 --capacity-factor 0 -b 8 -t 64 --steps "$STEPS" --lr 6e-4
        --seed 1337 --val-every 0 --sample-every 0 --checkpoint-every 0 --print-every 50)
run() {
    local name=$1; shift
    "$CPU" "${common[@]}" --output-dir "$W/$name" "$@" > "$W/$name.log" 2>&1 || { echo "error: run $name failed: see $W/$name.log" >&2; exit 1; }
    echo "$name: $(grep -E '^step' "$W/$name.log" | tail -1)"
}
run none --aux-loss-coef 0 --z-loss-coef 0 --expert-bias-rate 0
run aux --aux-loss-coef "$AUX" --z-loss-coef 0
run bias --aux-loss-coef 0 --z-loss-coef 0 --expert-bias-rate "$RATE"
python3 scripts/plot_experts.py --out "$OUT_PNG" --title "E = 8, top-1, d2 C=64, addition data, lr 6e-4: each expert's share of the tokens (dashed: 1/E)" \
    "no balancing=$W/none/log.jsonl" "aux loss $AUX=$W/aux/log.jsonl" "bias rate $RATE=$W/bias/log.jsonl"
