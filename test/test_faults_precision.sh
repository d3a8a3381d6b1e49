#!/usr/bin/env bash
# test_faults_precision.sh: every fault of --inject (llm/faults/inject.h) in every precision of the CPU trainer:
# FP32 (./train_gpt_cpu), BF16 and FP16 storage (build/train_gpt_cpu_bf16, build/train_gpt_cpu_fp16:
# llm/core/half_cpu.h), at 2 processes and, for the NaN skip and the SDC check, at 4. test_health.sh,
# test_faults.sh and test_checkpoint.sh check the same faults in depth in FP32; this checks that the
# 16-bit builds handle each of them the same way (what differs is FP16's dynamic loss scaler).
#
#   bash test/test_faults_precision.sh   (needs the three binaries; ~95 s on 2 cores, ~45 of it the
#                                         six die/hang runs waiting for the watchdog)
#   PRECISIONS="bf16 fp16" bash test/test_faults_precision.sh   some of them (checking a mutation by hand)
#
# FP16 runs start the scaler at 8192 (--loss-scale-init) rather than its default 65536: at 65536 this
# model's first gradients overflow FP16 on their own (observed: step 1 skipped), and a skip the test did
# not cause would hide or fake the one it did. Checked for each precision, one line each:
#  1. nan@step=4,rank=1 (a NaN in rank 1's gradients), dp 2 with ZeRO-1 (each rank updates its own half,
#     so the gathered model shows that both skipped): step 4 alone logged skipped, "grad norm nan" in
#     FP32/BF16, "overflow" in FP16, in log.jsonl and on stdout; every other loss and norm finite; the
#     model, master weights, moments and AdamW step after step 4 the bytes of those after step 3; step 5
#     updates again; FP16: the scale is 8192 up to step 4 and 4096 from step 5 on (halved once). At 4
#     processes (dp 2 x tp 2, ZeRO-1, the NaN on rank 3) the same skip and byte checks.
#  2. spike@step=20,rank=1 (random targets: the loss ~2.5 -> ~7) with --spike-factor 1.8: step 20 alone
#     skipped, the reason "loss ... > 1.8 x recent max ..."; the byte checks of 1.
#  3. streaks, --max-bad-steps 3: NaN at steps 5, 6, 7 with checkpoints every 3 roll back to step 3 (not
#     to step 6's checkpoint, saved inside the streak) in FP32 and BF16 ("(the last: grad norm nan)") and
#     in FP16 under a fixed scale (--loss-scale 8192: "(the last: overflow)"); FP16 under its dynamic
#     scaler (the default): the three overflows are skipped, the scale halves on each (8192 -> 1024), no
#     rollback, the run ends normally (llm/faults/health.h: overflows do not count toward the streak); spikes at
#     steps 20, 21, 22 with checkpoints every 6 roll back to step 18 in every precision.
#  4. bitflip@step=4,rank=1 (bit 30 of an FP32 value, bit 14 of a 16-bit one: the top exponent bit) with
#     --sdc-check-every 2: "step 4: sdc: parameters differ: layer 0: ranks 0, 1 disagree", then the
#     rollback to step 3; at 4 processes (dp 4, ZeRO-1, the flip on rank 2): "layer 0: rank 2 differ".
#  5. die@step=3,rank=1 and hang@step=3,rank=1 with --comm-timeout 4 at 2 processes: mpirun exits non-zero
#     (not killed by the test's 90 s limit) at most 4 + 8 s after the faulty rank's line (test_faults.sh's
#     slack), rank 0 prints exactly one watchdog line, naming step 3 and "no report from rank 1", and one
#     line names "missing rank 1".
#  6. diskfail@step=4,rank=1,bytes=5000 (rank 1's shard write of step 4 fails with ENOSPC) under
#     --async-checkpoint, checkpoints every 2: exit non-zero with one error line naming the shard file and
#     "No space left on device"; ckpt_00000002 intact (its manifest's sizes and FNV-1a checksums
#     recomputed here), ckpt_00000004 without a manifest; --resume latest ignores it, takes
#     ckpt_00000002, and steps 3-6 are bit-identical to an undisturbed run's.
#  7. after every rollback of 3 and 4 (NaN, fixed-scale overflow, spike, SDC): the steps after the
#     rollback (losses and norms, printed with repr: every bit) and the final model and state bytes equal
#     those of a run resumed from the checkpoint the rollback restored, with the data position the
#     rollback printed patched into that state file (the data go on after a rollback; llm/faults/health.h).
set -u
cd "$(dirname "$0")/.."
FP32=${FP32:-./train_gpt_cpu}
BF16=${BF16:-./build/train_gpt_cpu_bf16}
FP16=${FP16:-./build/train_gpt_cpu_fp16}
LOG=build/faults_precision
rm -rf "$LOG"; mkdir -p "$LOG"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source test/mpi_lib.sh  # MPIRUN, ok, bad, pass, fail
export OMP_NUM_THREADS=1

