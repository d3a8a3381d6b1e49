#!/usr/bin/env bash
# dev/bench_llmc.sh: this trainer beside llm.c's CPU trainer (train_gpt2.c) in the same run, each run as a user
# runs it: llm.c's program unchanged, built by its own Makefile, in a directory holding the files it opens
# (gpt2_124M.bin, dev/data/tinyshakespeare/tiny_shakespeare_{train,val}.bin), and ./train_gpt_cpu with the same
# model file, the same token files and llm.c's settings (B=4, T=64, 40 steps, AdamW lr 1e-4, betas 0.9 / 0.999,
# no weight decay, no clipping, val every 10 steps over 5 batches, a sample every 20). The two alternate, ROUNDS
# times each, so that both see the machine in the same state; each run's step time is the median of its steps
# 1..40 (llm.c's "took N ms", this trainer's log.jsonl "ms"), and the line at the end is the median over rounds.
#
#   bash dev/bench_llmc.sh LLMC_DIR [ROUNDS]     (a checkout of https://github.com/karpathy/llm.c; default 3 rounds)
#   THREADS=2 (OMP_NUM_THREADS of both), MODEL="d4,C=256,NH=4,maxT=256,V=50257" (llm.c's small comparison config)
#
# The model file is this trainer's fresh init written in llm.c's format (docs/formats: byte for byte), the tokens
# are random ids in llm.c's shard format: the step time does not depend on their values. Not a test: it needs
# llm.c, which this project does not ship.
set -euo pipefail
cd "$(dirname "$0")/.."
LLMC=${1:-}
ROUNDS=${2:-3}
THREADS=${THREADS:-2}
MODEL=${MODEL:-d4,C=256,NH=4,maxT=256,V=50257}
if [ -z "$LLMC" ] || [ "$LLMC" = --help ] || [ "$LLMC" = -h ]; then
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
    [ -z "$LLMC" ] && exit 1 || exit 0
fi
if [ ! -f "$LLMC/train_gpt2.c" ] || [ ! -f "$LLMC/Makefile" ]; then
    echo "error: dev/bench_llmc.sh: expected a checkout of llm.c (train_gpt2.c and its Makefile) at '$LLMC', found none" >&2
    exit 1
fi
if ! [[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]]; then
    echo "error: dev/bench_llmc.sh: ROUNDS: expected a positive integer, found '$ROUNDS'" >&2
    exit 1
fi
LLMC=$(cd "$LLMC" && pwd)
PY=python3
[ -x .venv/bin/python3 ] && PY=.venv/bin/python3

echo "== building llm.c's train_gpt2 with its Makefile ($LLMC) and this trainer (make train_gpt_cpu)"
make -C "$LLMC" train_gpt2 > /dev/null
make train_gpt_cpu > /dev/null

W=$(mktemp -d /tmp/bench_llmc.XXXXXX)
echo "== work directory: $W (the logs of every run)"
mkdir -p "$W/dev/data/tinyshakespeare"
# random token ids in llm.c's shard format: 256 int32 (magic 20240520, version 1, count), then uint16 tokens
"$PY" - "$W/dev/data/tinyshakespeare" <<'EOF'
import array, random, struct, sys
rng = random.Random(1337)
for name, n in (("tiny_shakespeare_train.bin", 200000), ("tiny_shakespeare_val.bin", 40000)):
    header = array.array("i", [20240520, 1, n] + [0] * 253)
    tokens = array.array("H", (rng.randrange(50257) for _ in range(n)))
    with open(f"{sys.argv[1]}/{name}", "wb") as f:
        f.write(header.tobytes()); f.write(tokens.tobytes())
EOF
TRAIN=$W/dev/data/tinyshakespeare/tiny_shakespeare_train.bin VAL=$W/dev/data/tinyshakespeare/tiny_shakespeare_val.bin
# the model: this trainer's init of MODEL after one step, saved in llm.c's checkpoint format
OMP_NUM_THREADS=$THREADS ./train_gpt_cpu --model "$MODEL" -i "$TRAIN" -j "" -b 4 -t 64 --steps 1 --checkpoint-every 1 \
    --sample-every 0 -o "$W/init" > "$W/init.log" 2>&1 || { echo "error: dev/bench_llmc.sh: writing the model failed: $W/init.log" >&2; exit 1; }
