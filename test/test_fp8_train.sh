#!/usr/bin/env bash
# test_fp8_train.sh: the FP8 linear layers (llm/precision/fp8_linear.h) in the trainer: every layout quantizes as
# one process does, the FP8 state resumes bit for bit, bad FP8 flags are refused.
#
#   bash test/test_fp8_train.sh   (needs ./train_gpt_cpu, build/train_gpt_cpu_bf16 and _fp16; mpirun)
#   PARTS="layouts resume flags pp_scales ring sharded16" (the default: all) runs some of them (resume
#   compares with the runs of layouts); planting a mutation by hand
#
# Which FP8 format, scale and amax entry each GEMM operand takes is not checked here (a wrong one is
# the same in every layout): test/test_fp8_linear.cu checks it against a reference.
# Checked, one line each:
#  1. Layouts against one process, for each recipe (current, delayed, block, mx): tp 2, tp 2 with
#     sequence parallelism, dp 2 (1 micro-batch per rank against one process's 2: delayed scaling's
#     amax is the max over both, as one process records it) and pp 2, from the same seed checkpoint
#     and data: (a) for the per-tensor recipes (current, delayed) under tp 2 and pp 2, the FP8 state of
#     the state file after step 1 (the amax histories and scales, test/ddp_zero_check.py's fp8): W's
#     entries identical, x's and dy's within FP8_TOL; (b) the first step's train loss, the forward of
#     the same model, within FIRST_TOL; (c) 4 steps: losses and grad norms within LOSS_TOL, every final
#     parameter within PARAM_TOL. Block scaling needs tp splits on 128-element tiles: its runs use
#     C = 256 (see 3). (dp 2 has no FP8 state check: its current scales are rank 0's micro-batch's, and
#     delayed scaling's dy amaxes there are measured 2x one process's: dy is normalized per rank.)
#  2. Resume: 4 steps in one run against 2 steps, a state file, and 2 more steps resumed from it
#     (the amax histories and scales are in the state file): the same bytes. And under another layout:
#     delayed scaling saved by dp 2 resumed by tp 2, against the uninterrupted one process. A state
#     file of another recipe is refused with one line.
#  3. Bad FP8 flags, one line each and nothing written: --fp8 fp4, --fp8-format e5m2, --fp8-history 0,
#     --fp8 block with --tp 2 at C = 64 (QKV's q, k and v split into 32 rows per rank: a quarter tile).
#  4. pp 2's exported current scales below 1: LayerNorm weights x300 (amaxes > 448), the step-1 FP8
#     state of pp 2 against one process, per layer (see the section; mutation f-fp8-export-unheld).
#  5. Delayed scaling with --fp8-history 3 resumed at step 4, after the ring wrapped: exactly the
#     uninterrupted run (losses, norms, parameters, file bytes; f-fp8-resume-pos-recorded).
#  6. The FP8 state in the sharded checkpoints of the CPU BF16 and FP16 builds (dp 2): resumed at dp 2
#     exactly as the uninterrupted run, at 1 process exactly as from the gathered state file
#     (f-fp8-shard16-offset). Parts 4-6 take about 13 s.
#
# Tolerances. The layouts sum in other orders (tp's all-reduces, the tied embedding's sum over the
# pipeline's ends), so their FP32 values differ in the last bits (test_tp.sh: 4e-6 over 4 steps), and
# FP8 quantization turns a last-bit difference into a whole FP8 step (2^-3 or 2^-2 relative) wherever
# a value sits near a rounding boundary.
#   The amax group (Megatron-LM PR #442: amaxes reduced over the wrong group; test/mutations.py's
# f-fp8-amax-group, the tp all-reduce of the amax removed, so each rank scales its shard by the shard's
# own amax). An amax is a max, exact in any order, so where the tensor is the same bits in every layout
# the layouts' amaxes and scales are identical: W in step 1 is the seed checkpoint's, so W's entries
# must match bit for bit. x and dy carry the layouts' FP32 last-bit differences (tp's all-reduce sums),
# so their amaxes move by a few ulps: measured after step 1 at most 3.4e-7 relative here (d2 C = 64),
# 3e-5 at C = 128, 1e-5 at C = 256, 3.2e-7 at d4 C = 64 (pp 2: 0); after step 2 FP8 flips have reached
# them (up to 2.5e-2 at C = 128), hence step 1. FP8_TOL = 1e-3: 30x the largest measured. The mutation
# at d2 C = 64: 4 of the 8 W scales of --fp8 current differ (by up to 13%; 4 of 8 at C = 128, 5 of 8 at
# C = 256, 5 of 16 at d4 C = 64), and the x and dy entries move by 0.13 (current) and 0.042 (delayed:
# its step-1 scales come from the step's own amaxes; what it records is reduced over every rank anyway,
# so only step 1's quantization, and with it the recorded x and dy amaxes, changes): 42x FP8_TOL or
# more (at C = 128, 256 and d4 C = 64: >= 0.033, 33x).
#   The forward of the first step sees only the layouts' sums of the forward: measured 0 here (all four
# recipes, every layout), <= 7.9e-7 relative at C = 128, 256 and d4 C = 64 (tp 2), FIRST_TOL = 1e-5.
# The mutation moves it by 6.4e-5 here (6.4x FIRST_TOL; the FP8 state check is the sharper one), 5.4e-4
# at C = 128, 1.4e-3 at C = 256, 1.1e-4 at d4 C = 64.
#   Over 4 steps the flips compound through the updates (Adam moves a parameter by ~lr = 1e-3 whatever
# its gradient's size, so a flipped sign moves it by up to 2e-3):
# measured up to 5.4e-3 in a parameter, 2.7e-3 in a grad norm and 4e-4 in a loss for block scaling at
# tp 2, so (c) bounds only what a broken layout would exceed: LOSS_TOL = 5e-3 (losses and grad norms
# of 4 steps) and PARAM_TOL = 1e-2 (a missing gradient all-reduce, a stage that does not update, or a
# dp rank whose micro-batch is dropped moves losses by > 1e-2 and parameters by ~1e-1).
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
CPU=${CPU:-./train_gpt_cpu}
CHECK="python3 test/ddp_zero_check.py"
LOG=build/fp8_train
mkdir -p "$LOG"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source test/mpi_lib.sh  # MPIRUN, ok, bad, check, badlayout, train
pass=0; fail=0
FIRST_TOL=1e-5
FP8_TOL=1e-3
LOSS_TOL=5e-3
PARAM_TOL=1e-2
PARTS=" ${PARTS:-layouts resume flags pp_scales ring sharded16} "
part() { [[ "$PARTS" == *" $1 "* ]]; }

