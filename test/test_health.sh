#!/usr/bin/env bash
# test_health.sh: the health checks of llm/faults/health.h in the CPU build, faults caused with --inject
# (llm/faults/inject.h), at 1, 2, 4 and 8 (dp 2 x tp 2 x pp 2) processes:
# - nan (a NaN in one rank's gradients before their reduction): that step is logged skipped
#   ("grad norm nan") and no other; the model, the moments and AdamW's step after it are the bytes of
#   those before it (ZeRO-1 and ZeRO-2: each rank updates its own part, so every rank skipped); the
#   step after it updates again; a NaN on rank 0 and one on rank 1 give the same log and final model
#   (the decision is on reduced values: which rank saw the fault does not matter);
# - spike (one rank's targets replaced by random tokens: the dp-averaged loss jumps ~2.5 -> ~7): skipped
#   by the z-score rule (dp 4, dp 2 x tp 2, dp 2 x tp 2 x pp 2) and, alone, by the "K x recent max" rule; a clean run with both rules and the SDC
#   check on every step skips nothing (no false positive);
# - --max-bad-steps K (1, 2, 4 and 8 processes): K NaN steps in a row roll back to the last-known-good checkpoint, not to a newer
#   one saved inside the streak; after the rollback the losses, norms and the final model and state are
#   bit-identical to a run resumed from that checkpoint with the data position the rollback printed (the
#   data go on; the state file's position is patched here); a second rollback to the same checkpoint, or
#   none at all, stops every rank with one line and exit 3;
# - bitflip (one bit of one parameter on one rank, after the update): --sdc-check-every names the unit
#   and the rank(s) (2 replicas: both; 4: the one off the majority; dp2 x tp2: the ranks of that dp
#   group), then the rollback; ZeRO-3 says that it has nothing to compare;
# - the health state in the checkpoints: resumed from a gathered or a sharded checkpoint, the spike
#   windows give the same skip as the run that never stopped; a streak saved in a checkpoint goes on
#   after the resume; a rollback to a sharded asynchronous checkpoint = the rollback to the state file;
# - gradspike (one rank's gradients x 16 before their reduction, its loss untouched: a spike the loss
#   rule cannot see) at 1 and 2 processes, with the z-score rule alone and the "K x recent max" rule
#   alone: the step skipped for "grad norm ...", its z-score or recent max recomputed from the logged
#   norms of the window, the losses up to it those of the run without the fault (1 process: the norm
#   16 x its), the usual byte checks; a clean run at 1 process with both rules skips nothing;
# - the lr after skipped steps (NaNs at 2 and 6; warm-up, then the cosine to --lr-final): every step
#   logs the schedule's lr of its step number, computed here, and the lr of a run without the skips
#   (not of AdamW's update count);
# - bad flag values: one line naming the flag.
set -uo pipefail
CPU=${CPU:-./train_gpt_cpu}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source test/mpi_lib.sh  # MPIRUN, pass, fail, ok, bad
export OMP_NUM_THREADS=1

python3 dev/data/addition.py --train 3000 --val 200 --test 20 --out "$tmp/data" > /dev/null
common=(--model d2,C=32,NH=4,maxT=64,V=257 --train-data "$tmp/data/addition_train.bin" --val-data "" --tokenizer ""
        -b 4 -t 32 --total-batch 512 --steps 8 --lr 1e-3 --warmup 2 --grad-clip 1.0 --val-every 0 --sample-every 0 --shuffle 0)

run() {  # NAME NP ARGS...: a run into $tmp/NAME (NP 0: without mpirun); its exit status in $tmp/NAME.rc
    local name=$1 np=$2; shift 2
    local cmd=("$CPU")
    [ "$np" -gt 0 ] && cmd=("${MPIRUN[@]}" -np "$np" "$CPU")
    timeout 120 "${cmd[@]}" "${common[@]}" --output-dir "$tmp/$name" "$@" > "$tmp/$name.out" 2> "$tmp/$name.err"
    local rc=$?
    echo $rc > "$tmp/$name.rc"
    return $rc
}
runok() { run "$@" || { bad "$1: exit $(cat "$tmp/$1.rc"): $(cat "$tmp/$1.err" "$tmp/$1.out" | tail -n 2 | tr '\n' ' ')"; return 1; }; }