python3 dev/data/addition.py --train 3000 --val 200 --test 20 --out "$tmp/data" > /dev/null
base=(--model d2,C=32,NH=4,maxT=64,V=257 --train-data "$tmp/data/addition_train.bin" --val-data "" --tokenizer ""
      -b 4 -t 32 --total-batch 256 --steps 8 --lr 1e-3 --warmup 2 --grad-clip 1.0 --val-every 0 --sample-every 0 --shuffle 0)
sp=(--steps 24 --lr 1e-2 --spike-window 6)  # test_health.sh's spike runs: the higher rate brings the loss to ~2.5 first

# run NAME NP ARGS...: $BIN (the precision under test) with NP processes into $tmp/NAME, stdout in
# $LOG/NAME.out, stderr in $LOG/NAME.err, exit status in $tmp/NAME.rc (and returned)
run() {
    local name=$1 np=$2; shift 2
    timeout 120 "${MPIRUN[@]}" -np "$np" "$BIN" "${common[@]}" --output-dir "$tmp/$name" "$@" > "$LOG/$name.out" 2> "$LOG/$name.err"
    local rc=$?
    echo $rc > "$tmp/$name.rc"
    return $rc
}
runok() { run "$@" || { bad "$1: exit $(cat "$tmp/$1.rc"): $(cat "$LOG/$1.err" "$LOG/$1.out" | tail -n 2 | tr '\n' ' ')"; return 1; }; }

# the step, loss, norm, loss scale and skip of every step of a log.jsonl, every bit (repr), in the order written
fields() { python3 - "$1" <<'PY'
import json, sys
for o in map(json.loads, open(sys.argv[1])):
    if "train_loss" in o: print(o["step"], repr(o["train_loss"]), repr(o["grad_norm"]), o.get("loss_scale"), o.get("skipped"))
PY
}

