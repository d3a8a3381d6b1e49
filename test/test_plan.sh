#!/bin/bash
# test_plan.sh: the scale planner (scripts/plan.py) against what the trainer measures, layout by layout: a
# matrix of small runs (dp with ZeRO 0..3 and gradient accumulation, tp with and without sequence parallelism,
# pp with every schedule, cp ring and Ulysses, recompute none/selective/full, MoE, FP32, BF16 and FP16 builds,
# 4-rank mixes, FP8 in each recipe, the emulated CUDA build, expert parallelism) writes --report-json, and test/plan_check.py requires the planner's --json, on every rank, equal to
# it: each memory kind live and peak (the tagged allocator), each ledger row's calls, payload and sent bytes
# (the comm ledger), to the byte; expert parallelism's all-to-alls depend on the routing: their calls are required
# per rank, their payload summed over each ep group (exact when no copy is dropped), their bytes sent printed. One kind is not always exact and is then printed with its error, not required:
# the communication buffers of ZeRO-3, and of ZeRO-2 without gradient accumulation (a pool whose peak depends on
# when MPI finishes each reduction: docs/plan.md); ZeRO-2 with accumulation is exact. The
# planner's bubble must equal the one the trainer's log prints from its simulator, and its step time for the
# CPU cluster preset is printed beside the measured one (reported, not bounded: docs/plan.md).
# Ends with "test_plan: N passed, M failed"; exit status 1 on any failure.
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
CPU=${CPU:-./train_gpt_cpu}
CPU16=${CPU16:-./build/train_gpt_cpu_bf16}
CPU16F=${CPU16F:-./build/train_gpt_cpu_fp16}
EMU16=${EMU16:-./build/train_gpt_emu_bf16}
LOG=build/plan
mkdir -p "$LOG"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source test/mpi_lib.sh  # MPIRUN, ok, bad
export PIPELINE_SIM=${PIPELINE_SIM:-./build/pipeline_sim}
for f in "$CPU" "$CPU16" "$CPU16F" "$EMU16" "$PIPELINE_SIM"; do [ -x "$f" ] || { echo "FAIL $f: not built (make $f)"; echo "test_plan: 0 passed, 1 failed"; exit 1; }; done

python3 dev/data/addition.py --train 3000 --val 200 --test 20 --out "$tmp/data" > /dev/null
D="$tmp/data"
# d4, C = 32, NH = 4: tp 2 splits the heads, cp 2 and 4 the 32 or 64 tokens, pp 2 x vpp 2 the 4 layers
MODEL=(--model d4,C=32,NH=4,maxT=64,V=257 -b 4 -t 32)
common=(--train-data "$D/addition_train.bin" --val-data "$D/addition_val.bin" --tokenizer "$D/addition_tokenizer.bin"
        --steps 2 --val-every 0 --sample-every 0)