python3 dev/data/addition.py --train 3000 --val 200 --test 20 --out "$tmp/data" > /dev/null
D="$tmp/data"
base=(--train-data "$D/addition_train.bin" --val-data "$D/addition_val.bin" -b 4 -t 32 --steps 4 --lr 1e-3 --warmup 1
      --lr-final 0.1 --weight-decay 0.1 --val-every 2 --val-steps 1 --sample-every 0 --checkpoint-every 2 --grad-clip 0)
for C in 64 256; do
    timeout 120 "$CPU" --model d2,C=$C,NH=4,maxT=64,V=257 "${base[@]}" --steps 1 --lr 0 --checkpoint-every 1 \
        --val-every 0 --output-dir "$tmp/seed$C" > "$LOG/seed$C.log" 2>&1 || bad "seed checkpoint C=$C: see $LOG/seed$C.log"
done

# 1. the layouts against one process
if part layouts; then
    for r in current delayed block mx; do
        C=64; [ $r = block ] && C=256
        common=("${base[@]}" --model "$tmp/seed$C/model_00000001.bin" --fp8 $r)
        pertensor=0  # the per-tensor recipes: their amaxes and scales in a state file after step 1 (block and mx: none)
        [ $r = current ] || [ $r = delayed ] && pertensor=1 && common+=(--checkpoint-every 1)
        train ${r}_one 0 "$CPU" --total-batch 128 || continue
        train ${r}_one256 0 "$CPU" --total-batch 256
        for sp in 0 1; do
            train ${r}_tp2sp$sp 2 "$CPU" --tp 2 --sequence-parallel $sp --total-batch 128 &&
                { [ $pertensor = 0 ] || check fp8 "--fp8 $r: tp 2 sp $sp vs 1 process" "$tmp/${r}_tp2sp$sp" "$tmp/${r}_one" $FP8_TOL; } &&
                check first "--fp8 $r: tp 2 sp $sp vs 1 process" "$tmp/${r}_tp2sp$sp" "$tmp/${r}_one" $FIRST_TOL &&
                check compare "--fp8 $r: tp 2 sp $sp vs 1 process" "$tmp/${r}_tp2sp$sp" "$tmp/${r}_one" $LOSS_TOL $PARAM_TOL
        done
        train ${r}_dp2 2 "$CPU" --total-batch 256 &&
            check first "--fp8 $r: dp 2 vs 1 process (2 micro-batches)" "$tmp/${r}_dp2" "$tmp/${r}_one256" $FIRST_TOL &&
            check compare "--fp8 $r: dp 2 vs 1 process (2 micro-batches)" "$tmp/${r}_dp2" "$tmp/${r}_one256" $LOSS_TOL $PARAM_TOL
        train ${r}_pp2 2 "$CPU" --pp 2 --total-batch 256 &&
            { [ $pertensor = 0 ] || check fp8 "--fp8 $r: pp 2 vs 1 process (2 micro-batches)" "$tmp/${r}_pp2" "$tmp/${r}_one256" $FP8_TOL; } &&
            check first "--fp8 $r: pp 2 vs 1 process (2 micro-batches)" "$tmp/${r}_pp2" "$tmp/${r}_one256" $FIRST_TOL &&
            check compare "--fp8 $r: pp 2 vs 1 process (2 micro-batches)" "$tmp/${r}_pp2" "$tmp/${r}_one256" $LOSS_TOL $PARAM_TOL
    done