# check_skip NAME K REGEX: step K skipped for a reason matching REGEX and no other step, on stdout too;
# the other steps' losses and norms finite; the model, FP32 parameters (the master in 16-bit builds),
# m, v, the 16-bit copy and AdamW's step after K the bytes of those after K-1; K+1 changed the model
check_skip() {
    local name=$1 k=$2 why=$3 d=$tmp/$1
    if python3 - "$d/log.jsonl" "$k" "$why" <<'PY'
import json, math, re, sys
rows = [o for o in map(json.loads, open(sys.argv[1])) if "train_loss" in o]
k, why = int(sys.argv[2]), sys.argv[3]
sk = [(o["step"], o["skipped"]) for o in rows if "skipped" in o]
nonfinite = [o["step"] for o in rows if o["step"] != k and not (math.isfinite(o["train_loss"]) and o["grad_norm"] is not None and math.isfinite(o["grad_norm"]))]
print("skipped:", sk, "non-finite:", nonfinite)
sys.exit(0 if len(sk) == 1 and sk[0][0] == k and re.fullmatch(why, sk[0][1]) and len(rows) > k and not nonfinite else 1)
PY
    then
        if grep -qE "^step +$k/[0-9]+ \| .* \| skipped \($why\)$" "$LOG/$name.out" && [ "$(grep -c 'skipped (' "$LOG/$name.out")" -eq 1 ]; then
            ok "$name: step $k alone $(grep -oE "skipped \($why\)" "$LOG/$name.out") in log.jsonl and on stdout; every other loss and norm finite"
        else bad "$name: log.jsonl right but stdout has no single 'step $k ... skipped ($why)' line"; fi
    else bad "$name: expected step $k alone skipped for '$why' and finite losses: $(grep -m2 -E 'skipped|null' "$d/log.jsonl" | tr '\n' ' ')"; fi
    if cmp -s "$(printf '%s/model_%08d.bin' "$d" "$k")" "$(printf '%s/model_%08d.bin' "$d" $((k - 1)))" && python3 - \
        "$(printf '%s/state_%08d.bin' "$d" "$k")" "$(printf '%s/state_%08d.bin' "$d" $((k - 1)))" <<'PY'
import sys, struct
a, b = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
n = struct.unpack_from("<Q", a, 40)[0]  # header[10..11]: num_parameters
lo, hi = 1024, 1024 + 12 * n           # FP32 parameters (the master), m, v
same16 = a[hi:hi + 2 * n] == b[hi:hi + 2 * n] if struct.unpack_from("<i", a, 72)[0] else True  # the 16-bit copy, when stored
sys.exit(0 if len(a) == len(b) and a[lo:hi] == b[lo:hi] and same16 and a[12:16] == b[12:16] else 1)
PY
    then ok "$name: the model, parameters, m, v and adam step after step $k are the bytes of those after step $((k - 1))"
    else bad "$name: step $k changed the model or the optimizer state"; fi
    cmp -s "$(printf '%s/model_%08d.bin' "$d" "$k")" "$(printf '%s/model_%08d.bin' "$d" $((k + 1)))" \
        && bad "$name: step $((k + 1)) did not update either" || ok "$name: step $((k + 1)) updates again"
}

# scales NAME S1 S2 ...: the loss scale logged at steps 1, 2, ... (FP16)
scales() {
    local name=$1; shift
    local got; got=$(fields "$tmp/$name/log.jsonl" | awk '{printf "%s ", $4}')
    if [ "$got" = "$* " ]; then ok "$name: loss scale per step $got"
    else bad "$name: loss scale per step $got, expected $*"; fi
}