# case NAME NP BIN PRECISION [--approx KINDS] -- FLAGS...: the run, then the planner against its report
# (an emulated CUDA build BIN is planned with --build cuda: it allocates the CUDA build's cuBLASLt workspace and norm partials)
case_run() {
    local name=$1 np=$2 bin=$3 prec=$4 build=cpu; shift 4
    case $bin in *emu*) build=cuda ;; esac
    local approx=()
    if [ "$1" = "--approx" ]; then approx=(--approx "$2"); shift 2; fi
    shift  # --
    EMU_DEVICES=8 timeout 120 "${MPIRUN[@]}" -x EMU_DEVICES -np "$np" "$bin" "${MODEL[@]}" "${common[@]}" --output-dir "$tmp/$name" \
        --report-json "$tmp/$name.json" "$@" > "$LOG/$name.log" 2>&1 || { bad "$name: the run failed (see $LOG/$name.log)"; return; }
    python3 test/plan_check.py "$name" "$tmp/$name.json" "${approx[@]}" -- "${MODEL[@]}" -np "$np" --precision "$prec" \
        --build "$build" "$@" \
        > "$LOG/$name.check" 2>&1
    local rc=$?
    cat "$LOG/$name.check"
    if [ $rc -eq 0 ] && grep -q "^ok   $name:" "$LOG/$name.check"; then pass=$((pass+1)); else fail=$((fail+1)); fi
    # the bubble: the planner's against the one the trainer's log prints (its simulator, pipeline_print)
    local logged planned
    logged=$(grep -o 'simulated bubble [0-9.]*' "$LOG/$name.log" | awk '{print $3}')
    if [ -n "$logged" ]; then
        planned=$(python3 scripts/plan.py --json --build "$build" "${MODEL[@]}" -np "$np" --precision "$prec" "$@" |
                  python3 -c 'import json,sys; print("%.3f" % json.load(sys.stdin)["bubble"])')
        if [ "$planned" = "$logged" ]; then ok "$name: bubble $planned, the trainer's simulated bubble"
        else bad "$name: bubble planned $planned, the trainer's log says $logged"; fi
    fi
}
F32="$CPU fp32"
case_run one      1 $F32 -- --total-batch 256
case_run ddp      2 $F32 -- --zero 0 --total-batch 512
case_run zero1    2 $F32 -- --zero 1 --total-batch 512
case_run zero2    2 $F32 -- --zero 2 --total-batch 512
case_run zero2m1  2 $F32 --approx comm_buffers -- --zero 2 --total-batch 256
case_run zero3    2 $F32 --approx comm_buffers -- --zero 3 --total-batch 512
case_run tp2      2 $F32 -- --tp 2
case_run tp2sp    2 $F32 -- --tp 2 --sequence-parallel 1
case_run tp2sel   2 $F32 -- --tp 2 --sequence-parallel 1 --recompute selective
case_run tp2full  2 $F32 -- --tp 2 --recompute full
case_run gpipe    2 $F32 -- --pp 2 --schedule gpipe --total-batch 512
case_run 1f1b     2 $F32 -- --pp 2 --schedule 1f1b --total-batch 512 --recompute full
case_run inter    2 $F32 -- --pp 2 --schedule interleaved --vpp 2 --total-batch 512
case_run zbh1     2 $F32 -- --pp 2 --schedule zb-h1 --total-batch 512 --recompute selective
case_run zbv      2 $F32 -- --pp 2 --schedule zbv --total-batch 512
case_run dualpv3  2 $F32 --approx comm_buffers -- --pp 2 --schedule dualpipev --total-batch 512 --zero 3
case_run cpring   2 $F32 -- --cp 2
case_run cpuly    2 $F32 -- --cp 2 --cp-impl ulysses --recompute selective --total-batch 256
case_run cp4      4 $F32 -- --cp 4 -t 64 --total-batch 256
case_run cpzero1  2 $F32 -- --cp 2 --zero 1
case_run dptpsp   4 $F32 -- --tp 2 --sequence-parallel 1 --zero 1
case_run pptp     4 $F32 -- --pp 2 --tp 2 --total-batch 256
case_run ppdp     4 $F32 -- --pp 2 --zero 1 --total-batch 512
case_run ppdpz2   4 $F32 -- --pp 2 --zero 2 --total-batch 512
case_run uly_tp   4 $F32 -- --cp 2 --cp-impl ulysses --tp 2 --recompute full
case_run moedp    2 $F32 -- --experts 4 --top-k 2 --zero 1 --total-batch 512
case_run moepp    2 $F32 -- --experts 4 --top-k 2 --moe-every 2 --pp 2 --total-batch 512
case_run moetp    2 $F32 -- --experts 4 --top-k 2 --tp 2 --recompute selective
# experts with a micro-batch's tokens split over ranks: the whole micro-batch's routing buffers and the group's map,
# the logits' all-gather per moe layer and micro-batch (cp; tp under sp, with the counts' sum and the TP_NORM experts;
# both: over tp, B T / cp tokens, then over cp, B T)
case_run moecp    2 $F32 -- --experts 4 --top-k 2 --cp 2 --zero 1 --total-batch 256
case_run moesp    2 $F32 -- --experts 4 --top-k 2 --tp 2 --sequence-parallel 1 --moe-every 2
case_run moecpsp  4 $F32 -- --experts 4 --top-k 2 --cp 2 --tp 2 --sequence-parallel 1
case_run moecpspu 4 $F32 -- --experts 4 --top-k 2 --cp 2 --tp 2 --sequence-parallel 1 --cp-impl ulysses --moe-every 2 --zero 1 --total-batch 256
# expert parallelism (ep folds into dp): the experts units split over ep and sharded over edp, the moe buffers of the
# received rows, the edp group's gradient rows exact; the ep group's all-to-alls: calls per rank exact, payload
# summed over each ep group exact without drops (plan_check.py), the bytes sent printed against the uniform routing
E4=(--experts 4 --top-k 2)
case_run ep2z0    2 $F32 -- "${E4[@]}" --ep 2 --zero 0 --total-batch 512
case_run ep2z3    2 $F32 --approx comm_buffers -- "${E4[@]}" --ep 2 --zero 3 --total-batch 512
case_run dp4ep2   4 $F32 -- "${E4[@]}" --ep 2 --zero 1 --total-batch 512
case_run ep2zbv   4 $F32 -- "${E4[@]}" --ep 2 --pp 2 --schedule zbv --total-batch 1024
case_run ep2tp2   4 $F32 -- "${E4[@]}" --ep 2 --tp 2 --total-batch 256
case_run ep2cap   2 "$CPU16" bf16 -- "${E4[@]}" --ep 2 --zero 1 --capacity-factor 1 --moe-every 2 --recompute full --total-batch 512
case_run ep2cp2   4 $F32 -- "${E4[@]}" --ep 2 --cp 2 --total-batch 256
case_run bf16     2 "$CPU16" bf16 -- --tp 2 --sequence-parallel 1 --zero 1
case_run bf16pp   2 "$CPU16" bf16 -- --pp 2 --zero 1 --total-batch 512
case_run fp16pp   2 "$CPU16F" fp16 -- --pp 2 --zero 1 --total-batch 512
case_run fp8dly   4 $F32 -- --fp8 delayed --tp 2 --pp 2 --total-batch 256
case_run fp8cur   2 $F32 -- --fp8 current --tp 2 --sequence-parallel 1
case_run fp8blk   2 $F32 -- --fp8 block --pp 2 --total-batch 512
case_run fp8mx    2 $F32 -- --fp8 mx --cp 2 --recompute full
case_run emu_tp   2 "$EMU16" bf16 -- --tp 2 --sequence-parallel 1 --zero 1
case_run emu_pp   2 "$EMU16" bf16 -- --pp 2 --schedule zb-h1 --total-batch 512 --recompute selective

