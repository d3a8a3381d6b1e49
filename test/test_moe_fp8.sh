#!/usr/bin/env bash
# test_moe_fp8.sh: a GPT-2 with experts under --fp8 (llm/model/moe.h: each expert's fc and fcproj an FP8 linear
# with its own entries, llm/precision/fp8_linear.h): the experts really are quantized, each in its own entries,
# in one process and under --ep 2; ep 2 against one process; FP8 against FP32; the FP8 state resumes bit for bit.
#
#   bash test/test_moe_fp8.sh   (needs ./train_gpt_cpu, build/train_gpt_emu, mpirun; about 13 s on 2 cores)
#
# The model: d2, C = 64, 4 experts per layer (every layer), top-2, 2 micro-batches of 4 x 32 tokens per step (one
# per rank under ep 2, which folds onto dp 2), from one seed checkpoint. The FP8 GEMMs are the CPU build's
# (the FP8 rounding emulated exactly; test/test_fp8_linear.cu checks them, and the per-expert amax history
# rules, against a reference in the CPU and the emulated CUDA builds).
#  1. The per-expert entries (delayed scaling; test/ddp_zero_check.py fp8moe, step-1 state file): each expert's
#     fc and fcproj W amax equals max |W| of that expert's weights in the seed model file (numpy-free: the
#     file's floats read in Python), exactly (an amax is a max: exact), for all 2 layers x 4 experts x 2
#     linears; each expert's x amax > 0 (it ran in FP8); the dense MLP's entries of a moe layer empty. In one
#     process and under ep 2 (rank r runs experts 2r, 2r+1: their global entries; the world max of the table
#     brings them together), and ep 2's x amaxes of the first layer's experts' fc against one process's within
#     FP8_TOL (the max of the same rows of LN2's output, which only the FP32 last bits of the attention half
#     can move; the other experts' inputs come out of FP8 GEMMs whose step-1 current scales depend on how the
#     rows are grouped, an FP8 rounding apart: measured up to 1.7e-2; measured here: 0). Mutations
#     f-moe-fp8-local-slot (the local expert index: under ep 2 rank 1 writes into experts 0 and 1) and
#     f-moe-fp8-one-slot (fcproj in fc's entries). And current scaling's state file of ep 2 (1 step): every
#     expert's exported fc and fcproj W scale = 448 / max |W| rounded to FP32 (each rank runs half the experts;
#     the export takes each expert's scale from its rank over GROUP_EP: f-fp8-export-ep).
#  2. ep 2 against one process (2 micro-batches), --fp8 delayed and --fp8 block: 4 steps, losses and grad
#     norms within LOSS_TOL, final parameters within PARAM_TOL (test_fp8_train.sh's dp 2 bounds: FP8 flips
#     compound through Adam's updates; a lost expert gradient or update moves them by > 1e-2 and ~1e-1).
#     Block scaling's first-step loss within FIRST_TOL too: its forward tiles (1 x 128 of x along C, 128 x 128
#     of W) lie within a row, so an expert's rows quantize the same whether they arrive from one micro-batch
#     or from both ranks (measured 0 here). Per-tensor recipes scale an expert's rows by the amax of all the
#     rows of its GEMM, which under ep 2 are both micro-batches' (as Transformer Engine's grouped GEMM does):
#     their first step differs from one process by an FP8 rounding, hence only the 4-step bounds there.
#  2b. The emulated CUDA build (the CUDA code path: amax and quantize kernels per expert, the emulated cuBLASLt's
#     FP8 GEMMs), one step of --fp8 delayed: the same per-expert check as 1 against the seed model file, and the
#     first step's loss against the CPU build's within FIRST_TOL (measured 9e-8: FP32 sums in other orders).
#  2c. The experts under cp 2, under tp 2 + sp and under cp 2 x tp 2 + sp (-np 4; their routing the whole micro-batch's),
#     --fp8 delayed: the per-expert entries as in 1 (each expert ran in FP8: the bounds below alone would pass experts
#     left in floatX), and against one process within the 4-step bounds of 2.
#  3. FP8 against FP32 (the same model, seed and data): the final train and val losses of the 4 steps within
#     BOUND = 0.03 nats, test_precision.sh's bound for the dense model's FP8 recipes against FP32.
#  4. Resume: --fp8 delayed, 2 steps, the state file, 2 more steps, against 4 steps in one run: the same
#     bytes (the experts' amax histories are in the state file); and ep 2's state of step 2 resumed by one
#     process against one process's 4 steps within the 4-step bounds of 2.
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
CPU=${CPU:-./train_gpt_cpu}
EMU=${EMU:-./build/train_gpt_emu}
CHECK="python3 test/ddp_zero_check.py"
LOG=build/moe_fp8
mkdir -p "$LOG"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source test/mpi_lib.sh  # MPIRUN, ok, bad, check, train
FIRST_TOL=1e-5
FP8_TOL=1e-3
LOSS_TOL=5e-3
PARAM_TOL=1e-2
BOUND=0.03

