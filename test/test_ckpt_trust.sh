#!/usr/bin/env bash
# test_ckpt_trust.sh: a run never continues from a rejected, damaged or foreign checkpoint, across the
# lifetimes of a job (kill, restart from elsewhere, rotate, resume, roll back). CPU build, d2 C=32 models.
#  1. Rejected checkpoints (llm/ckpt/ckpt_dir.h's one notion of good): the SDC check fails at step 6 (a bit
#     flipped on rank 0 after step 5), the run writes state_6 / ckpt_6 marked rejected (header[34] = 2),
#     leaves it off the list, rolls back to 3; the job is killed (-9) before the next save; --resume latest
#     takes step 3, not 6: steps 4..12 are bit-identical to a clean run (one that never flipped a bit),
#     which state_3 is a checkpoint of; gathered and sharded, 2 processes. The same with a NaN streak: a
#     checkpoint saved inside it (verdict 1) is skipped by --resume latest and taken, with a line, when
#     named. An explicit --resume of the SDC-rejected file stops with one line. In the directory without its
#     list every checkpoint is a candidate: the rejected one is skipped by its verdict, with one line.
#  2. Rotation: --checkpoint-every 1 --keep-checkpoints 3, sharded, NaNs at 7-11 and --max-bad-steps 5:
#     rotation keeps ckpt_6 (the newest good one) while the streak runs, the rollback restores it and the
#     run ends normally; the steps after the rollback are bit-identical to a run resumed from ckpt_6 at the
#     data position the rollback printed; every listed checkpoint exists.
#  3. Another working directory: a run writes out/ (relative -o) in W1; the same run restarted from W2
#     with an absolute -o (W2 holds another run's out/) rolls back to W1's checkpoint: its log is
#     bit-identical to the same command run from W1. The list holds names, not paths; a list of the old
#     form (paths as typed) is read by name in the output directory.
#  4. Damaged state files (state_6 of a clean run, each damage in a copy of the directory): one bit
#     flipped, truncated, a random body, empty, a bad magic, and header fields out of range (step -7, AdamW
#     step -3, a streak of 1.5e9; the checksum recomputed, so that the range check must see it):
#     --resume latest skips each with one line naming the file and what failed and takes state_3 (steps
#     4..8 bit-identical to the clean run); an explicit --resume of it stops with one line and exit 1. A
#     state file of the previous version (no checksum) is read, with a line saying it is unverified.
#  5. A failed gathered save (--inject diskfail on rank 0) leaves nothing of its step: no temporary file,
#     no model file, no list entry; the earlier checkpoint is intact.
#  6. The log after a resume: the resumed run marks where it resumed; scripts/plot_logs.py draws each step
#     once, the resumed run's values for the steps it ran again.
#  7. An error every rank sees alike is printed once under mpirun (2 and 4 processes); an unreadable
#     checkpoint directory says "Permission denied" (run as an unprivileged user where this runs as root).
set -uo pipefail
cd "$(dirname "$0")/.."
CPU=$(realpath "${CPU:-./train_gpt_cpu}")
LOG=build/test_logs/ckpt_trust
mkdir -p "$LOG"
tmp=$(mktemp -d)
trap 'chmod -R u+rwx "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
source test/mpi_lib.sh

python3 dev/data/addition.py --train 3000 --val 200 --test 20 --out "$tmp/data" > /dev/null
common=(--model d2,C=32,NH=4,maxT=64,V=257 --train-data "$tmp/data/addition_train.bin" --val-data "" --tokenizer ""
        -b 4 -t 32 --total-batch 256 --lr 1e-3 --warmup 2 --val-every 0 --sample-every 0 --shuffle 0)

