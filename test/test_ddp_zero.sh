#!/usr/bin/env bash
# test_ddp_zero.sh: data parallelism (llm/parallel/ddp.h) and ZeRO-1/2/3 (llm/parallel/zero.h) under mpirun, rung 4
# and 5 of the verification ladder (docs/architecture.md): every layout against one process, and the program's
# own accounting against the ZeRO paper (Rajbhandari et al. 2019, Table 1 and sec. 7).
#
#   bash test/test_ddp_zero.sh          (needs ./train_gpt_cpu; build/train_gpt_emu for the emulated run)
#
# Checked, one line each:
#  1. For 2 and 4 processes, each --zero 0 (DDP), 1, 2, 3, with one micro-step and with gradient
#     accumulation (2 micro-steps per rank): from the same seed checkpoint and data as one process
#     on the same global batch, the train and val losses and grad norms of 4 steps, and every
#     parameter of the final model, match the one-process run. The 4-process runs clip the gradient
#     (--grad-clip 0.5 < the norms, ~2), so the global norm over shards is checked through the update.
#  2. At 2 processes ZeRO-1, ZeRO-2 (and ZeRO-3) against DDP: the final model and state files are the
#     same bytes. They hold because with 2 ranks every element of the averaged gradient is one float
#     addition a+b (then * 1/2, exact), the same in an all-reduce and a reduce-scatter, and everything
#     after it is elementwise. The 2-process runs use --grad-clip 0: the norm of ZeRO-1/2/3 sums the
#     shards' squares in another order than DDP's one sum, so its last bit may differ, and an active
#     clip would scale the update by that.
#  3. Memory per rank of parameters + gradients + optimizer state (--report-json) against the paper:
#     formula <= measured <= formula + (p + g + K) * padding (16 bytes per parameter in FP32).
#  4b. The order of each rank's data-parallel operations in the last step (the trace of llm/parallel/ddp.h):
#     each unit's reduction starts before the next unit's backward begins (overlap), only in the last
#     micro-step; ZeRO-3 gathers each unit once per pass, the next one before the current one runs;
#     ZeRO-1/2 gather the updated units after the backward.
#  4. Bytes per step in the comm ledger: DDP = one gradient all-reduce, 2 (N-1)/N * 4 Psi sent;
#     ZeRO-1 and ZeRO-2 = reduce-scatter + all-gather (= DDP's volume, sec. 7.2.1);
#     ZeRO-3 = all-gather (forward) + all-gather (backward) + reduce-scatter = 1.5 x DDP.
#  4c. The tagged allocator's peaks (llm/core/context.h, *_peak_bytes in the report): every kind's peak >= its
#     bytes live at the end; parameters, gradients, optimizer states and activations, allocated once and
#     held, peak = live (test/ddp_zero_check.py peaks).
#  5. Resuming across layouts: a 2-process ZeRO-2 run from a 1-process state, a 1-process run from a
#     2-process ZeRO-2 state, a 4-process ZeRO-3 run from a 2-process ZeRO-1 state (each against the
#     uninterrupted run of the other layout), and DDP from a ZeRO-2 state at 2 processes (same bytes).
#  6. The emulated CUDA build (FP32) at 2 processes, ZeRO-3, against the CPU build's 2-process run
#     (its collectives run comm.h's NCCL code against dev/emu/nccl_emu.h; one emulated device per
#     process: EMU_DEVICES=2).
#  6b. Activation recompute (selective, full) under DDP and ZeRO-3, CPU and emulated: the same bytes.
#  6c. The BF16 emulated build: 2-process DDP vs 1 process (BF16 bounds), ZeRO-1/2/3 vs DDP and a
#      cross-layout resume (the same bytes).
#  7. A rank that exits at step 2 (--inject die@step=2,rank=1) ends the job non-zero well within 60 s.
#  8. Bad layouts (world 4 with --dp 3, --zero 5, --total-batch not a multiple of B*T*dp, --pp 4 over 2 layers):
#     one line, non-zero exit, no output directory.
#
# Tolerances (FP32). A layout sums each gradient in another order than one process: each rank sums
# its own tokens, then the ranks' sums are averaged, where one process sums all tokens in sequence.
# So each gradient element differs by a few float roundings of its largest terms, ~1e-7 relative.
# The losses (also summed over ranks in another order) then differ by ~1e-7 relative: the bound is
# 1e-6 relative per step, 4e-6 for 4 steps (observed <= 2e-7). AdamW moves each parameter by at most
# ~lr per step and divides by sqrt(v), so a gradient error of relative size r changes a step by
# ~lr * r; with lr = 1e-3 the parameters after 4 steps are bound by 1e-5 absolute (1% of one step;
# observed <= 4e-7). The emulated CUDA build sums in yet other orders (its kernels), with the bounds of
# test/test_emu_vs_cpu.sh: 1e-5. Logs of each run: build/ddp_zero/.
# Ends with "test_ddp_zero: N passed, M failed"; exit status 1 on any failure.
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
CPU=${CPU:-./train_gpt_cpu}
EMU=${EMU:-./build/train_gpt_emu}
CHECK="python3 test/ddp_zero_check.py"
LOG=build/ddp_zero
rm -rf "$LOG"; mkdir -p "$LOG"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