python3 dev/data/addition.py --train 3000 --val 200 --test 20 --out "$tmp/data" > /dev/null
D="$tmp/data"
M=(--model d2,C=64,NH=4,maxT=64,V=257 --experts 4 --top-k 2)
base=(--train-data "$D/addition_train.bin" --val-data "$D/addition_val.bin" -b 4 -t 32 --steps 4 --lr 1e-3 --warmup 1
      --lr-final 0.1 --weight-decay 0.1 --val-every 2 --val-steps 1 --sample-every 0 --checkpoint-every 2 --grad-clip 0
      --total-batch 256)
timeout 120 "$CPU" "${M[@]}" "${base[@]}" --steps 1 --lr 0 --checkpoint-every 1 --val-every 0 --total-batch 128 \
    --output-dir "$tmp/seed" > "$LOG/seed.log" 2>&1 || bad "seed checkpoint: see $LOG/seed.log"
SEED="$tmp/seed/model_00000001.bin"
common=("${base[@]}" --model "$SEED")

# 1. and 2.
train fp32 0 "$CPU"
for r in delayed block; do
    extra=(); [ $r = delayed ] && extra=(--checkpoint-every 1)
    train ${r}_one 0 "$CPU" --fp8 $r "${extra[@]}" && train ${r}_ep2 2 "$CPU" --fp8 $r --ep 2 "${extra[@]}" || continue
    if [ $r = delayed ]; then
        check fp8moe "--fp8 delayed, 1 process: the experts' own entries" "$tmp/delayed_one" "$SEED"
        check fp8moe "--fp8 delayed, ep 2: the experts' own (global) entries, x vs 1 process" "$tmp/delayed_ep2" "$SEED" \
            "$tmp/delayed_one" $FP8_TOL
    else
        check first "--fp8 block: ep 2 vs 1 process (2 micro-batches)" "$tmp/block_ep2" "$tmp/block_one" $FIRST_TOL
    fi
    check compare "--fp8 $r: ep 2 vs 1 process (2 micro-batches)" "$tmp/${r}_ep2" "$tmp/${r}_one" $LOSS_TOL $PARAM_TOL
done