cp "$W/init/model_00000001.bin" "$W/gpt2_124M.bin"

median() {  # the median of the numbers on stdin, one per line; N: how many there must be (or any)
    sort -g | awk -v n="${1:-0}" '{ a[NR] = $1 } END { if (n > 0 && NR != n) exit 1; print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
llmc_run() {  # llmc_run ROUND: llm.c's median step ms
    (cd "$W" && OMP_NUM_THREADS=$THREADS "$LLMC/train_gpt2" > "$W/llmc_$1.log" 2>&1) ||
        { echo "error: dev/bench_llmc.sh: llm.c's train_gpt2 failed: $W/llmc_$1.log" >&2; exit 1; }
    sed -nE 's/^step ([0-9]+): train loss [^ ]+ \(took ([0-9.]+) ms\)$/\1 \2/p' "$W/llmc_$1.log" |
        awk '$1 >= 1 { print $2 }' | median 40
}
ours_run() {  # ours_run ROUND: this trainer's median step ms
    OMP_NUM_THREADS=$THREADS ./train_gpt_cpu --model "$W/gpt2_124M.bin" -i "$TRAIN" -j "$VAL" --tokenizer "" -b 4 -t 64 \
        --steps 41 --lr 1e-4 --beta1 0.9 --beta2 0.999 --eps 1e-8 --weight-decay 0 --grad-clip 0 --val-every 10 --val-steps 5 \
        --sample-every 20 --shuffle 0 -o "$W/ours_$1" > "$W/ours_$1.log" 2>&1 ||
        { echo "error: dev/bench_llmc.sh: ./train_gpt_cpu failed: $W/ours_$1.log" >&2; exit 1; }
    "$PY" -c 'import json, sys
print("\n".join(str(r["ms"]) for r in map(json.loads, open(sys.argv[1])) if "ms" in r and r["step"] >= 2))' \
        "$W/ours_$1/log.jsonl" | median 40
}

cpu="$(sed -nE 's/^model name[[:space:]]*: (.*)/\1/p' /proc/cpuinfo | head -1) (family $(sed -nE 's/^cpu family[[:space:]]*: //p' /proc/cpuinfo | head -1) model $(sed -nE 's/^model[[:space:]]*: //p' /proc/cpuinfo | head -1);$(grep -m1 '^flags' /proc/cpuinfo | grep -oE ' (avx2|avx512f|avx512_bf16|amx_tile)\b' | tr -d '\n'))"
echo "== $ROUNDS rounds, alternating, $THREADS threads each, on: $cpu, $(nproc) cores, $(date -u +%Y-%m-%d)"
L=() O=()
for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) -eq 1 ]; then l=$(llmc_run "$r"); o=$(ours_run "$r"); else o=$(ours_run "$r"); l=$(llmc_run "$r"); fi
    L+=("$l"); O+=("$o")
    printf 'round %d: llm.c train_gpt2.c %.1f ms/step | ./train_gpt_cpu %.1f ms/step | %.2fx\n' "$r" "$l" "$o" "$(awk -v a="$l" -v b="$o" 'BEGIN { print a / b }')"
done
ml=$(printf '%s\n' "${L[@]}" | median)
mo=$(printf '%s\n' "${O[@]}" | median)
grep -m1 '^blas:\|mfu:' "$W/ours_1.log" || true
printf 'median of %d rounds (%s, B=4 T=64, %d threads): llm.c %.1f ms/step, this trainer %.1f ms/step: %.2fx llm.c\n' \
    "$ROUNDS" "$MODEL" "$THREADS" "$ml" "$mo" "$(awk -v a="$ml" -v b="$mo" 'BEGIN { print a / b }')"