fi

# 2. resume: the FP8 state in the state file
if part resume; then
    for r in delayed current; do
        common=("${base[@]}" --model "$tmp/seed64/model_00000001.bin" --fp8 $r --total-batch 128)
        train ${r}_half 0 "$CPU" --steps 2 && cp -r "$tmp/${r}_half" "$tmp/${r}_resumed" &&
            train ${r}_resumed 0 "$CPU" --resume "$tmp/${r}_half/state_00000002.bin" &&
            check same "--fp8 $r: 2 steps + resume 2 vs 4 steps" "$tmp/${r}_resumed" "$tmp/${r}_one"
    done
    common=("${base[@]}" --model "$tmp/seed64/model_00000001.bin" --fp8 delayed)
    train delayed_dp2_half 2 "$CPU" --total-batch 256 --steps 2 && cp -r "$tmp/delayed_dp2_half" "$tmp/delayed_tp2_resumed" &&
        train delayed_tp2_resumed 2 "$CPU" --tp 2 --total-batch 256 --resume "$tmp/delayed_dp2_half/state_00000002.bin" &&
        check compare "--fp8 delayed: dp 2 for 2 steps, resumed under tp 2 vs 1 process" "$tmp/delayed_tp2_resumed" \
            "$tmp/delayed_one256" $LOSS_TOL $PARAM_TOL
    # a state file of another recipe: refused with one line
    out=$(timeout 60 "$CPU" "${common[@]}" --fp8 current --total-batch 128 --output-dir "$tmp/delayed_as_current" \
          --resume "$tmp/delayed_half/state_00000002.bin" 2>&1); rc=$?
    if [ $rc -ne 0 ] && [ "$(printf '%s\n' "$out" | grep -c '^error')" -eq 1 ] &&
       printf '%s\n' "$out" | grep -q "^error: --resume: state file .*expected FP8 state of --fp8 current"; then
        ok "--fp8 current refuses a state file with delayed scaling's state: $(printf '%s\n' "$out" | grep '^error')"
    else bad "--fp8 current resuming delayed scaling's state: exit $rc, no clear error: $out"; fi
fi

# 3. bad flags
if part flags; then
    common=("${base[@]}" --model "$tmp/seed64/model_00000001.bin")
    badlayout fp8_name 1 "--fp8: expected none, delayed, current, block or mx, found 'fp4'" --fp8 fp4
    badlayout fp8_format 1 "--fp8-format: expected hybrid or e4m3, found 'e5m2'" --fp8-format e5m2
    badlayout fp8_history 1 "--fp8-history: expected an integer in [1, 4096], found '0'" --fp8-history 0
    badlayout fp8_block_tp 2 "linear qkv splits 64 into 32 per rank, expected a multiple of 128" --fp8 block --tp 2
fi

# 4. pp 2 exports, per layer, the scales of the stage that holds it, also below 1. Current scaling's last
# scales live on the layer's stage; the export max-reduces them over the pipeline with the other stages'
# entries written as 0. A stage that wrote its own (never updated: the initial 1) entries instead would
# raise every scale below 1 to 1, and only those: scales below 1 come from amaxes above the format's max
# (448 for E4M3), which the tiny models of 1. never reach (their scales are > 1, and the max changes
# nothing). So here the seed model's LayerNorm weights (ln1w, ln2w of both layers) are multiplied by 300:
# QKV's and fc's inputs reach amaxes of ~1e3 in every layer (scales ~0.4, checked: "scales < 1 per layer").
if part pp_scales; then
    python3 - "$tmp/seed64/model_00000001.bin" "$tmp/big64.bin" <<'PY'
import struct, sys
raw = bytearray(open(sys.argv[1], "rb").read())
h = struct.unpack("<256i", raw[:1024])
assert h[0] == 20240326 and h[1] == 3, "expected an FP32 llm.c checkpoint"
maxT, V, L, NH, C, Vp = h[2:8]
# llm.c's order: wte (Vp,C) wpe (maxT,C) ln1w (L,C) ln1b (L,C) qkvw (L,3C,C) qkvb (L,3C) attprojw (L,C,C) attprojb (L,C) ln2w (L,C)
sizes = [Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C]
for t in (2, 8):  # ln1w, ln2w
    off = 1024 + 4 * sum(sizes[:t])
    w = struct.unpack_from("<%df" % (L * C), raw, off)
    struct.pack_into("<%df" % (L * C), raw, off, *[v * 300.0 for v in w])