# 2c. The experts under cp 2, under tp 2 + sp and under both (llm/sharded/moe_sequence.h: every rank routes the whole
# micro-batch and runs its own tokens' rows through the FP8 experts; the amaxes are max-reduced as under dp): --fp8
# delayed against one process within the 4-step bounds of 2 (a rank's per-tensor step-1 scales see part of the rows,
# an FP8 rounding apart)
for lay in "cp2:2:--cp 2" "sp2:2:--tp 2 --sequence-parallel 1" "cpsp:4:--cp 2 --tp 2 --sequence-parallel 1"; do
    n=${lay%%:*}; f=${lay#*:}; np=${f%%:*}; f=${f#*:}
    # shellcheck disable=SC2086
    train delayed_$n "$np" "$CPU" --fp8 delayed $f --checkpoint-every 1 || continue
    # (the entries first: the comparison's bounds alone would pass experts left in floatX, FP8 against FP32 being
    # about 1e-3 apart)
    check fp8moe "--fp8 delayed, experts under $f: the experts' own entries" "$tmp/delayed_$n" "$SEED"
    check compare "--fp8 delayed, experts under $f: vs 1 process" "$tmp/delayed_$n" "$tmp/delayed_one" $LOSS_TOL $PARAM_TOL
done
# the emulated CUDA build (FP32: the kernels, the emulated cuBLASLt's FP8 GEMMs), one step of delayed scaling
common=("${base[@]}" --model "$SEED" --steps 1 --val-every 0 --checkpoint-every 1)
train delayed_emu 0 "$EMU" --fp8 delayed &&
    check fp8moe "--fp8 delayed, emulated CUDA build: the experts' own entries" "$tmp/delayed_emu" "$SEED" &&
    check first "--fp8 delayed: emulated CUDA build vs CPU build" "$tmp/delayed_emu" "$tmp/delayed_one" $FIRST_TOL

# current scaling's state export under ep 2: each expert's last scales from the rank that runs it (max over GROUP_EP)
common=("${base[@]}" --model "$SEED" --steps 1 --val-every 0 --checkpoint-every 1)
train current_ep2 2 "$CPU" --fp8 current --ep 2 &&
    check fp8moe "--fp8 current, ep 2: every expert's exported W scale = 448 / max|W|" "$tmp/current_ep2" "$SEED"
common=("${base[@]}" --model "$SEED")

# 3. FP8 against FP32: the last step's train loss and val loss
for r in delayed block; do
    python3 - "$tmp/${r}_one/log.jsonl" "$tmp/fp32/log.jsonl" $BOUND "--fp8 $r vs FP32" <<'PY' && pass=$((pass+1)) || fail=$((fail+1))
import json, sys
def last(p, key):
    v = [json.loads(l)[key] for l in open(p) if key in json.loads(l)]
    return v[-1]
bound, name = float(sys.argv[3]), sys.argv[4]
gaps = {k: abs(last(sys.argv[1], k) - last(sys.argv[2], k)) for k in ("train_loss", "val_loss")}
same = all(last(sys.argv[1], k) == last(sys.argv[2], k) for k in gaps)
good = max(gaps.values()) <= bound and not same
print("%s %s: final train loss gap %.4f, val loss gap %.4f nats (bound %g; must differ: FP8 rounds)" % (
    "ok  " if good else "FAIL", name, gaps["train_loss"], gaps["val_loss"], bound))
sys.exit(0 if good else 1)
PY
done

# 4. resume
train delayed_half 0 "$CPU" --fp8 delayed --steps 2 && cp -r "$tmp/delayed_half" "$tmp/delayed_resumed" &&
    train delayed_resumed 0 "$CPU" --fp8 delayed --resume "$tmp/delayed_half/state_00000002.bin" &&
    check same "--fp8 delayed: 2 steps + resume 2 vs 4 steps (the experts' FP8 state)" "$tmp/delayed_resumed" "$tmp/delayed_one"
[ -e "$tmp/delayed_ep2/state_00000002.bin" ] && cp -r "$tmp/delayed_ep2" "$tmp/delayed_ep2_one" &&
    rm -f "$tmp"/delayed_ep2_one/*_0000000[34].bin && sed -i '/"step": [34][,}]/d' "$tmp/delayed_ep2_one/log.jsonl" &&
    train delayed_ep2_one 0 "$CPU" --fp8 delayed --resume "$tmp/delayed_ep2/state_00000002.bin" &&
    check compare "--fp8 delayed: ep 2's step 2 resumed by 1 process vs 1 process" "$tmp/delayed_ep2_one" "$tmp/delayed_one" \
        $LOSS_TOL $PARAM_TOL

echo "test_moe_fp8: $pass passed, $fail failed"
[ $fail -eq 0 ]
