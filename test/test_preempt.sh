#!/usr/bin/env bash
# test_preempt.sh: saving on preemption (llm/faults/preempt.h). A signal mid-run (steps slowed to ~150 ms so that
# it lands inside one) must end the run after the step in flight with that step saved, one line, and exit
# status 128 + the signal; --resume latest then gives, for every later step, the loss and gradient norm of
# the uninterrupted run, bit for bit. No checkpoint is saved but on the signal (--checkpoint-every 0: so
# the step saved is the signal's doing), except where a case says. Cases (CPU build, d2 C=32):
#  - SIGTERM to the trainer (one process, gathered): exit 143; SIGINT (sharded): exit 130;
#  - SIGTERM to one rank at dp 2 (gathered; and sharded with --async-checkpoint and a slow disk, so that a
#    save is in flight when the signal comes): every rank saves the same step, the job ends;
#  - SIGTERM to mpirun alone at dp 2 (Open MPI passes it to the ranks a second later and SIGKILLs them a
#    second after that: the save of a step of this model fits; mpirun exits 1, its own status);
#  - a second SIGTERM during the save (a slow disk): the process ends at once, no checkpoint of that step,
#    the earlier one intact and taken by --resume latest;
#  - --save-on-signal 0: the signal ends the process at once, nothing saved.
set -uo pipefail
cd "$(dirname "$0")/.."
CPU=$(realpath "${CPU:-./train_gpt_cpu}")
LOG=build/test_logs/preempt
mkdir -p "$LOG"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
source test/mpi_lib.sh

python3 dev/data/addition.py --train 3000 --val 200 --test 20 --out "$tmp/data" > /dev/null
common=(--model d2,C=32,NH=4,maxT=64,V=257 --train-data "$tmp/data/addition_train.bin" --val-data "" --tokenizer ""
        -b 4 -t 32 --lr 1e-3 --warmup 2 --val-every 0 --sample-every 0 --steps 16 --checkpoint-every 0)