open(sys.argv[2], "wb").write(raw)
PY
    python3 test/ckpt_verify.py --seal "$tmp/big64.bin"  # (its checksum, for the changed weights: llm/ckpt/checkpoint.h)
    common=("${base[@]}" --model "$tmp/big64.bin" --fp8 current --steps 1 --checkpoint-every 1 --val-every 0 --total-batch 256)
    train big_one 0 "$CPU" && train big_pp2 2 "$CPU" --pp 2 &&
        check fp8 "--fp8 current, LayerNorm weights x300 (amaxes > 448): pp 2 vs 1 process, per layer" "$tmp/big_pp2" \
            "$tmp/big_one" $FP8_TOL below1
fi

# 5. delayed scaling's amax ring across a resume after it wrapped: --fp8-history 3, 6 steps in one run
# against the same run's state of step 4 (4 amaxes recorded into 3 slots: position 1) resumed for steps
# 5-6: every loss, val loss and grad norm and the final parameters exactly (tolerance 0), and the final
# model and state files the same bytes. (2.'s resume at step 2 of a 16-entry ring cannot tell a position
# taken from the count of recorded steps, which is right until the ring wraps.)
if part ring; then
    common=("${base[@]}" --model "$tmp/seed64/model_00000001.bin" --fp8 delayed --fp8-history 3 --total-batch 128 --steps 6)
    if train h3_full 0 "$CPU"; then
        wrapped=$(python3 -c 'import sys; sys.path.insert(0, "test"); from ddp_zero_check import fp8_state; r, L, a = \
fp8_state(sys.argv[1]); print("%d %d %d" % (r, a[0], a[1]) if a else "none")' "$tmp/h3_full/state_00000004.bin")
        if [ "$wrapped" = "1 1 4" ]; then ok "--fp8 delayed --fp8-history 3: state_00000004.bin holds ring position 1, 4 steps recorded (wrapped)"
        else bad "--fp8 delayed --fp8-history 3: state_00000004.bin: recipe, position, recorded = $wrapped, expected 1 1 4"; fi
        train h3_resumed 0 "$CPU" --resume "$tmp/h3_full/state_00000004.bin" &&
            check compare "--fp8 delayed --fp8-history 3: resumed at step 4 (ring wrapped) vs 6 steps" "$tmp/h3_resumed" \
                "$tmp/h3_full" 0 0 &&
            check same "--fp8 delayed --fp8-history 3: resumed at step 4 (ring wrapped) vs 6 steps" "$tmp/h3_resumed" "$tmp/h3_full"
    fi
fi

# 6. the FP8 state in a sharded checkpoint of a 16-bit build (the shard of rank 0 holds it after the 16-bit
# parameters): the CPU BF16 and FP16 builds, --fp8 delayed, dp 2 saving both formats at step 2 of 4.
# Resumed from the shards at dp 2: steps 3-4 exactly the uninterrupted run's (losses, norms, final
# parameters; model and state files the same bytes). Resumed at another layout, one process (2
# micro-batches): from the shards exactly as from the same run's gathered state file (test_resume.sh
# proves that one exact; the same state in the same arithmetic).
if part sharded16; then
    for prec in bf16 fp16; do
        BIN=./build/train_gpt_cpu_$prec
        common=("${base[@]}" --model "$tmp/seed64/model_00000001.bin" --fp8 delayed --total-batch 256 --checkpoint-format both)
        train ${prec}_dp2 2 "$BIN" || continue
        train ${prec}_dp2_resumed 2 "$BIN" --resume "$tmp/${prec}_dp2/ckpt_00000002" &&
            check compare "$prec --fp8 delayed: dp 2 resumed from its sharded step 2 vs 4 steps" "$tmp/${prec}_dp2_resumed" \
                "$tmp/${prec}_dp2" 0 0 &&
            check same "$prec --fp8 delayed: dp 2 resumed from its sharded step 2 vs 4 steps" "$tmp/${prec}_dp2_resumed" "$tmp/${prec}_dp2"
        train ${prec}_one_shards 0 "$BIN" --resume "$tmp/${prec}_dp2/ckpt_00000002" &&
            train ${prec}_one_state 0 "$BIN" --resume "$tmp/${prec}_dp2/state_00000002.bin" &&
            check compare "$prec --fp8 delayed: dp 2's step 2 resumed by 1 process, sharded vs state file" \
                "$tmp/${prec}_one_shards" "$tmp/${prec}_one_state" 0 0
    done
fi

echo "test_fp8_train: $pass passed, $fail failed"
[ $fail -eq 0 ]