# rollback NAME NP STEPS S0 REASON ARGS...: a run whose ARGS cause a rollback: the log's rollback record
# goes to step S0 with REASON (a prefix), the run completes STEPS steps; then the checks of 7 against a
# run resumed from S0's state file with the printed data position
rollback() {
    local name=$1 np=$2 steps=$3 s0=$4 why=$5; shift 5
    runok "$name" "$np" --steps "$steps" "$@" || return
    local line rec
    line=$(grep "rollback: " "$LOG/$name.out")
    rec=$(grep '"rollback_to"' "$tmp/$name/log.jsonl")
    local state; state=$(printf '%s/state_%08d.bin' "$tmp/$name" "$s0")
    if [ "$(grep -c '"rollback_to"' "$tmp/$name/log.jsonl")" -eq 1 ] && [[ "$rec" == *"\"rollback_to\": $s0, \"reason\": \"$why"* ]] \
       && [[ "$line" == *"restored $state (step $s0); the data go on from epoch "*" sample "* ]] \
       && [ "$(fields "$tmp/$name/log.jsonl" | tail -1 | cut -d' ' -f1)" = "$steps" ]; then
        ok "$name: rolled back to step $s0 ($why...), ran to step $steps: ${line//$tmp\//}"
    else bad "$name: expected one rollback to step $s0 for '$why': $rec / $line"; return; fi
    local epoch sample after
    epoch=$(sed -n 's/.*from epoch \([0-9]*\) sample \([0-9]*\).*/\1/p' <<< "$line"); sample=$(sed -n 's/.*from epoch \([0-9]*\) sample \([0-9]*\).*/\2/p' <<< "$line")
    mkdir -p "$tmp/${name}_ref"
    python3 - "$state" "$tmp/${name}_ref/start.bin" "$epoch" "$sample" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
struct.pack_into("<qq", b, 48, int(sys.argv[3]), int(sys.argv[4]))  # header[12..15]: the data position
open(sys.argv[2], "wb").write(b)
PY
    python3 test/ckpt_verify.py --seal "$tmp/${name}_ref/start.bin"  # (its checksum, for the changed header)
    # the reference needs no fault and no spike rule: it must not skip a step (checked by the comparison);
    # it keeps --spike-window, whose last values the state files hold (llm/faults/health.h)
    local keep=() i args=("$@")
    for ((i = 0; i < ${#args[@]}; i++)); do
        case "${args[$i]}" in --zero|--tp|--loss-scale|--lr|--spike-window) keep+=("${args[$i]}" "${args[$((i + 1))]}"); i=$((i + 1));; esac
    done
    runok "${name}_ref" "$np" --steps "$steps" --checkpoint-every "$steps" --resume "$tmp/${name}_ref/start.bin" "${keep[@]}" || return
    after=$((steps - s0))
    local f1 f2
    f1=$(printf '%s/%%s_%08d.bin' "$tmp/$name" "$steps"); f2=$(printf '%s/%%s_%08d.bin' "$tmp/${name}_ref" "$steps")
    # shellcheck disable=SC2059
    if [ "$(fields "$tmp/$name/log.jsonl" | tail -$after)" = "$(fields "$tmp/${name}_ref/log.jsonl" | tail -$after)" ] \
       && [ "$(fields "$tmp/${name}_ref/log.jsonl" | wc -l)" -eq $after ] \
       && cmp -s "$(printf "$f1" model)" "$(printf "$f2" model)" && cmp -s "$(printf "$f1" state)" "$(printf "$f2" state)"; then
        ok "$name: after the rollback, steps $((s0 + 1))..$steps (losses, norms, scales, every bit) and the final model and state bytes = a run resumed from state $s0 at data sample $sample"
    else bad "$name: after the rollback the run differs from the one resumed from state $s0:"; diff <(fields "$tmp/$name/log.jsonl" | tail -$after) <(fields "$tmp/${name}_ref/log.jsonl") | head -4; fi
}

# fault NAME KIND: rank 1 dies or hangs at step 3 of 2 processes (test_faults.sh's check 1, shortened)
TIMEOUT=4
fault() {
    local name=$1 kind=$2
    local mpi=("${MPIRUN[@]}") i
    if [ "$kind" = die ]; then  # the watchdog, not mpirun's abort on a non-zero exit, must end the job
        for i in "${!mpi[@]}"; do [ "${mpi[$i]}" = orte_abort_on_non_zero_status ] && mpi[$((i + 1))]=0; done
    fi
    local t_end t_fault rc
    timeout 90 "${mpi[@]}" -np 2 "$BIN" "${common[@]}" --steps 6 --comm-timeout $TIMEOUT --inject "$kind@step=3,rank=1" \
        --output-dir "$tmp/$name" 2>&1 | while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%N)" "$l"; done > "$LOG/$name.log"
    rc=${PIPESTATUS[0]}
    t_end=$(date +%s.%N)
    t_fault=$(grep -m1 "inject: rank 1" "$LOG/$name.log" | cut -d' ' -f1)
    local dt problems="" l
    dt=$(printf '%.1f' "$(echo "$t_end - ${t_fault:-0}" | bc)")
    l=$(grep ' watchdog: rank 0: ' "$LOG/$name.log" | cut -d' ' -f2-)
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || problems+=" exit $rc;"
    [ -n "$t_fault" ] || problems+=" no inject line;"
    [ "$(echo "$dt <= $TIMEOUT + 8" | bc)" = 1 ] || problems+=" ended $dt s after the fault;"
    [ "$(grep -c ' watchdog: rank ' "$LOG/$name.log")" -eq 1 ] || problems+=" $(grep -c ' watchdog: rank ' "$LOG/$name.log") watchdog lines;"
    [[ "$l" == *"step 3: "* && "$l" == *"; no report from rank 1" ]] || problems+=" rank 0's line: '$l';"
    grep -q 'missing rank 1 (no report: dead or hung)' "$LOG/$name.log" || problems+=" no line names rank 1 missing;"
    if [ -z "$problems" ]; then ok "$name: $kind of rank 1 at step 3: mpirun exit $rc, $dt s after the fault: $l"
    else bad "$name: $kind of rank 1 at step 3:$problems (see $LOG/$name.log)"; fi
}

# verify_dirs DIR: test_checkpoint.sh's check of every ckpt_* directory with a manifest (sizes and FNV-1a
# 64 checksums of its shards); prints "ok" or what is wrong, then the complete directories
verify_dirs() { python3 test/ckpt_verify.py "$1"; }

for P in ${PRECISIONS:-fp32 bf16 fp16}; do
    case $P in fp32) BIN=$FP32;; bf16) BIN=$BF16;; fp16) BIN=$FP16;; esac
    [ -x "$BIN" ] || { bad "$P: $BIN not built (make $BIN)"; continue; }
    common=("${base[@]}")
    nanwhy="grad norm nan"
    [ $P = fp16 ] && { common+=(--loss-scale-init 8192); nanwhy=overflow; }

    # 1. nan
    runok $P.nan 2 --zero 1 --inject nan@step=4,rank=1 --checkpoint-every 1 && {
        check_skip $P.nan 4 "$nanwhy"
        [ $P = fp16 ] && scales $P.nan 8192 8192 8192 8192 4096 4096 4096 4096
    }
    runok $P.nan_dp2tp2 4 --tp 2 --zero 1 --inject nan@step=5,rank=3 --checkpoint-every 1 && check_skip $P.nan_dp2tp2 5 "$nanwhy"

    # 2. spike
    runok $P.spike 2 "${sp[@]}" --inject spike@step=20,rank=1 --spike-factor 1.8 --checkpoint-every 1 \
        && check_skip $P.spike 20 "loss [0-9.]+ > 1\.8 x recent max [0-9.]+"

    # 3. streaks (and 7: the run after the rollback against a resumed one)
    if [ $P = fp16 ]; then
        runok $P.nan3_dynamic 2 --zero 1 --steps 10 --inject nan@step=5,count=3,rank=1 --max-bad-steps 3 --checkpoint-every 3 && {
            if [ "$(grep -c '"skipped": "overflow"' "$tmp/$P.nan3_dynamic/log.jsonl")" -eq 3 ] && ! grep -q rollback "$tmp/$P.nan3_dynamic/log.jsonl" \
               && [ "$(fields "$tmp/$P.nan3_dynamic/log.jsonl" | awk '$5 != "None" {printf "%s ", $1}')" = "5 6 7 " ]; then
                ok "$P.nan3_dynamic: 3 overflows in a row (steps 5-7) under the dynamic scaler: skipped, no rollback (they do not count toward --max-bad-steps 3), 10 steps run"
            else bad "$P.nan3_dynamic: expected steps 5, 6, 7 skipped for overflow and no rollback: $(grep -E 'skipped|rollback' "$tmp/$P.nan3_dynamic/log.jsonl" | head -4 | tr '\n' ' ')"; fi
            scales $P.nan3_dynamic 8192 8192 8192 8192 8192 4096 2048 1024 1024 1024
        }
        rollback $P.nan3_fixed 2 10 3 "3 bad steps in a row (the last: overflow)" --zero 1 --loss-scale 8192 \
            --inject nan@step=5,count=3,rank=1 --max-bad-steps 3 --checkpoint-every 3
    else
        rollback $P.nan3 2 10 3 "3 bad steps in a row (the last: grad norm nan)" --zero 1 \
            --inject nan@step=5,count=3,rank=1 --max-bad-steps 3 --checkpoint-every 3
    fi
    rollback $P.spike3 2 24 18 "3 bad steps in a row (the last: loss " "${sp[@]}" --inject spike@step=20,count=3,rank=1 \
        --spike-factor 1.8 --max-bad-steps 3 --checkpoint-every 6

    # 4. bitflip (index 19336 is in layer 0: test_health.sh says why), SDC check every 2 steps
    rollback $P.sdc 2 6 3 "sdc: parameters differ: layer 0: ranks 0, 1 disagree" \
        --checkpoint-every 3 --sdc-check-every 2 --inject bitflip@step=4,rank=1,index=19336 && {
        l=$(grep -m1 "sdc: parameters differ" "$LOG/$P.sdc.out")
        [[ "$l" == "step 4: sdc: parameters differ: layer 0: ranks 0, 1 disagree"* ]] && ok "$P.sdc: stdout: $l" || bad "$P.sdc: stdout: '$l'"
    }
    runok $P.sdc_dp4 4 --total-batch 512 --steps 6 --zero 1 --checkpoint-every 3 --sdc-check-every 2 --inject bitflip@step=4,rank=2,index=19336 && {
        l=$(grep -m1 "sdc: parameters differ" "$LOG/$P.sdc_dp4.out")
        if [[ "$l" == "step 4: sdc: parameters differ: layer 0: rank 2 differ"* ]] && grep -q '"step": 4, "rollback_to": 3, "reason": "sdc' "$tmp/$P.sdc_dp4/log.jsonl"; then
            ok "$P.sdc_dp4: 4 replicas, ZeRO-1: $l; rolled back to step 3"
        else bad "$P.sdc_dp4: expected 'layer 0: rank 2 differ' and a rollback to 3: '$l'"; fi
    }

    # 5. die and hang: in the background (case_bg, test/mpi_lib.sh; mostly waiting out the time-out), while the rest goes on
    case_bg fault $P.die die
    case_bg fault $P.hang hang

    # 6. a failing disk during an asynchronous save
    dflags=(--steps 6 --checkpoint-every 2 --async-checkpoint 1 --zero 1)
    runok $P.diskref 2 "${dflags[@]}" && {
        run $P.diskfail 2 "${dflags[@]}" --inject diskfail@step=4,rank=1,bytes=5000; rc=$?
        errs=$(grep -ah "^error" "$LOG/$P.diskfail.err" "$LOG/$P.diskfail.out")
        if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(echo "$errs" | wc -l)" -eq 1 ] && [[ "$errs" == *"ckpt_00000004/shard_"*"No space left on device"* ]]; then
            ok "$P.diskfail: exit $rc with one line: ${errs//$tmp\//}"
        else bad "$P.diskfail: exit $rc, error lines: $errs"; fi
        v=$(verify_dirs "$tmp/$P.diskfail")
        if [ "$v" = "ok ckpt_00000002" ] && [ ! -e "$tmp/$P.diskfail/ckpt_00000004" ]; then
            ok "$P.diskfail: ckpt_00000002 intact (sizes and checksums), nothing of step 4's left"
        else bad "$P.diskfail: checkpoints after the failure: $v"; fi
        if run $P.diskfail_resume 2 "${dflags[@]}" --output-dir "$tmp/$P.diskfail" --log "$tmp/$P.diskfail/log2.jsonl" --resume latest \
           && ! grep -q "skipped" "$LOG/$P.diskfail_resume.out" "$LOG/$P.diskfail_resume.err" \
           && grep -q "resumed from $tmp/$P.diskfail/ckpt_00000002 at step 2" "$LOG/$P.diskfail_resume.out" \
           && [ "$(fields "$tmp/$P.diskfail/log2.jsonl")" = "$(fields "$tmp/$P.diskref/log.jsonl" | tail -4)" ]; then
            ok "$P.diskfail: --resume latest takes ckpt_00000002 (the failed save left nothing to skip), steps 3-6 bit-identical to the undisturbed run"
        else bad "$P.diskfail: resume (see $LOG/$P.diskfail_resume.out)"; fi
    }
done
cases_wait

echo "faults_precision: $pass passed, $fail failed"
[ $fail -eq 0 ]