source test/mpi_lib.sh  # MPIRUN, ok, bad, check, badlayout
echo "mpirun flags: ${MPIRUN[*]:1}"

python3 dev/data/addition.py --train 3000 --val 200 --test 20 --out "$tmp/data" > /dev/null
D="$tmp/data"
# C = 24: units of 7224 (layer), 10752 (embed) and 48 (final) values, so the 2- and 4-rank blocks need
# padding (to multiples of 16 and 32 values)
common=(--train-data "$D/addition_train.bin" --val-data "$D/addition_val.bin" --tokenizer "$D/addition_tokenizer.bin"
        -b 4 -t 32 --steps 4 --lr 1e-3 --warmup 1 --lr-final 0.1 --weight-decay 0.1
        --val-every 2 --val-steps 1 --sample-every 2 --sample-len 4 --checkpoint-every 2)

# train NAME NP ARGS...: a run into $tmp/NAME (NP 0: one process without mpirun); log in $LOG/NAME.log
train() {
    local name=$1 np=$2; shift 2
    local cmd=("$CPU")
    [ "$np" -gt 0 ] && cmd=("${MPIRUN[@]}" -np "$np" "$CPU")
    timeout 120 "${cmd[@]}" "${common[@]}" --output-dir "$tmp/$name" --report-json "$tmp/$name.json" "$@" > "$LOG/$name.log" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || bad "$name: exit $rc (see $LOG/$name.log): $(tail -2 "$LOG/$name.log" | tr '\n' ' ')"
    return $rc
}

# the seed checkpoint: a fresh model saved after a step at learning rate 0
timeout 60 "$CPU" --model d2,C=24,NH=4,maxT=64,V=257 "${common[@]}" --steps 1 --lr 0 --checkpoint-every 1 \
    --val-every 0 --sample-every 0 --output-dir "$tmp/seed" > "$LOG/seed.log" 2>&1 || bad "seed checkpoint: see $LOG/seed.log"
common+=(--model "$tmp/seed/model_00000001.bin")

# one process on each global batch: 256 and 512 tokens without clipping (the 2-process runs),
# 512 and 1024 with clipping (the 4-process runs)
train one_256 0 --total-batch 256 --grad-clip 0
train one_512 0 --total-batch 512 --grad-clip 0
train one_512c 0 --total-batch 512 --grad-clip 0.5
train one_1024c 0 --total-batch 1024 --grad-clip 0.5