fields() { python3 -c '
import json, sys
steps = {}
for p in sys.argv[1:]:
    for o in map(json.loads, open(p)):
        if "resumed_from" in o: steps = {s: v for s, v in steps.items() if s <= o["step"]}
        if "train_loss" in o: steps[o["step"]] = "%d %r %r" % (o["step"], o["train_loss"], o["grad_norm"])
print("\n".join(steps[s] for s in sorted(steps)))' "$@"; }
last_step() { python3 -c '
import json, sys
print(max([o["step"] for o in map(json.loads, open(sys.argv[1])) if "train_loss" in o] or [0]))' "$1"; }

# the uninterrupted runs, one process and two
timeout 120 "$CPU" "${common[@]}" --output-dir "$tmp/ref1" > "$LOG/ref1.log" 2>&1 || bad "reference (1 process): exit $?"
timeout 120 "${MPIRUN[@]}" -np 2 "$CPU" "${common[@]}" --total-batch 256 --output-dir "$tmp/ref2" > "$LOG/ref2.log" 2>&1 || bad "reference (2 processes): exit $?"

# case NAME NP SIGNAL TARGET EXPECT_STATUS FLAGS...: a run with slow steps; once it logged step AFTER (3), SIGNAL goes to
# TARGET (trainer: the one process; mpirun; rank1: world rank 1's process); then the checks and the resume
case_() {
    local name=$1 np=$2 sig=$3 target=$4 want=$5; shift 5
    local d=$tmp/$name ref=ref$((np > 0 ? 2 : 1)) tb=() cmd=("$CPU")
    [ "$np" -gt 0 ] && { cmd=("${MPIRUN[@]}" -np "$np" "$CPU"); tb=(--total-batch 256); }
    setsid timeout 120 "${cmd[@]}" "${common[@]}" "${tb[@]}" --output-dir "$d" --inject "slow@rank=0,ms=150" "$@" > "$LOG/$name.log" 2>&1 &
    local sid=$! t0
    for _ in $(seq 1 1000); do [ "$(grep -c '"train_loss"' "$d/log.jsonl" 2>/dev/null)" -ge "${AFTER:-3}" ] 2>/dev/null && break; sleep 0.01; done
    local pid
    case $target in
        trainer|mpirun) pid=$(ps -o pid=,comm= -s "$sid" | awk -v c="$([ $target = mpirun ] && echo mpirun || echo train_gpt_cpu)" '$2 == c {print $1}' | head -1) ;;
        rank1) for p in $(ps -o pid=,comm= -s "$sid" | awk '$2 == "train_gpt_cpu" {print $1}'); do
                   tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && pid=$p; done ;;
    esac
    t0=$(date +%s.%N)
    kill -s "$sig" "$pid"
    [ -n "${SECOND:-}" ] && { sleep "$SECOND"; kill -s "$sig" "$pid"; }
    wait $sid; local rc=$? took; took=$(echo "$(date +%s.%N) - $t0" | bc)
    local at; at=$(last_step "$d/log.jsonl")
    local line; line=$(grep -a "^step $at: SIG" "$LOG/$name.log")
    if [ -n "${SECOND:-}" ]; then  # the second signal: at once, nothing of that step, the one before intact
        local saved=4
        if [ "$rc" = "$want" ] && grep -q "^error: a second signal: exiting at once" "$LOG/$name.log" && [ -z "$line" ] \
           && [ ! -e "$d/state_$(printf %08d "$at").bin" ] && [ -e "$d/state_$(printf %08d "$saved").bin" ] \
           && python3 test/ckpt_verify.py --file "$d/state_$(printf %08d "$saved").bin" > /dev/null; then
            ok "$name: a second $sig during the save: exit $rc within $took s, no checkpoint of step $at, state_$saved intact"
        else bad "$name: exit $rc (want $want), line [$line], at $at: $(tail -3 "$LOG/$name.log" | tr '\n' ' ')"; return; fi
    elif [ "$want" = none ]; then  # --save-on-signal 0
        if [ $rc -ne 0 ] && ! grep -q "saved\|SIGTERM on rank" "$LOG/$name.log" && [ "$(ls "$d" | grep -c '_000000')" -eq 0 ]; then
            ok "$name: --save-on-signal 0: the process ended at once (exit $rc within $took s), nothing saved"
        else bad "$name: --save-on-signal 0: exit $rc: $(tail -2 "$LOG/$name.log" | tr '\n' ' ')"; fi
        return
    else
        local ck; ck=$(ls -d "$d"/*_"$(printf %08d "$at")"* 2>/dev/null | grep -v model | tr '\n' ' ')
        # (where the run also saves every 4 steps, the signal's step must be another, or its save would not show)
        [[ " $* " == *" --checkpoint-every 4 "* ]] && [ $((at % 4)) -eq 0 ] && ck=""
        if { [ "$rc" = "$want" ] || { [ "$want" = any ] && [ $rc -ne 0 ]; }; } && [ -n "$line" ] && [ "$(grep -ac ': SIG[A-Z]* on rank' "$LOG/$name.log")" -eq 1 ] && [ -n "$ck" ] \
           && grep -q "^$at " "$d/good_checkpoints.txt" && [ "$at" -lt 16 ]; then
            ok "$name: $sig to the $target: exit $rc within $took s; one line: ${line%%;*}; saved $(basename $ck)"
        else bad "$name: $sig to the $target: exit $rc (want $want), line [$line], at $at, saved [$ck]: $(grep -a -E '^error|watchdog' "$LOG/$name.log" | head -2 | tr '\n' ' ')"; return; fi
        if [ -d "$d/ckpt_$(printf %08d "$at")" ]; then
            [ "$(python3 test/ckpt_verify.py "$d" | cut -d' ' -f1)" = ok ] || bad "$name: $(python3 test/ckpt_verify.py "$d")"
        fi
    fi
    local rcmd=("$CPU"); [ "$np" -gt 0 ] && rcmd=("${MPIRUN[@]}" -np "$np" "$CPU")
    timeout 120 "${rcmd[@]}" "${common[@]}" "${tb[@]}" --output-dir "$d" --resume latest "$@" > "$LOG/${name}_resume.log" 2>&1 \
        || { bad "$name: the resume: exit $?"; return; }
    if [ "$(fields "$d/log.jsonl")" = "$(fields "$tmp/$ref/log.jsonl")" ]; then
        ok "$name: --resume latest ($(grep -o 'resumed from [^ ]* at step [0-9]*' "$LOG/${name}_resume.log" | sed "s|$d/||")): steps 1-16 bit-identical to the uninterrupted run"
    else bad "$name: after the resume the steps differ: $(diff <(fields "$d/log.jsonl") <(fields "$tmp/$ref/log.jsonl") | head -3 | tr '\n' ' ')"; fi
}

# The cases run side by side (each mostly sleeps in its slowed steps; a case's lines go to its own file,
# then in order to the output, and are counted there)
cases=()
bg() { local name=$1; shift; cases+=("$name"); ( "$@" > "$tmp/$name.lines" 2>&1 ) & }
bg term_1 case_ term_1 0 TERM trainer 143
bg int_1_sharded case_ int_1_sharded 0 INT trainer 130 --checkpoint-format sharded
bg term_rank1 case_ term_rank1 2 TERM rank1 143
# (the save of step 4, slowed to ~600 ms, is in flight when the signal comes after step 4)
async_case() { AFTER=4 case_ term_rank1_async 2 TERM rank1 143 --checkpoint-format sharded --async-checkpoint 1 --checkpoint-every 4 \
    --inject "slow@rank=0,ms=150;slowdisk@rank=1,ms=30"; }
bg term_rank1_async async_case
# (mpirun exits with its own status, 1, after a signal; its ranks with 143)
bg term_mpirun case_ term_mpirun 2 TERM mpirun any --checkpoint-format both
# (the signal after step 5; the save of step 6 slowed to seconds, that of step 4 not)
second_case() { AFTER=5 SECOND=0.4 case_ second_1 0 TERM trainer 143 --checkpoint-every 4 --inject "slow@rank=0,ms=150;slowdisk@rank=0,ms=40,step=5"; }
bg second_1 second_case
bg nosave_1 case_ nosave_1 0 TERM trainer none --save-on-signal 0 --checkpoint-every 0
wait
for c in "${cases[@]}"; do
    cat "$tmp/$c.lines"
    pass=$((pass + $(grep -c '^ok' "$tmp/$c.lines"))); fail=$((fail + $(grep -c '^FAIL' "$tmp/$c.lines")))
done
[ "$(cat "$tmp"/*.lines | grep -c '^ok')" -ge 13 ] || bad "preempt: fewer checks ran than the 13 the cases make"

echo "preempt: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