# run NAME NP ARGS...: one job in the background-free way (NP 0: without mpirun); output in $LOG/NAME.log, status returned
run() {
    local name=$1 np=$2; shift 2
    local cmd=("$CPU")
    [ "$np" -gt 0 ] && cmd=("${MPIRUN[@]}" -np "$np" "$CPU")
    timeout 120 "${cmd[@]}" "${common[@]}" "$@" > "$LOG/$name.log" 2>&1
}
# the step, loss and norm of every step a log.jsonl holds, in order
fields() { python3 -c '
import json, sys
for o in map(json.loads, open(sys.argv[1])):
    if "train_loss" in o: print(o["step"], repr(o["train_loss"]), repr(o["grad_norm"]))' "$1"; }
# header[34], the verdict, of a state file or a sharded checkpoint (rank 0's shard)
verdict() { python3 -c '
import os, struct, sys
p = sys.argv[1]
if os.path.isdir(p): p = os.path.join(p, "shard_0.bin")
print(struct.unpack("<i", open(p, "rb").read()[136:140])[0])' "$1"; }
listed() { cut -d' ' -f1 "$1/good_checkpoints.txt" | tr '\n' ' '; }
errors() { grep -c '^error' "$1"; }

# the clean run: checkpoints every 3 steps, 12 steps, 2 processes (the reference of parts 1 and 4)
run clean 2 --steps 12 --checkpoint-every 3 --checkpoint-format both --output-dir "$tmp/clean" || bad "clean run: exit $?"
fields "$tmp/clean/log.jsonl" > "$tmp/clean.fields"

# ---------------------------------------------------------------------------------------------------
# 1. the SDC rollback, a kill -9 before the next save, --resume latest
for fmt in gathered sharded; do
    d=$tmp/sdc_$fmt
    name=$([ $fmt = gathered ] && echo state_00000006.bin || echo ckpt_00000006)
    # slow steps (250 ms) leave the second pass of steps 4-5 long enough to kill the job in
    setsid "${MPIRUN[@]}" -np 2 "$CPU" "${common[@]}" --steps 12 --checkpoint-every 3 --checkpoint-format $fmt --sdc-check-every 100 \
        --inject "bitflip@step=5,rank=0,index=100,bit=30;slow@rank=0,ms=250" --output-dir "$d" > "$LOG/sdc_$fmt.log" 2>&1 &
    sid=$!
    for _ in $(seq 1 600); do grep -qs '"rollback_to": 3' "$d/log.jsonl" && break; sleep 0.02; done
    kill -9 $(ps -o pid= -s "$sid") 2>/dev/null; wait $sid 2>/dev/null
    if grep -qs '"rollback_to": 3' "$d/log.jsonl" && [ -e "$d/$name" ] && [ "$(verdict "$d/$name")" = 2 ] && [ "$(listed "$d")" = "3 " ]; then
        ok "sdc $fmt: the SDC check at 6 rolled back to 3; $name saved marked rejected (verdict 2), not listed; killed before the next save"
    else bad "sdc $fmt: rollback $(grep -c rollback_to "$d/log.jsonl" 2>/dev/null), $name $( [ -e "$d/$name" ] && verdict "$d/$name"), list: $(listed "$d")"; continue; fi
    cp -r "$d/$name" "$tmp/rejected_$name"  # (the resumed run below saves its own step 6)
    if [ $fmt = gathered ]; then  # the same directory without its list: every checkpoint a candidate, the verdict decides
        cp -r "$d" "$d.nolist" && rm "$d.nolist/good_checkpoints.txt"
        run sdc_nolist 2 --steps 12 --checkpoint-every 3 --output-dir "$d.nolist" --log "$tmp/sdc_nolist.jsonl" --resume latest
        if [ $? -eq 0 ] && grep -q "has no good_checkpoints.txt: each of its 2 checkpoints is a candidate" "$LOG/sdc_nolist.log" \
           && grep -q "^resume: $d.nolist/state_00000006.bin skipped: rejected by the SDC check" "$LOG/sdc_nolist.log" \
           && grep -q "resumed from $d.nolist/state_00000003.bin at step 3" "$LOG/sdc_nolist.log" \
           && cmp -s <(fields "$tmp/sdc_nolist.jsonl") <(tail -9 "$tmp/clean.fields"); then
            ok "sdc gathered, the list removed: --resume latest tries state_6 (rejected by the SDC check: skipped, one line), takes state_3"
        else bad "sdc gathered without a list: $(grep -E 'candidate|skipped|resumed|^error' "$LOG/sdc_nolist.log" | tr '\n' ' ')"; fi
    fi
    run "sdc_${fmt}_resume" 2 --steps 12 --checkpoint-every 3 --checkpoint-format $fmt --sdc-check-every 100 --output-dir "$d" \
        --log "$tmp/sdc_$fmt.resumed.jsonl" --resume latest || { bad "sdc $fmt: resume exit $?"; continue; }
    from=$(grep -o "resumed from [^ ]* at step [0-9]*" "$LOG/sdc_${fmt}_resume.log")
    if [[ "$from" == *"_00000003"*" at step 3" ]] && cmp -s <(fields "$tmp/sdc_$fmt.resumed.jsonl") <(tail -9 "$tmp/clean.fields"); then
        ok "sdc $fmt: --resume latest $from; steps 4..12 bit-identical to the clean run (the flipped bit is gone)"
    else bad "sdc $fmt: $from; steps: $(diff <(fields "$tmp/sdc_$fmt.resumed.jsonl") <(tail -9 "$tmp/clean.fields") | head -3 | tr '\n' ' ')"; fi
done
# an explicit --resume of the rejected state file: one line, exit 1
run sdc_explicit 0 --steps 12 --output-dir "$tmp/sdc_x" --resume "$tmp/rejected_state_00000006.bin"; rc=$?
if [ $rc -eq 1 ] && [ "$(errors "$LOG/sdc_explicit.log")" -eq 1 ] && grep -q "^error: --resume: .*rejected_state_00000006.bin was rejected by the SDC check" "$LOG/sdc_explicit.log"; then
    ok "explicit --resume of the SDC-rejected state file: exit 1, one line: $(grep '^error' "$LOG/sdc_explicit.log")"
else bad "explicit --resume of the SDC-rejected state: exit $rc: $(cat "$LOG/sdc_explicit.log" | tail -2)"; fi
# a NaN streak (5, 6, 7) with the job ending inside it: ckpt_6 is saved inside the streak (verdict 1)
run streak 2 --steps 7 --checkpoint-every 3 --checkpoint-format sharded --inject "nan@step=5,count=3,rank=1" --max-bad-steps 5 \
    --output-dir "$tmp/streak" || bad "streak: exit $?"
v6=$(verdict "$tmp/streak/ckpt_00000006"); cp -r "$tmp/streak/ckpt_00000006" "$tmp/streak_ckpt6"  # (the resumed run saves its own step 6)
run streak_latest 2 --steps 9 --checkpoint-every 3 --checkpoint-format sharded --output-dir "$tmp/streak" --log "$tmp/streak.l.jsonl" --resume latest
rc=$?
if [ $rc -eq 0 ] && [ "$v6" = 1 ] && grep -q "resumed from $tmp/streak/ckpt_00000003 at step 3" "$LOG/streak_latest.log"; then
    ok "streak: ckpt_6 saved inside the streak (verdict 1); --resume latest takes ckpt_3"
else bad "streak: exit $rc, verdict $v6: $(grep -E 'resumed|skipped|error' "$LOG/streak_latest.log" | tr '\n' ' ')"; fi
run streak_named 2 --steps 9 --output-dir "$tmp/streak_n" --resume "$tmp/streak_ckpt6"; rc=$?
if [ $rc -eq 0 ] && grep -q "streak_ckpt6 was saved inside a streak of 2 bad steps: resumed as asked" "$LOG/streak_named.log" \
   && [ "$(grep -c 'saved inside a streak' "$LOG/streak_named.log")" -eq 1 ]; then
    ok "streak: ckpt_6 named by --resume is taken, with one line saying it was saved inside a streak"
else bad "streak: --resume ckpt_6: exit $rc: $(grep -E 'streak|error' "$LOG/streak_named.log" | tr '\n' ' ')"; fi

# ---------------------------------------------------------------------------------------------------
# 2. rotation during a NaN streak
rot=(--checkpoint-every 1 --keep-checkpoints 3 --max-bad-steps 5 --zero 1)
run rotate 2 "${rot[@]}" --steps 14 --checkpoint-format sharded --inject "nan@step=7,count=5,rank=1" --output-dir "$tmp/rotate"; rc=$?
at=$(sed -nE 's/.*the data go on from epoch ([0-9]+) sample ([0-9]+).*/\1 \2/p' "$LOG/rotate.log")
if [ $rc -eq 0 ] && grep -q '"step": 11, "rollback_to": 6' "$tmp/rotate/log.jsonl" && [ -n "$at" ]; then
    ok "rotation (--keep-checkpoints 3) during the streak 7-11 kept ckpt_6: the rollback restored it, exit 0"
    # the reference: the state of the same run after step 6 (a state file: the resharding matrix of
    # test_checkpoint.sh shows it resumes bit-identically to the sharded one), at the rollback's data position
    run rotate_ref0 2 "${rot[@]}" --steps 6 --checkpoint-format gathered --output-dir "$tmp/rotate_ref" || bad "rotate ref: exit $?"
    python3 - "$tmp/rotate_ref/state_00000006.bin" $at <<'PY'
import struct, sys
p, epoch, sample = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
b = bytearray(open(p, "rb").read())
b[48:64] = struct.pack("<qq", epoch, sample)  # header[12..15]: the data position
open(p, "wb").write(bytes(b))
PY
    python3 test/ckpt_verify.py --seal "$tmp/rotate_ref/state_00000006.bin"
    run rotate_ref 2 "${rot[@]}" --steps 14 --output-dir "$tmp/rotate_ref2" --resume "$tmp/rotate_ref/state_00000006.bin" || bad "rotate ref resume: exit $?"
    if cmp -s <(fields "$tmp/rotate/log.jsonl" | tail -8) <(fields "$tmp/rotate_ref2/log.jsonl"); then
        ok "rotation: steps 7-14 after the rollback bit-identical to the state after step 6 resumed at the data position the rollback printed ($at)"
    else bad "rotation: after the rollback: $(diff <(fields "$tmp/rotate/log.jsonl" | tail -8) <(fields "$tmp/rotate_ref2/log.jsonl") | head -2 | tr '\n' ' ')"; fi
else bad "rotation during a streak: exit $rc: $(grep -E '^error|rollback' "$LOG/rotate.log" | tail -2 | tr '\n' ' ')"; fi
missing=""
for x in $(cut -d' ' -f2 "$tmp/rotate/good_checkpoints.txt"); do [ -e "$tmp/rotate/$x/manifest.txt" ] || missing="$missing $x"; done
left=$(cd "$tmp/rotate" && ls -d ckpt_* | tr '\n' ' ')
[ -z "$missing" ] && [ "$left" = "ckpt_00000012 ckpt_00000013 ckpt_00000014 " ] && ok "rotation: the list names only checkpoints that are there; left: $left" \
    || bad "rotation: listed but gone:$missing; left: $left"

# ---------------------------------------------------------------------------------------------------
# 3. a run restarted from another working directory, with an absolute -o
mkdir -p "$tmp/W1" "$tmp/W2"
wrun() {  # NAME DIR ARGS...: a one-process run from working directory DIR
    local name=$1 dir=$2; shift 2
    (cd "$dir" && timeout 120 "$CPU" "${common[@]}" "$@") > "$LOG/$name.log" 2>&1
}
wrun w1 "$tmp/W1" --steps 6 --checkpoint-every 3 -o out || bad "W1: exit $?"
wrun w2 "$tmp/W2" --steps 6 --checkpoint-every 3 -o out --seed 7 || bad "W2 (another run): exit $?"
cp -r "$tmp/W1/out" "$tmp/W1/out.bak"
more=(--steps 12 --checkpoint-every 3 --resume latest --inject "nan@step=8,count=2" --max-bad-steps 2)
wrun w2_abs "$tmp/W2" -o "$tmp/W1/out" "${more[@]}"; rc=$?
cp "$tmp/W1/out/log.jsonl" "$tmp/w2_abs.jsonl"
rm -rf "$tmp/W1/out" && mv "$tmp/W1/out.bak" "$tmp/W1/out"
wrun w1_rel "$tmp/W1" -o out "${more[@]}" || bad "W1 again from W1: exit $?"
if [ $rc -eq 0 ] && grep -q "restored $tmp/W1/out/state_00000006.bin (step 6)" "$LOG/w2_abs.log" && [ "$(cut -d' ' -f2 "$tmp/W1/out/good_checkpoints.txt" | grep -c /)" = 0 ] \
   && cmp -s <(fields "$tmp/w2_abs.jsonl") <(fields "$tmp/W1/out/log.jsonl"); then
    ok "from another directory with an absolute -o: the rollback restored W1's state_6 (not W2's out/); the log bit-identical to the run from W1; the list holds names"
else bad "another directory: exit $rc: $(grep -E 'restored|^error' "$LOG/w2_abs.log" | tr '\n' ' ')"; fi
# a list of the old form (paths as typed, relative to the working directory then)
printf '3 out/state_00000003.bin\n6 out/state_00000006.bin\n' > "$tmp/W1/out/good_checkpoints.txt"
wrun w2_old "$tmp/W2" -o "$tmp/W1/out" --steps 8 --resume latest --log "$tmp/old_list.jsonl"
if [ $? -eq 0 ] && grep -q "resumed from $tmp/W1/out/state_00000006.bin at step 6" "$LOG/w2_old.log"; then
    ok "a list of the old form (paths as typed): read by name in the output directory: $(grep -o 'resumed from .*' "$LOG/w2_old.log")"
else bad "old list: $(grep -E 'resumed|^error' "$LOG/w2_old.log" | tr '\n' ' ')"; fi

# ---------------------------------------------------------------------------------------------------
# 4. damaged state files: --resume latest skips them, an explicit --resume stops (one process: its own
# clean run is the reference, bit for bit)
run clean1 0 --steps 8 --checkpoint-every 3 --output-dir "$tmp/clean1" || bad "clean run (one process): exit $?"
fields "$tmp/clean1/log.jsonl" > "$tmp/clean1.fields"
S6=$tmp/clean1/state_00000006.bin
damage() {  # NAME WHAT-FAILED PYTHON: a copy of the clean run's state_3 and state_6 (and its list), state_6 changed by PYTHON(b)
    local name=$1 sub=$2 py=$3 d=$tmp/dmg_$1
    mkdir -p "$d" && cp "$tmp/clean1/state_00000003.bin" "$S6" "$d/"
    printf '3 state_00000003.bin\n6 state_00000006.bin\n' > "$d/good_checkpoints.txt"
    python3 - "$d/state_00000006.bin" "$py" <<'PY'
import os, random, struct, sys
p, code = sys.argv[1], sys.argv[2]
b = bytearray(open(p, "rb").read())
random.seed(1)
exec(code)
open(p, "wb").write(bytes(b))
PY
    [[ "$name" == range_* ]] && python3 test/ckpt_verify.py --seal "$d/state_00000006.bin"
    run "dmg_$name" 0 --steps 8 --output-dir "$d" --resume latest --log "$d/resumed.jsonl"; local rc=$?
    local skip; skip=$(grep "^resume: $d/state_00000006.bin skipped: " "$LOG/dmg_$name.log")
    if [ $rc -eq 0 ] && [ "$(grep -c 'skipped' "$LOG/dmg_$name.log")" -eq 1 ] && [[ "$skip" == *"$sub"* ]] \
       && grep -q "resumed from $d/state_00000003.bin at step 3" "$LOG/dmg_$name.log" \
       && cmp -s <(fields "$d/resumed.jsonl") <(sed -n 4,8p "$tmp/clean1.fields"); then
        ok "state_6 $name: --resume latest skips it (${skip#resume: $d/}) and takes state_3; steps 4..8 = the clean run's"
    else bad "state_6 $name: exit $rc: $(grep -E 'skipped|resumed|^error' "$LOG/dmg_$name.log" | tr '\n' ' ')"; fi
    run "dmgx_$name" 0 --steps 8 --output-dir "$d/x" --resume "$d/state_00000006.bin"; rc=$?
    local e; e=$(grep '^error' "$LOG/dmgx_$name.log")
    if [ $rc -eq 1 ] && [ "$(errors "$LOG/dmgx_$name.log")" -eq 1 ] && [[ "$e" == "error: --resume: $d/state_00000006.bin: "*"$sub"* ]]; then
        ok "state_6 $name: an explicit --resume stops, exit 1, one line"
    else bad "state_6 $name: explicit --resume: exit $rc: $(tail -2 "$LOG/dmgx_$name.log" | tr '\n' ' ')"; fi
}
damage bitflip "checksum" 'i = random.randrange(1024, len(b)); b[i] ^= 1 << random.randrange(8)'
damage truncated "expected" 'del b[len(b) // 2:]'
damage random_body "checksum" 'b[1024:] = os.urandom(len(b) - 1024)'
damage empty "expected a 1024-byte header, found a file of 0 bytes" 'del b[:]'
damage magic "expected magic 20261122" 'b[0:4] = struct.pack("<i", 12345)'
damage range_step "header[2] (step): expected >= 0" 'b[8:12] = struct.pack("<i", -7)'
damage range_adam "header[3], header[33] (AdamW" 'b[12:16] = struct.pack("<i", -3)'
damage range_streak "header[32] (bad steps in a row)" 'b[128:132] = struct.pack("<i", 1500000000)'
# the previous version (1: no verdict, no checksum): read, with a line saying it is unverified
d=$tmp/v1 && mkdir -p "$d" && cp "$S6" "$d/" && printf '6 state_00000006.bin\n' > "$d/good_checkpoints.txt"
python3 -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[4:8] = (1).to_bytes(4, "little"); b[136:152] = bytes(16); open(p, "wb").write(b)' "$d/state_00000006.bin"
run v1 0 --steps 8 --output-dir "$d" --resume latest --log "$d/resumed.jsonl"
if [ $? -eq 0 ] && grep -q "state_00000006.bin has no checksum (written before checksums existed): read unverified" "$LOG/v1.log" \
   && cmp -s <(fields "$d/resumed.jsonl") <(sed -n 7,8p "$tmp/clean1.fields"); then
    ok "a state file of version 1 (no checksum): resumed with one line saying it is unverified; steps 7-8 = the clean run's"
else bad "version 1 state: $(grep -E 'checksum|resumed|^error' "$LOG/v1.log" | tr '\n' ' ')"; fi

# ---------------------------------------------------------------------------------------------------
# 5. a failed gathered save leaves nothing of its step: failing in the model file (70000 bytes into
# it), and in the state file after the model file was whole (200000 bytes: the model file is ~160 KB)
for budget in 70000 200000; do
    d=$tmp/gfail_$budget
    run "gfail_$budget" 2 --steps 6 --checkpoint-every 2 --inject "diskfail@step=4,rank=0,bytes=$budget" --output-dir "$d"; rc=$?
    left=$(cd "$d" && ls | grep -v log.jsonl | tr '\n' ' ')
    if [ $rc -ne 0 ] && [ "$(errors "$LOG/gfail_$budget.log")" -eq 1 ] \
       && grep -q "^error: checkpoint of step 4 not saved: .*/$([ $budget = 70000 ] && echo model || echo state)_00000004.bin.tmp: write failed (--inject diskfail): No space left on device" "$LOG/gfail_$budget.log" \
       && [ "$left" = "good_checkpoints.txt model_00000002.bin state_00000002.bin " ] && [ "$(listed "$d")" = "2 " ] \
       && python3 test/ckpt_verify.py --file "$d/state_00000002.bin" "$d/model_00000002.bin" > /dev/null; then
        ok "a failed gathered save ($budget bytes): exit $rc, one line; nothing of step 4 left ($left), step 2 intact (checksums)"
    else bad "failed gathered save ($budget bytes): exit $rc, left: $left, list: $(listed "$d"): $(grep '^error' "$LOG/gfail_$budget.log")"; fi
done

# ---------------------------------------------------------------------------------------------------
# 6. the log of a killed and resumed run: a mark, and each step drawn once. The killed run logged steps 1-8
# after its save at 3; the resumed run (another --lr, so that its steps differ) runs 4-6: the course the run
# took is 1-3 of the first and 4-6 of the second, not the first's 7-8 after them
d=$tmp/relog && mkdir -p "$d" && cp "$tmp/clean1/state_00000003.bin" "$d/" && printf '3 state_00000003.bin\n' > "$d/good_checkpoints.txt"
head -8 "$tmp/clean1/log.jsonl" > "$d/log.jsonl"
run relog 0 --steps 6 --lr 5e-4 --output-dir "$d" --resume latest || bad "relog: exit $?"
drawn=$(python3 scripts/plot_logs.py --out "$tmp/relog.png" --dump r="$d/log.jsonl" | awk '{print $2, $3}')
want=$( (head -3 "$tmp/clean1.fields"; fields "$d/log.jsonl" | tail -3) | awk '{print $1, $2}')
if grep -q '{"step": 3, "resumed_from": "'"$d"'/state_00000003.bin"}' "$d/log.jsonl" && [ "$drawn" = "$want" ] \
   && [ "$(echo "$drawn" | wc -l)" -eq 6 ] && [ "$(echo "$drawn" | sed -n 5p)" != "$(sed -n 5p "$tmp/clean1.fields" | awk '{print $1, $2}')" ]; then
    ok "the resumed log marks its start ({\"step\": 3, \"resumed_from\": ...}); plot_logs.py draws steps 1-6 once each: 1-3 of the killed run, 4-6 of the resumed one (not the killed run's 7-8)"
else bad "the resumed log: drawn [$(echo $drawn)] want [$(echo $want)]"; fi

# ---------------------------------------------------------------------------------------------------
# 7. one line for an error every rank sees alike; an unreadable checkpoint directory
for np in 2 4; do
    out=$(timeout 60 "${MPIRUN[@]}" -np $np "$CPU" "${common[@]}" --total-batch $((128 * np)) --train-data "$tmp/nothing_*.bin" --output-dir "$tmp/alike" 2>&1); rc=$?
    n=$(grep -c 'error' <<< "$out")
    [ $rc -ne 0 ] && [ "$n" -eq 1 ] && ok "a missing data file under mpirun -np $np: one line: $(grep error <<< "$out")" \
        || bad "a missing data file under mpirun -np $np: exit $rc, $n lines: $out"
    out=$(timeout 60 "${MPIRUN[@]}" -np $np "$CPU" "${common[@]}" --lr 5 --output-dir "$tmp/alike" 2>&1); rc=$?
    n=$(grep -c 'error' <<< "$out")
    [ $rc -ne 0 ] && [ "$n" -eq 1 ] && ok "a bad flag under mpirun -np $np: one line: $(grep error <<< "$out")" \
        || bad "a bad flag under mpirun -np $np: exit $rc, $n lines: $out"
done
# a small program that fails on purpose (test/test_fatal.cu): a line every rank says once, one rank's own line
# once, every rank's own line each
for m in "alike 1 the same line on every rank" "one 1 the line of rank 2 alone" "each 3 the line of rank"; do
    read -r mode want text <<< "$m"
    out=$(timeout 60 "${MPIRUN[@]}" -np 3 build/test_fatal_cpu "$mode" 2>&1); rc=$?
    n=$(grep -c "^error: test_fatal: $text" <<< "$out")
    [ $rc -ne 0 ] && [ "$n" -eq "$want" ] && [ "$(grep -c . <<< "$out")" -eq "$want" ] && ok "fatal under mpirun -np 3, $mode: $n line(s): $(echo $out)" \
        || bad "fatal under mpirun -np 3, $mode: exit $rc, $n matching of $(grep -c . <<< "$out") lines (want $want): $out"
done
d=$tmp/locked && mkdir -p "$d" && cp -r "$tmp/clean/ckpt_00000003" "$d/" && chmod 000 "$d/ckpt_00000003"
as_user=()
[ "$(id -u)" = 0 ] && as_user=(setpriv --reuid=nobody --regid=nogroup --clear-groups) && chmod o+rx "$tmp" && chmod 777 "$d" && chmod -R o+r "$tmp/data"
out=$(cd /tmp && timeout 60 "${as_user[@]}" "$CPU" "${common[@]}" --steps 4 --output-dir "$d/o" --resume "$d/ckpt_00000003" 2>&1 > /dev/null); rc=$?
if [ $rc -eq 1 ] && [ "$(grep -c . <<< "$out")" -eq 1 ] && [[ "$out" == "error: --resume: $d/ckpt_00000003: cannot read manifest.txt: Permission denied" ]]; then
    ok "an unreadable checkpoint directory: one line: $out"
else bad "an unreadable checkpoint directory: exit $rc: $out"; fi

echo "ckpt_trust: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