# zero_case NAME NP ACCUM Z: one layout's run and its checks against one process. The 16 layouts run two at a time
# (case_bg, test/mpi_lib.sh): each is a short job whose start-up (mpirun, MPI_Init, the files) leaves a core idle much
# of the time, and nothing here is timed; their lines print in order once all have ended
zero_case() {
    local name=$1 np=$2 accum=$3 z=$4 tb clip=0 ref
    tb=$((128 * np * accum)); ref=one_$tb
    [ "$np" -eq 4 ] && { clip=0.5; ref=one_${tb}c; }
    train "$name" "$np" --total-batch "$tb" --grad-clip "$clip" --zero "$z" || return
    check compare "$name vs 1 process" "$tmp/$name" "$tmp/$ref" 4e-6 1e-5
    check memory "$name memory" "$tmp/$name.json"
    check ledger "$name ledger" "$tmp/$name.json"
    check peaks "$name allocator peaks" "$tmp/$name.json"
    check order "$name order of operations" "$tmp/$name.json"
}
for np in 2 4; do
    for accum in 1 2; do
        for z in 0 1 2 3; do CASE_JOBS=2 case_bg zero_case "np${np}_z${z}_acc${accum}" "$np" "$accum" "$z"; done
    done
done
cases_wait
for accum in 1 2; do
    for z in 1 2 3; do
        check same "np2 ZeRO-$z vs DDP, $accum micro-step(s)" "$tmp/np2_z${z}_acc${accum}" "$tmp/np2_z0_acc${accum}"
    done
done
check ratio "ledger ZeRO-3 / DDP at 4 processes" "$tmp/np4_z3_acc1.json" "$tmp/np4_z0_acc1.json"

# activation recompute (llm/model/block.h) changes no bit: DDP and ZeRO-3 at 2 processes with gradient
# accumulation, selective and full, against the same runs without recompute
for z in 0 3; do
    for r in selective full; do
        train "np2_z${z}_acc2_${r}" 2 --total-batch 512 --grad-clip 0 --zero "$z" --recompute "$r" &&
            check same "np2 ZeRO-$z --recompute $r vs none, 2 micro-steps" "$tmp/np2_z${z}_acc2_${r}" "$tmp/np2_z${z}_acc2"
    done
done

# resuming across layouts (state files are layout-independent)
train res_1to2z2 2 --total-batch 256 --grad-clip 0 --zero 2 --resume "$tmp/one_256/state_00000002.bin" &&
    check compare "resume: 2-process ZeRO-2 from a 1-process state vs 1 process" "$tmp/res_1to2z2" "$tmp/one_256" 4e-6 1e-5
train res_2z2to1 0 --total-batch 256 --grad-clip 0 --resume "$tmp/np2_z2_acc1/state_00000002.bin" &&
    check compare "resume: 1 process from a 2-process ZeRO-2 state vs 2-process ZeRO-2" "$tmp/res_2z2to1" "$tmp/np2_z2_acc1" 4e-6 1e-5
train res_2z1to4z3 4 --total-batch 512 --grad-clip 0 --zero 3 --resume "$tmp/np2_z1_acc2/state_00000002.bin" &&
    check compare "resume: 4-process ZeRO-3 from a 2-process ZeRO-1 state vs 1 process" "$tmp/res_2z1to4z3" "$tmp/one_512" 4e-6 1e-5
train res_2z2to2z0 2 --total-batch 256 --grad-clip 0 --zero 0 --resume "$tmp/np2_z2_acc1/state_00000002.bin" &&
    check same "resume: 2-process DDP from a 2-process ZeRO-2 state vs ZeRO-2" "$tmp/res_2z2to2z0" "$tmp/np2_z2_acc1"