# the step-time model against measured CPU steps (reported, not bounded): one process, the planner's CPU preset with
# the peak the trainer measured at start-up (its sgemm, llm/train/mfu.h) at efficiency 1, against the mean of the
# steps after the first; two sizes
for spec in "d4,C=128,NH=4,maxT=64,V=257 8 64" "d4,C=256,NH=4,maxT=128,V=257 8 128"; do
    set -- $spec
    timeout 120 "$CPU" --model "$1" -b "$2" -t "$3" "${common[@]}" --steps 4 --output-dir "$tmp/time" > "$LOG/time.log" 2>&1 ||
        { bad "step time run $1: see $LOG/time.log"; continue; }
    peak=$(grep -o 'peak [0-9.]* TFLOP/s' "$LOG/time.log" | head -1 | awk '{print $2}')
    ms=$(grep -E '^step +[2-9]/' "$LOG/time.log" | grep -oE '\| [0-9.]+ ms \|' | awk '{s += $2; n++} END {if (n) printf "%.2f", s / n}')
    pl=$(python3 scripts/plan.py --json --build cpu --cluster cpu --bf16-tflops "$peak" --efficiency 1 --model "$1" -b "$2" -t "$3" \
         -np 1 --precision fp32 | python3 -c 'import json,sys; print("%.2f" % (1e3 * json.load(sys.stdin)["step_s"]))')
    echo "note step time, one process, $1 B=$2 T=$3 (sgemm peak $peak TFLOP/s at 100%): planned $pl ms, measured $ms ms" \
         "($(python3 -c "print('%+.0f%%' % (100 * ($pl - $ms) / $ms))" 2>/dev/null))"
done

# bad input: one line naming the flag, non-zero exit
out=$(python3 scripts/plan.py --model d4,C=30,NH=4 2>&1); rc=$?
if [ $rc -ne 0 ] && [ "$(printf '%s\n' "$out" | grep -c .)" -eq 1 ] && [[ "$out" == "error: --model"* ]]; then ok "bad --model: one line: $out"
else bad "bad --model: exit $rc: $out"; fi
out=$(python3 scripts/plan.py --model d4 -np 3 --tp 2 2>&1); rc=$?
if [ $rc -ne 0 ] && [[ "$out" == "error: -np 3"* ]]; then ok "bad layout: one line: $out"; else bad "bad layout: exit $rc: $out"; fi
out=$(python3 scripts/plan.py --model d4 --experts 4 -np 2 --ep 4 2>&1); rc=$?
if [ $rc -ne 0 ] && [ "$(printf '%s\n' "$out" | grep -c .)" -eq 1 ] && [[ "$out" == "error: --ep 4"* ]]; then ok "bad --ep: one line: $out"
else bad "bad --ep: exit $rc: $out"; fi
out=$(python3 scripts/plan.py --model d4 --experts 4 -np 2 --fp8 delayed 2>&1); rc=$?  # (what it does not model: said)
if [ $rc -ne 0 ] && [ "$(printf '%s\n' "$out" | grep -c .)" -eq 1 ] && [[ "$out" == "error: --fp8 delayed with --experts 4: not modelled"* ]]; then
    ok "--fp8 with experts refused as not modelled: $out"
else bad "--fp8 with experts: exit $rc: $out"; fi
# --search answers with ranked layouts that fit and the rejected best with a reason
out=$(python3 scripts/plan.py --search --model d32,C=4096,NH=32,maxT=4096,V=32000 -t 4096 --total-batch 65536 -np 2 --cluster h100 --top 3 2>&1)
if printf '%s\n' "$out" | grep -q '^  fits ' && printf '%s\n' "$out" | grep -q '^  no .*needs'; then ok "--search 7B on 2 H100: ranked fits and rejected layouts"
else bad "--search: $out"; fi

echo "test_plan: $pass passed, $fail failed"
[ $fail -eq 0 ]