# the log's steps: "step loss norm lr skipped", in the order written
steps() { python3 -c '
import json, sys
for o in map(json.loads, open(sys.argv[1])):
    if "train_loss" in o: print(o["step"], o["train_loss"], o["grad_norm"], o["lr"], o.get("skipped"))' "$1"; }

# NAME K REASON: step K skipped (its reason starts with REASON) and no other; the model, the FP32
# parameters, m, v and AdamW's step after K the bytes of those after K-1; K+1 changed the model
check_skip() {
    local name=$1 k=$2 why=$3
    if python3 - "$tmp/$name/log.jsonl" "$k" "$why" <<'PY'
import json, sys
rows = [o for o in map(json.loads, open(sys.argv[1])) if "train_loss" in o]
k, why = int(sys.argv[2]), sys.argv[3]
sk = [(o["step"], o["skipped"]) for o in rows if "skipped" in o]
print("skipped:", sk)
sys.exit(0 if len(sk) == 1 and sk[0][0] == k and sk[0][1].startswith(why) and len(rows) > k else 1)
PY
    then ok "$name: step $k skipped ($why...) and no other"
    else bad "$name: expected step $k alone skipped for '$why'"; fi
    local d=$tmp/$name
    if cmp -s "$(printf '%s/model_%08d.bin' "$d" "$k")" "$(printf '%s/model_%08d.bin' "$d" $((k - 1)))" && python3 - \
        "$(printf '%s/state_%08d.bin' "$d" "$k")" "$(printf '%s/state_%08d.bin' "$d" $((k - 1)))" <<'PY'
import sys, struct
a, b = open(sys.argv[1], "rb").read(), open(sys.argv[2], "rb").read()
n = struct.unpack_from("<Q", a, 40)[0]
sys.exit(0 if len(a) == len(b) and a[1024:1024 + 12 * n] == b[1024:1024 + 12 * n] and a[12:16] == b[12:16] else 1)
PY
    then ok "$name: the model, parameters, m, v and adam step after step $k are the bytes of those after step $((k - 1))"
    else bad "$name: step $k changed the model or the optimizer state"; fi
    cmp -s "$(printf '%s/model_%08d.bin' "$d" "$k")" "$(printf '%s/model_%08d.bin' "$d" $((k + 1)))" \
        && bad "$name: step $((k + 1)) did not update either" || ok "$name: step $((k + 1)) updates again"
}

# --- nan: 2 processes (DDP; ZeRO-2), 4 (dp2 x tp2, ZeRO-1) ---
runok nan_dp2_r1 2 --inject nan@step=4,rank=1 --checkpoint-every 1 && check_skip nan_dp2_r1 4 "grad norm nan"
runok nan_dp2_r0 2 --inject nan@step=4,rank=0 --checkpoint-every 1 && {
    if cmp -s <(steps "$tmp/nan_dp2_r0/log.jsonl") <(steps "$tmp/nan_dp2_r1/log.jsonl") \
       && cmp -s "$tmp/nan_dp2_r0/model_00000008.bin" "$tmp/nan_dp2_r1/model_00000008.bin"; then
        ok "nan on rank 0 or on rank 1: the same log (losses, norms, skips) and final model bytes"
    else bad "nan on rank 0 vs rank 1: the runs differ"; fi
}
runok nan_z2 2 --inject nan@step=3,rank=1 --zero 2 --checkpoint-every 1 && check_skip nan_z2 3 "grad norm nan"
runok nan_dp2tp2 4 --inject nan@step=5,rank=3 --tp 2 --zero 1 --checkpoint-every 1 && check_skip nan_dp2tp2 5 "grad norm nan"

# --- spike: the loss jumps; a higher learning rate brings the loss to ~2.5 first ---
sp=(--steps 24 --lr 1e-2 --total-batch 256 --spike-window 6)
runok spike_z 4 "${sp[@]}" --total-batch 512 --inject spike@step=20,rank=2 --spike-zscore 4 --checkpoint-every 1 \
    && check_skip spike_z 20 "loss z-score"
# dp 2 x tp 2: a spike on rank 1 (tp rank 1) is the bad batch of its dp slice, ranks 0 and 1
runok spike_tp 4 "${sp[@]}" --tp 2 --inject spike@step=20,rank=1 --spike-zscore 4 --checkpoint-every 1 \
    && check_skip spike_tp 20 "loss z-score"
# dp 2 x tp 2 x pp 2: a spike on rank 5 (dp rank 1's slice; its 4 tp x pp ranks read the random batch)
runok spike_8 8 "${sp[@]}" --total-batch 512 --tp 2 --pp 2 --inject spike@step=20,rank=5 --spike-zscore 4 --checkpoint-every 1 \
    && check_skip spike_8 20 "loss z-score"
runok spike_k 2 "${sp[@]}" --inject spike@step=20,rank=1 --spike-factor 1.8 --checkpoint-every 1 \
    && check_skip spike_k 20 "loss"
grep -q '"skipped": "loss [0-9.]* > 1.8 x recent max' "$tmp/spike_k/log.jsonl" && ok "spike_k: the reason is the K x recent max rule" \
    || bad "spike_k: expected the 'loss ... > 1.8 x recent max' reason"
runok clean 2 "${sp[@]}" --spike-zscore 4 --spike-factor 1.8 --sdc-check-every 1 && {
    if ! grep -q skipped "$tmp/clean/log.jsonl" && ! grep -q "sdc" "$tmp/clean.out" && [ "$(steps "$tmp/clean/log.jsonl" | wc -l)" -eq 24 ]; then
        ok "clean run, 24 steps, z-score 4, factor 1.8, SDC check every step: nothing skipped, no SDC line"
    else bad "clean run: a false positive: $(grep -m1 -E 'skipped|sdc' "$tmp/clean/log.jsonl" "$tmp/clean.out")"; fi
}

# --- rollback after K bad steps in a row: to the last checkpoint saved after a healthy step ---
# nan at 5, 6, 7 with K = 3 and checkpoints every 3: the one of step 6 is inside the streak
rollback_check() {  # NAME NP ARGS...
    local name=$1 np=$2; shift 2
    runok "$name" "$np" --steps 10 --inject "nan@step=5,count=3,rank=$((np > 1 ? 1 : 0))" --max-bad-steps 3 --checkpoint-every 3 "$@" || return
    local line; line=$(grep "rollback:" "$tmp/$name.out")
    # the data go on after the 7 steps read (16 samples of T tokens each: --total-batch 512 / -t 32), not
    # from the checkpoint's 3 * 16 = 48
    if grep -q '"step": 7, "rollback_to": 3, "reason": "3 bad steps in a row (the last: grad norm nan)"' "$tmp/$name/log.jsonl" \
       && [[ "$line" == *"restored $tmp/$name/state_00000003.bin (step 3); the data go on from epoch 0 sample 112" ]]; then
        ok "$name: 3 bad steps (5, 6, 7) roll back to step 3, not to the checkpoint of step 6 saved inside the streak: $line"
    else bad "$name: rollback: $line"; return; fi
    # the reference: state_3 with the data position the rollback printed, resumed
    local epoch sample
    epoch=$(sed -n 's/.*from epoch \([0-9]*\) sample \([0-9]*\).*/\1/p' <<< "$line"); sample=$(sed -n 's/.*from epoch \([0-9]*\) sample \([0-9]*\).*/\2/p' <<< "$line")
    mkdir -p "$tmp/${name}_ref"
    python3 - "$tmp/$name/state_00000003.bin" "$tmp/${name}_ref/start.bin" "$epoch" "$sample" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
struct.pack_into("<qq", b, 48, int(sys.argv[3]), int(sys.argv[4]))  # header[12..15]: the data position
open(sys.argv[2], "wb").write(b)
PY
    python3 test/ckpt_verify.py --seal "$tmp/${name}_ref/start.bin"  # (its checksum, for the changed header)
    runok "${name}_ref" "$np" --steps 10 --checkpoint-every 10 --resume "$tmp/${name}_ref/start.bin" "$@" || return
    if cmp -s <(steps "$tmp/$name/log.jsonl" | tail -7) <(steps "$tmp/${name}_ref/log.jsonl" | tail -7) \
       && cmp -s "$tmp/$name/model_00000010.bin" "$tmp/${name}_ref/model_00000010.bin" \
       && cmp -s "$tmp/$name/state_00000010.bin" "$tmp/${name}_ref/state_00000010.bin"; then
        ok "$name: after the rollback, steps 4..10 (losses, norms) and the final model and state bytes = a run resumed from state 3 at data sample $sample"
    else bad "$name: after the rollback the run differs from the resumed one:"; diff <(steps "$tmp/$name/log.jsonl" | tail -7) <(steps "$tmp/${name}_ref/log.jsonl" | tail -7) | head -4; fi
}
rollback_check rollback_1 0
rollback_check rollback_dp2 2 --zero 1
rollback_check rollback_dp2tp2 4 --zero 1 --tp 2
rollback_check rollback_dp2tp2pp2 8 --zero 1 --tp 2 --pp 2
# the good list holds no checkpoint of a bad step
grep -q "^6 " "$tmp/rollback_1/good_checkpoints.txt" && [ "$(grep -c '^6 ' "$tmp/rollback_1/good_checkpoints.txt")" -eq 1 ] \
    && ok "rollback_1: good_checkpoints.txt lists step 6 once (its second save, after healthy steps)" || bad "rollback_1: good_checkpoints.txt: $(tr '\n' ' ' < "$tmp/rollback_1/good_checkpoints.txt")"

stop_check() {  # NAME NP SUBSTRING ARGS...: every rank stops with exit 3, one line from rank 0
    local name=$1 np=$2 sub=$3; shift 3
    run "$name" "$np" "$@"
    local rc; rc=$(cat "$tmp/$name.rc")
    # (besides the injection's own "inject:" line)
    if [ "$rc" -eq 3 ] && [ "$(grep -v '^inject: ' "$tmp/$name.err" | grep -c .)" -eq 1 ] && grep -q "^error: .*$sub.*stopping (exit 3)" "$tmp/$name.err"; then
        ok "$name: exit 3, one line: $(grep -v '^inject: ' "$tmp/$name.err")"
    else bad "$name: exit $rc: $(head -3 "$tmp/$name.err" | tr '\n' ' ')"; fi
}
stop_check nogood_1 0 "no last-known-good checkpoint" --inject nan@step=2,count=3 --max-bad-steps 3
stop_check nogood_dp2 2 "no last-known-good checkpoint" --inject nan@step=2,count=3,rank=1 --max-bad-steps 3
stop_check nogood_4 4 "no last-known-good checkpoint" --inject nan@step=2,count=2,rank=3 --max-bad-steps 2 --tp 2
# checkpoint at 5; NaN at 6, 7: back to 5; NaN at 8, 9 (new steps): the newest good one is still 5
stop_check again 2 "the previous rollback restored" --steps 10 --checkpoint-every 5 --inject 'nan@step=6,count=4,rank=1' --max-bad-steps 2
grep -q '"step": 7, "rollback_to": 5' "$tmp/again/log.jsonl" && ok "again: the first streak rolled back to step 5" || bad "again: no first rollback to 5"

# under a dynamic loss scaler overflows in a row are its business (it halves the scale): 3 skipped, no
# rollback, no stop; under a fixed scale they count (exit 3)
runok overflow_dyn 0 --loss-scale dynamic --inject nan@step=2,count=3 --max-bad-steps 2 && {
    [ "$(grep -c '"skipped": "overflow"' "$tmp/overflow_dyn/log.jsonl")" -eq 3 ] && ! grep -q rollback "$tmp/overflow_dyn/log.jsonl" \
        && ok "overflow_dyn: 3 overflows in a row under a dynamic scaler: skipped, no rollback, the run ends normally" \
        || bad "overflow_dyn: $(grep -c skipped "$tmp/overflow_dyn/log.jsonl") skipped"
}
stop_check overflow_fixed 0 "2 bad steps in a row (the last: overflow)" --loss-scale 1024 --inject nan@step=2,count=3 --max-bad-steps 2

# --- SDC: a flipped bit in one replica ---
sdc_check() {  # NAME NP EXPECT ARGS...: the SDC line names EXPECT, then the rollback to 3
    local name=$1 np=$2 want=$3; shift 3
    runok "$name" "$np" --steps 6 --checkpoint-every 3 --sdc-check-every 2 "$@" || return
    local line; line=$(grep -m1 "sdc: parameters differ" "$tmp/$name.out")
    if [[ "$line" == "step 4: sdc: parameters differ: $want"* ]] && grep -q '"step": 4, "rollback_to": 3, "reason": "sdc' "$tmp/$name/log.jsonl" \
       && [ "$(grep -c 'sdc: parameters differ' "$tmp/$name.out")" -eq 2 ]; then  # (the line, and the rollback's)
        ok "$name: $line; rolled back to step 3, no mismatch after"
    else bad "$name: expected 'step 4: sdc: parameters differ: $want': $line"; fi
}
# index 19336: in layer 0 (the embedding unit holds Vp*C + maxT*C = 384*32 + 64*32 = 14336 values, a layer 12704)
sdc_check sdc_dp2 2 "layer 0: ranks 0, 1 disagree" --inject bitflip@step=4,rank=1,index=19336
sdc_check sdc_dp4 4 "layer 0: rank 2 differ" --inject bitflip@step=4,rank=2,index=19336 --zero 1
sdc_check sdc_dp2tp2 4 "embedding (wte, wpe): ranks 1, 3 disagree" --inject bitflip@step=4,rank=3,index=100,bit=20 --tp 2
stop_check sdc_nockpt 2 "sdc: parameters differ: layer 0" --steps 6 --sdc-check-every 2 --inject bitflip@step=4,rank=1,index=19336
# dp 2 x tp 2 x pp 2 (8 processes, ZeRO-1): a NaN on rank 6 at step 2 skipped; a flipped bit on rank 7 (the
# last stage's copy of the tied embedding) after step 4 named within its dp group {3, 7}, then the rollback
runok all8 8 --steps 6 --tp 2 --pp 2 --zero 1 --checkpoint-every 1 --sdc-check-every 2 \
    --inject 'nan@step=2,rank=6;bitflip@step=4,rank=7,index=100' && {
    check_skip all8 2 "grad norm nan"
    grep -q '"step": 4, "rollback_to": 3, "reason": "sdc: parameters differ: embedding (wte, wpe): ranks 3, 7 disagree' "$tmp/all8/log.jsonl" \
        && ok "all8: step 4: the embedding of ranks 3, 7 differs, rolled back to step 3" || bad "all8: $(grep -m1 sdc "$tmp/all8.out")"
}
runok sdc_z3 2 --steps 2 --zero 3 --sdc-check-every 1 && grep -q "sdc check: ZeRO-3 keeps no replica of a parameter in the dp group: nothing to compare" "$tmp/sdc_z3.out" \
    && ok "ZeRO-3: says there is nothing to compare" || bad "ZeRO-3: no 'nothing to compare' line"
runok sdc_clean_pp 4 --steps 4 --pp 2 --sdc-check-every 1 && ! grep -q "parameters differ" "$tmp/sdc_clean_pp.out" \
    && ok "dp2 x pp2, SDC check every step, no fault: no mismatch" || bad "dp2 x pp2: a false SDC mismatch"

# --- the health state in the checkpoints: windows and streak survive a resume, sharded rollback ---
# a window of 6 and a spike at 20: a run resumed from step 16 has seen only 3 healthy steps of its own
# by then (17..19; the rules wait for a full window), so it skips the spike only with the saved window
sr=("${sp[@]}" --spike-zscore 4 --inject spike@step=20,rank=1)
runok resume_spike 2 "${sr[@]}" --checkpoint-every 8 --checkpoint-format both --async-checkpoint 1 && {
    [ "$(steps "$tmp/resume_spike/log.jsonl" | grep -vc ' None$')" -eq 1 ] && grep -q '"step": 20, .*"skipped": "loss z-score' "$tmp/resume_spike/log.jsonl" \
        && ok "resume_spike: the spike at 20 skipped, no other step" || bad "resume_spike: $(grep -c skipped "$tmp/resume_spike/log.jsonl") skipped"
    for from in state_00000016.bin ckpt_00000016; do
        runok "resume_spike_$from" 2 "${sr[@]}" --checkpoint-every 8 --resume "$tmp/resume_spike/$from" || continue
        if cmp -s <(steps "$tmp/resume_spike/log.jsonl" | tail -8) <(steps "$tmp/resume_spike_$from/log.jsonl") \
           && grep -q '"step": 20, .*"skipped": "loss z-score' "$tmp/resume_spike_$from/log.jsonl"; then
            ok "resumed from $from (window 6): steps 17..24 (losses, norms, the skip of the spike at 20) = the run that never stopped"
        else bad "resumed from $from: the skip decisions differ:"; diff <(steps "$tmp/resume_spike/log.jsonl" | tail -8) <(steps "$tmp/resume_spike_$from/log.jsonl") | head -4; fi
    done
}
# a checkpoint saved inside a streak (NaN at 5, 6; the save at 6) carries it: resumed from 6, one more
# NaN at 7 is the third in a row and rolls back to 3, as the run that never stopped did (rollback_dp2)
runok streak_a 2 --steps 6 --inject nan@step=5,count=2,rank=1 --max-bad-steps 3 --checkpoint-every 3 --zero 1 \
    && runok streak_b 2 --steps 10 --inject nan@step=7,rank=1 --max-bad-steps 3 --checkpoint-every 3 --zero 1 \
         --resume "$tmp/streak_a/state_00000006.bin" --output-dir "$tmp/streak_a" --log "$tmp/streak_b.jsonl" && {
    if grep -q '"step": 7, "rollback_to": 3, "reason": "3 bad steps in a row' "$tmp/streak_b.jsonl" \
       && cmp -s <(steps "$tmp/rollback_dp2/log.jsonl" | tail -7) <(steps "$tmp/streak_b.jsonl" | tail -7); then
        ok "streak: 2 bad steps saved at 6, resumed, 1 more at 7: rolled back to 3; steps 4..10 = the uninterrupted rollback_dp2"
    else bad "streak: $(grep -m1 rollback "$tmp/streak_b.jsonl")"; fi
}
# a run resumed from step 3 drops the list's entries after 3 (the old run's 6 and 9 are another course):
# checkpoints at 5 (its own), NaN at 7, 8: back to its own 5, not to the old run's state_00000006.bin
runok relist_a 2 --steps 10 --checkpoint-every 3 --zero 1 \
    && runok relist_b 2 --steps 10 --checkpoint-every 5 --zero 1 --inject nan@step=7,count=2,rank=1 --max-bad-steps 2 \
         --resume "$tmp/relist_a/state_00000003.bin" --output-dir "$tmp/relist_a" --log "$tmp/relist_b.jsonl" && {
    if grep -q '"step": 8, "rollback_to": 5' "$tmp/relist_b.jsonl" && [ "$(cut -d' ' -f1 "$tmp/relist_a/good_checkpoints.txt" | tr '\n' ' ')" = "3 5 10 " ]; then
        ok "resumed from 3 into a directory listing 3 6 9 10: its rollback goes to its own 5; the list ends 3 5 10"
    else bad "resumed list: $(grep -m1 rollback "$tmp/relist_b.jsonl"); list: $(tr '\n' ' ' < "$tmp/relist_a/good_checkpoints.txt")"; fi
}
# a rollback to a sharded, asynchronous checkpoint (its directory joins good_checkpoints.txt when its
# manifest is written): the same steps after it as rollback_dp2's to state_00000003.bin
runok rollback_sharded 2 --steps 10 --inject nan@step=5,count=3,rank=1 --max-bad-steps 3 --checkpoint-every 3 --zero 1 \
    --checkpoint-format sharded --async-checkpoint 1 && {
    if grep -q "rollback: 3 bad steps in a row (the last: grad norm nan): restored $tmp/rollback_sharded/ckpt_00000003 (step 3)" "$tmp/rollback_sharded.out" \
       && cmp -s <(steps "$tmp/rollback_dp2/log.jsonl") <(steps "$tmp/rollback_sharded/log.jsonl"); then
        ok "rollback_sharded: to ckpt_00000003 (async, sharded); every step's loss and norm = the rollback to state_00000003.bin"
    else bad "rollback_sharded: $(grep -m1 rollback "$tmp/rollback_sharded.out")"; diff <(steps "$tmp/rollback_dp2/log.jsonl") <(steps "$tmp/rollback_sharded/log.jsonl") | head -4; fi
}

# --- bad flags: one line, non-zero exit ---
badflag "--spike-zscore: expected a number in [0, 1000000], found '-1'" --spike-zscore -1
badflag "--spike-window: expected an integer in [2, 1000000], found '1'" --spike-window 1
badflag "--spike-factor: expected 0 (off) or a number in (1, 1e+06], found 0.5" --spike-factor 0.5
badflag "--max-bad-steps: expected an integer in [0, 1000000000], found '-1'" --max-bad-steps -1
badflag "--sdc-check-every: expected an integer in [0, 1000000000], found '-2'" --sdc-check-every -2
badflag "--inject: 'nan@step=0': step: expected an integer in 1.." --inject nan@step=0
badflag "--inject: 'flip@step=1': expected a fault" --inject flip@step=1
badflag "--inject: 'bitflip@rank=3': expected a rank below the world size 1" --inject bitflip@rank=3

# --- a spike of the gradient norm alone: --inject gradspike (one rank's gradients x 16 before their
# reduction, its loss untouched), so the loss rule sees nothing and the grad-norm rule must skip it ---
# the reference: the same runs without the fault (1 process here; 2 processes: `clean` above, which
# has both rules on and skips nothing)
runok gs_clean1 0 "${sp[@]}" --spike-zscore 4 --spike-factor 1.8 && {
    grep -q skipped "$tmp/gs_clean1/log.jsonl" && bad "gs_clean1: a false positive at 1 process: $(grep -m1 skipped "$tmp/gs_clean1/log.jsonl")" \
        || ok "gs_clean1: 24 steps at 1 process, z-score 4 and factor 1.8: nothing skipped"
}
# NAME REF: step 20's reason is the grad-norm rule's, its numbers recomputed here from the log (the
# window: the norms of the 6 healthy steps 14..19, read back bit for bit: the log prints each float's
# shortest round-trip form); steps 1..20 log the reference's losses bit for bit (the fault leaves the
# loss as it is) and norms 1..19 bit for bit; at 1 process step 20's norm is 16 x the reference's
# (a power of two: the sum of squares and its square root scale exactly; 1e-6 allows for a square
# that is subnormal, and a missing or partial scaling moves it by far more)
gs_check() {
    local name=$1 ref=$2 np=$3
    if python3 - "$tmp/$name/log.jsonl" "$tmp/$ref/log.jsonl" "$np" <<'PY'
import json, math, re, sys
rows = {o["step"]: o for o in map(json.loads, open(sys.argv[1])) if "train_loss" in o}
ref = {o["step"]: o for o in map(json.loads, open(sys.argv[2])) if "train_loss" in o}
np, k, W, errs = int(sys.argv[3]), 20, 6, []
why = rows[k].get("skipped", "")
x = rows[k]["grad_norm"]
win = [rows[s]["grad_norm"] for s in range(k - W, k)]  # the healthy steps before k (none skipped)
mean = sum(win) / W
sd = math.sqrt(sum((v - mean) ** 2 for v in win) / W)
m = re.fullmatch(r"grad norm z-score ([0-9.]+) > 4", why)
if m:  # the z-score rule, one-sided, population sd over the window
    z = (x - mean) / sd
    if abs(float(m.group(1)) - z) > 0.051: errs.append("z-score printed %s, recomputed %.3f" % (m.group(1), z))
    print("step %d: %s; recomputed z = (%.4g - %.4g) / %.4g = %.2f" % (k, why, x, mean, sd, z))
else:
    m = re.fullmatch(r"grad norm ([0-9.e+-]+) > 1.8 x recent max ([0-9.e+-]+)", why)
    if not m: errs.append("step %d: reason '%s' is not the grad-norm rule's" % (k, why))
    else:  # the K x recent max rule: %.4g of the norm and of the window's max
        if m.group(1) != "%.4g" % x or m.group(2) != "%.4g" % max(win) or not x > 1.8 * max(win):
            errs.append("'%s': recomputed %.4g > 1.8 x %.4g" % (why, x, max(win)))
        print("step %d: %s; recomputed max of steps %d..%d: %.4g" % (k, why, k - W, k - 1, max(win)))
sk = [s for s in rows if "skipped" in rows[s]]
if sk != [k]: errs.append("skipped steps %s, expected [%d]" % (sk, k))
for s in range(1, k + 1):
    if rows[s]["train_loss"] != ref[s]["train_loss"] or (s < k and rows[s]["grad_norm"] != ref[s]["grad_norm"]):
        errs.append("step %d: loss %r norm %r, the run without the fault %r %r" % (s, rows[s]["train_loss"], rows[s]["grad_norm"],
                    ref[s]["train_loss"], ref[s]["grad_norm"]))
        break
if np == 0 and abs(x / ref[k]["grad_norm"] - 16) > 16e-6: errs.append("step %d: norm %r = %.7g x the reference's, expected 16" % (k, x, x / ref[k]["grad_norm"]))
for e in errs: print(e)
sys.exit(1 if errs else 0)
PY
    then ok "$name: step 20's grad-norm spike skipped by the grad-norm rule, its numbers recomputed from the log; losses of 1..20 = the run without the fault$( [ "$np" = 0 ] && echo ', its norm 16 x' )"
    else bad "$name: the grad-norm spike at step 20 (see above)"; fi
}
for np in 0 2; do
    ref=$( [ $np = 0 ] && echo gs_clean1 || echo clean )
    runok gs_z_$np $np "${sp[@]}" --inject gradspike@step=20,rank=$((np > 1 ? 1 : 0)),factor=16 --spike-zscore 4 --checkpoint-every 1 \
        && check_skip gs_z_$np 20 "grad norm z-score" && gs_check gs_z_$np $ref $np
    runok gs_k_$np $np "${sp[@]}" --inject gradspike@step=20,rank=$((np > 1 ? 1 : 0)) --spike-factor 1.8 --checkpoint-every 1 \
        && check_skip gs_k_$np 20 "grad norm" && gs_check gs_k_$np $ref $np
done

# --- the learning rate after a skipped step: lr follows the step number, not AdamW's update count ---
# (llm/ops/optimizer.h lr_schedule(step - 1)). NaNs at steps 2 (in the warm-up) and 6 (in the cosine): every
# step logs the lr of the schedule's formula, computed here (linear warm-up over 3 steps, then the
# cosine from lr to lr x --lr-final over the rest), and the lr of the same step of a run without them
lrs=(--steps 10 --warmup 3 --lr-final 0.1)
runok lr_clean 0 "${lrs[@]}" && runok lr_skip 0 "${lrs[@]}" --inject 'nan@step=2;nan@step=6' && {
    if python3 - "$tmp/lr_skip/log.jsonl" "$tmp/lr_clean/log.jsonl" <<'PY'
import json, math, sys
skip = [o for o in map(json.loads, open(sys.argv[1])) if "train_loss" in o]
clean = [o for o in map(json.loads, open(sys.argv[2])) if "train_loss" in o]
lr, warm, total, frac = 1e-3, 3, 10, 0.1
def want(s):  # optimizer step s, 0-based: the step number - 1
    if s < warm: return lr * (s + 1) / warm
    ratio = min(1.0, (s - warm) / (total - warm))
    return lr * frac + 0.5 * (1 + math.cos(math.pi * ratio)) * (lr - lr * frac)
errs = []
if [o["step"] for o in skip if "skipped" in o] != [2, 6]: errs.append("skipped steps %s, expected [2, 6]" % [o["step"] for o in skip if "skipped" in o])
for a, b in zip(skip, clean):
    # the trainer computes in float32 (a few ulp: < 1e-6 relative); one step off in this schedule moves
    # the lr by 4% or more
    if abs(a["lr"] - want(a["step"] - 1)) > 1e-5 * want(a["step"] - 1) or a["lr"] != b["lr"]:
        errs.append("step %d: lr %r, the formula %.8g, the run without skips %r" % (a["step"], a["lr"], want(a["step"] - 1), b["lr"]))
print(" ".join("%d:%.4g%s" % (o["step"], o["lr"], "(skipped)" if "skipped" in o else "") for o in skip))
for e in errs: print(e)
sys.exit(1 if errs or len(skip) != 10 or len(clean) != 10 else 0)
PY
    then ok "lr_skip: NaNs at steps 2 and 6 skipped; every step's lr = the schedule's formula of its step number (warm-up 3, cosine to 0.1 x lr) = the run without skips"
    else bad "lr_skip: the lr after a skipped step does not follow the step number"; fi
}
badflag "--inject: 'gradspike@step=2,factor=0': factor: expected a number > 0" --inject gradspike@step=2,factor=0
badflag "--inject: 'gradspike@factor=x': factor: expected a number > 0" --inject gradspike@factor=x
badflag "--inject: 'nan@factor=2': unknown key 'factor' for nan" --inject nan@factor=2

echo "test_health: $pass passed, $fail failed"
[ $fail -eq 0 ]