# the emulated CUDA build (FP32), 2 processes, ZeRO-3: the same run as np2_z3_acc2
if [ -x "$EMU" ]; then
    EMU_DEVICES=2 timeout 300 "${MPIRUN[@]}" -x EMU_DEVICES -np 2 "$EMU" "${common[@]}" --total-batch 512 --grad-clip 0 --zero 3 \
        --output-dir "$tmp/emu_np2_z3" > "$LOG/emu_np2_z3.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then
        check compare "emulated CUDA (FP32) 2-process ZeRO-3 vs CPU 2-process ZeRO-3" "$tmp/emu_np2_z3" "$tmp/np2_z3_acc2" 1e-5 1e-5
    else
        bad "emulated CUDA 2-process run: exit $rc (see $LOG/emu_np2_z3.log)"
    fi
    # and with full activation recompute: the same bytes (the kernels rerun on the same inputs)
    EMU_DEVICES=2 timeout 300 "${MPIRUN[@]}" -x EMU_DEVICES -np 2 "$EMU" "${common[@]}" --total-batch 512 --grad-clip 0 --zero 3 --recompute full \
        --output-dir "$tmp/emu_np2_z3_full" > "$LOG/emu_np2_z3_full.log" 2>&1 &&
        check same "emulated CUDA (FP32) 2-process ZeRO-3 --recompute full vs none" "$tmp/emu_np2_z3_full" "$tmp/emu_np2_z3" ||
        bad "emulated CUDA 2-process --recompute full run (see $LOG/emu_np2_z3_full.log)"
else
    echo "skip emulated CUDA 2-process run: $EMU not built (make build/train_gpt_emu)"; skipped=$((skipped+1))
fi

# The BF16 emulated build: master weights, stochastic rounding, BF16 reductions (NCCL's, emulated).
# One process against 2-process DDP, within BF16 bounds (ddp_zero_check.py update); ZeRO-1/2/3
# against DDP, the same bytes (with 2 ranks every reduced element is one bf16 addition, as in DDP, and
# the rounding bits of an element follow the element, not where the ranks' blocks cut its tensor);
# and a ZeRO-3 run resumed from DDP's state of step 2, the same bytes as DDP uninterrupted (the state
# keeps the BF16 parameters besides the FP32 master).
EMU16=${EMU16:-./build/train_gpt_emu_bf16}
emu16() {  # emu16 NAME NP ARGS...: a BF16 emulated run into $tmp/NAME (NP 0: one process)
    local name=$1 np=$2; shift 2
    local cmd=("$EMU16")
    [ "$np" -gt 0 ] && cmd=(env EMU_DEVICES=2 "${MPIRUN[@]}" -x EMU_DEVICES -np "$np" "$EMU16")
    timeout 300 "${cmd[@]}" "${common[@]}" --total-batch 512 --grad-clip 0 --output-dir "$tmp/$name" "$@" > "$LOG/$name.log" 2>&1 ||
        { bad "$name: exit $? (see $LOG/$name.log)"; return 1; }
}
if [ -x "$EMU16" ]; then
    emu16 bf16_one 0 && emu16 bf16_np2_z0 2 --zero 0 &&
        check update "BF16 emulated: 2-process DDP vs 1 process" "$tmp/bf16_np2_z0" "$tmp/bf16_one" "$tmp/seed/model_00000001.bin" 2e-3 0.08
    for z in 1 2 3; do
        emu16 "bf16_np2_z$z" 2 --zero "$z" &&
            check same "BF16 emulated: 2-process ZeRO-$z vs DDP" "$tmp/bf16_np2_z$z" "$tmp/bf16_np2_z0"
    done
    emu16 bf16_res_z0to3 2 --zero 3 --resume "$tmp/bf16_np2_z0/state_00000002.bin" &&
        check same "BF16 emulated: 2-process ZeRO-3 resumed from DDP's state of step 2 vs DDP" "$tmp/bf16_res_z0to3" "$tmp/bf16_np2_z0"
else
    echo "skip BF16 emulated runs: $EMU16 not built (make build/train_gpt_emu_bf16)"; skipped=$((skipped+1))
fi

# The CPU build in BF16 (llm/core/half_cpu.h; make build/train_gpt_cpu_bf16): BF16 parameters and gradients,
# FP32 master weights and moments, BF16 gradient averages over MPI (the user ops of llm/comm/comm_mpi16.h). The
# memory the tagged allocator counted against ZeRO's Table 1 with 2 + 2 + 12 bytes per parameter
# (16 under DDP, 2 + 2 + 12/2 = 10 under ZeRO-1, 2 + 14/2 = 9 under ZeRO-2, 16/2 = 8 under ZeRO-3,
# within the padding); the activations per layer measured == the formula (llm/train/report.h, 2 bytes a
# value) and below the FP32 run's; and, as in the emulated BF16 build, ZeRO-1/2/3 give DDP's bytes.
CPU16=${CPU16:-./build/train_gpt_cpu_bf16}
if [ -x "$CPU16" ]; then
    for z in 0 1 2 3; do
        CPU="$CPU16" train "cpu16_np2_z$z" 2 --total-batch 256 --grad-clip 0 --zero "$z" || continue
        check memory "CPU BF16 np2 ZeRO-$z memory" "$tmp/cpu16_np2_z$z.json"
        [ "$z" -gt 0 ] && check same "CPU BF16: 2-process ZeRO-$z vs DDP" "$tmp/cpu16_np2_z$z" "$tmp/cpu16_np2_z0"
    done
    if [ -f "$tmp/cpu16_np2_z0.json" ] && [ -f "$tmp/np2_z0_acc1.json" ]; then
        if python3 - "$tmp/cpu16_np2_z0.json" "$tmp/np2_z0_acc1.json" <<'PY'
import json, sys
h, f = (json.load(open(p)) for p in sys.argv[1:3])
a16 = [rk["activations_per_layer_bytes"] for rk in h["ranks"]]
a32 = [rk["activations_per_layer_bytes"] for rk in f["ranks"]]
ok = h["bytes_per_value"] == 2 and h["optimizer_bytes_per_param"] == 12 and f["bytes_per_value"] == 4
ok = ok and all(a == h["paper_activations_per_layer_bytes"] for a in a16) and all(a < b for a, b in zip(a16, a32))
print(("ok   " if ok else "FAIL ") + "CPU BF16 activations per layer: %s B measured per rank, formula %d B (2 bytes a value); FP32 run: %s B; "
      "%d + %d + %d bytes per parameter (params, grads, optimizer)" % (a16, h["paper_activations_per_layer_bytes"], a32,
      h["bytes_per_value"], h["bytes_per_value"], h["optimizer_bytes_per_param"]))
sys.exit(0 if ok else 1)
PY
        then pass=$((pass+1)); else fail=$((fail+1)); fi
    fi
else
    echo "skip CPU BF16 runs: $CPU16 not built (make build/train_gpt_cpu_bf16)"; skipped=$((skipped+1))
fi

# a rank dies at step 2: mpirun must end the job, non-zero, well within the timeout
t0=$(date +%s.%N)
timeout 60 "${MPIRUN[@]}" -np 2 "$CPU" "${common[@]}" --zero 3 --inject die@step=2,rank=1 --output-dir "$tmp/die" > "$LOG/die.log" 2>&1
rc=$?
dt=$(printf '%.1f' "$(echo "$(date +%s.%N) - $t0" | bc)")
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "rank 1 dies at step 2" "$LOG/die.log"; then
    ok "rank 1 exits at step 2: mpirun exited $rc after $dt s"
else
    bad "rank 1 exits at step 2: mpirun exited $rc after $dt s (124 = hung until the 60 s timeout)"
fi

# bad layouts: one line (from rank 0), non-zero exit, nothing written (badlayout: test/mpi_lib.sh)
badlayout world4_dp3 4 "--dp 3" --dp 3
badlayout zero5 4 "--zero" --zero 5
badlayout batch 4 "--total-batch" --total-batch 384
badlayout pp4_layers 4 "--pp 4" --pp 4

echo "test_ddp_zero: $pass passed, $fail failed, $skipped skipped"
[ "$fail" -eq 0 ]
