#!/usr/bin/env bash
# gpu_check.sh: everything a short loan of one NVIDIA GPU should tell us, in one command, in under
# 8 minutes on an H100 (build included): build the CUDA programs for this GPU's architecture only
# (parallel nvcc), run the kernel-vs-reference harness and the FP8 tests on the GPU, the kernel
# benchmarks of dev/cuda/ (fused vs unfused attention at GPT-2 124M's shape, hs 64, and at hs 128,
# with TFLOP/s), GPT-2 124M training at B=64 T=1024 (or the largest B that fits) for ours
# (dev/bench_train.cu) and for PyTorch (dev/bench_pytorch.py: BF16 autocast, flash SDPA, fused
# AdamW, torch.compile) in the same run, their tokens/s, MFU and ratio, and the activation-recompute
# step-time ratios; then one table. Logs go to build/gpu_check/; each phase's wall time is in the table.
# Needs the CUDA toolkit and driver, and PyTorch for the PyTorch row (without it the row says so);
# no MPI, no NCCL, no network: the programs are built single-process (the build's "note:" lines say so).
#   bash scripts/gpu_check.sh            (PRECISION=BF16; PEAK_TFLOPS=... to set the MFU denominator,
#                                         otherwise the measured dense bf16 GEMM peak of dev/cuda/matmul)
# GPU_CHECK_KERNELS="attention ..." runs only those of dev/cuda's benchmarks (and matmul, for the peak).
# GPU_CHECK_BUDGET_S (default 500): the whole check's time; a phase that would start past it is skipped
# and its row says so, and no program runs past it, so the table always prints. With OUT set (a folder),
# the table and the logs (gpu_check_logs.tar.gz) are copied there at the end, whatever happened.
# The phases, most telling first: build, the GPU tests, the real trainer end to end (`make train`'s
# addition run on the GPU: its loss and held-out accuracy against the CPU build's in README.md), ours
# vs PyTorch at GPT-2 124M, the kernel benchmarks, recompute.
set -u
cd "$(dirname "$0")/.."
LOG=build/gpu_check
mkdir -p "$LOG" build/cuda
T0=$SECONDS
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee "$LOG/gpu.txt"
ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
JOBS=$(nproc)
rows=()
row() { rows+=("$(printf '%-40s %s' "$1" "$2")"); }
phase_start=$SECONDS
phase() { row "  (phase time: $1)" "$((SECONDS - phase_start)) s"; phase_start=$SECONDS; }
BUDGET=${GPU_CHECK_BUDGET_S:-500}
left() { echo $((BUDGET - (SECONDS - T0))); }
# run with a time limit (never past the budget), so one hung program cannot spend the loan: limit_s command...
limited() {
    local s=$1; shift
    [ "$s" -gt "$(left)" ] && s=$(left)
    [ "$s" -lt 1 ] && { echo "(not run: the budget of ${BUDGET} s is spent)"; return 124; }
    timeout --signal=KILL "$s" "$@"; local rc=$?; [ $rc -eq 137 ] && echo "(killed after ${s} s)"; return $rc
}
# a phase runs only with at least need_s seconds of the budget left: time_for need_s name
time_for() { [ "$(left)" -ge "$1" ] && return 0; row "$2" "skipped: $(left) s of the ${BUDGET} s budget left"; return 1; }
# the table and the logs to $OUT (the device tool's folder), whatever happens
to_out() {
    [ -n "${OUT:-}" ] && [ -d "$OUT" ] || return 0
    printf '%s\n' "${rows[@]}" > "$OUT/summary.txt"
    tar -czf "$OUT/gpu_check_logs.tar.gz" -C build gpu_check 2> /dev/null
}
trap to_out EXIT

echo "== build (sm_${ARCH} only, -j${JOBS})"
GENCODE="-gencode arch=compute_${ARCH},code=sm_${ARCH}"
# the trainer and its GPU programs, and beside them the kernel benchmarks (dev/cuda/cuda.mk, rebuilt
# every time; -k: one that fails leaves the others)
for f in dev/cuda/*.cu; do rm -f "build/cuda/$(basename "$f" .cu)"; done
make -k -j"$JOBS" dev-cuda CUDA_ARCH="sm_${ARCH}" > "$LOG/build_cuda.log" 2>&1 &
cuda_make=$!
if ! make -j"$JOBS" NVCC_GENCODE="$GENCODE" train_gpt build/test_kernels_gpu build/test_fp8_gemm_gpu build/test_fp8_linear_gpu \
        build/bench_gpu > "$LOG/build.log" 2>&1; then
    tail -30 "$LOG/build.log"
    row "build" "FAILED after $((SECONDS - phase_start)) s: $(grep -m1 -E 'error' "$LOG/build.log")"
    wait $cuda_make
    exit 1
fi
while read -r note; do echo "$note"; row "build" "$note"; done < <(grep '^note:' "$LOG/build.log")
wait $cuda_make
for f in dev/cuda/*.cu; do
    n=$(basename "$f" .cu)
    [ -x "build/cuda/$n" ] || row "build dev/cuda/$n" "FAILED (see $LOG/build_cuda.log)"
done
phase build

# what ptxas gave each kernel of the trainer on this GPU (registers, shared and local memory): for docs/
if command -v cuobjdump > /dev/null; then
    cuobjdump --dump-resource-usage train_gpt > "$LOG/resource_usage.txt" 2>&1
    row "kernels of train_gpt using local memory" "$(grep -cE 'LOCAL:[1-9]' "$LOG/resource_usage.txt") of $(grep -c 'Function ' "$LOG/resource_usage.txt") (see $LOG/resource_usage.txt)"
fi

gpu_test() {  # name limit_s lines: runs build/<name>_gpu, shows its FAIL lines (and the lines matching the
             # pattern), one row with its count line
    limited "$2" "./build/$1_gpu" > "$LOG/$1.log" 2>&1
    grep -E "${3:-^FAIL}" "$LOG/$1.log" | head -20
    row "$1 (GPU)" "$(tail -1 "$LOG/$1.log")"
}
echo "== kernel harness (test/test_kernels.cu on the GPU)"
gpu_test test_kernels 120
echo "== FP8 GEMM and linear layer (test/test_fp8_gemm.cu, test/test_fp8_linear.cu on the GPU)"
gpu_test test_fp8_gemm 60 "describe|^FAIL"
gpu_test test_fp8_linear 60
phase "GPU tests"

# the real trainer, end to end: `make train`'s run (the same flags, `make -s train-args`) on the GPU, with
# its seed and two more (a run's val loss can drop late, when the model learns the carries, and how
# late moves with the seed). The CPU build ends the default seed's run at val loss 0.80 and 100%
# held-out exact-match accuracy (README.md)
train_e2e() {  # tag seed: one run, one row
    limited 60 ./train_gpt $(make -s --no-print-directory train-args TRAIN_DATA="$LOG/addition" TRAIN_OUT="$LOG/addition_out_$1_$2") \
        --seed "$2" > "$LOG/train_addition_$1_$2.log" 2>&1
    local rc=$? f="$LOG/train_addition_$1_$2.log"
    grep -E "^(model|held-out|done)" "$f"
    local acc val per
    acc=$(grep -oE 'held-out exact-match accuracy: [0-9.]+%' "$f" | grep -oE '[0-9.]+%')
    val=$(grep -oE 'val loss [0-9.]+ \(step 1000\)' "$f" | grep -oE '[0-9]+\.[0-9]+')
    per=$(grep -oE '[0-9.]+ ms per step' "$f")
    row "trainer $1: make train's run, seed $2" "exit $rc | val loss ${val:-?} | held-out accuracy ${acc:-?} | ${per:-?}"
}
if time_for 30 "trainer end to end (make train's run)"; then
    echo "== the trainer end to end: make train's addition run on the GPU"
    python3 dev/data/addition.py --digits 3 --out "$LOG/addition" > "$LOG/addition_data.log" 2>&1
    for seed in 1337 1 2; do train_e2e BF16 $seed; done
    phase "trainer end to end"
fi

# the dense bf16 GEMM peak, the MFU's denominator
echo "== dev/cuda/matmul (the bf16 GEMM peak)"
[ -x build/cuda/matmul ] && limited 90 ./build/cuda/matmul > "$LOG/bench_matmul.log" 2>&1
grep -E "^(version|kernel|best|median|peak)" "$LOG/bench_matmul.log" 2> /dev/null | head -12
PEAK=${PEAK_TFLOPS:-$(grep -oE 'peak [0-9.]+ TFLOP/s' "$LOG/bench_matmul.log" 2>/dev/null | grep -oE '[0-9.]+' | head -1)}
PEAK=${PEAK:-0}
row "bf16 GEMM peak used for MFU" "${PEAK} TFLOP/s"

if time_for 60 "ours GPT-2 124M"; then
    echo "== GPT-2 124M training, ours: B=64 T=1024 (halved until it fits), $(grep -o 'PRECISION ?= [A-Z0-9]*' Makefile)"
    B=64
    while [ $B -ge 8 ]; do
        limited 150 ./build/bench_gpu d12 $B 1024 20 "$PEAK" > "$LOG/bench_gpt2.log" 2>&1 && break
        grep -qiE "out of memory|cudaErrorMemoryAllocation" "$LOG/bench_gpt2.log" || break
        B=$((B / 2))
    done
    ours=$(grep '^recompute none *median' "$LOG/bench_gpt2.log")
    echo "  $ours"
    ours_tok=$(echo "$ours" | grep -oE '[0-9]+ tok/s' | grep -oE '[0-9]+')
    row "ours GPT-2 124M B=$B T=1024" "${ours:-FAILED (see $LOG/bench_gpt2.log: $(tail -1 "$LOG/bench_gpt2.log"))}"
    phase "GPT-2 124M ours"
fi

if time_for 90 "PyTorch GPT-2 124M"; then
    echo "== GPT-2 124M training, PyTorch (dev/bench_pytorch.py) at the same B, T"
    if python3 -c "import torch; assert torch.cuda.is_available()" 2> /dev/null; then
        PB=${B:-64}  # PyTorch's activations may not fit where ours do: exit status 3 is its "out of memory"
        while [ $PB -ge 8 ]; do
            limited 240 python3 dev/bench_pytorch.py --model d12 -B $PB -T 1024 --steps 20 --peak-tflops "$PEAK" \
                > "$LOG/bench_pytorch.log" 2>&1
            [ $? -eq 3 ] || break
            PB=$((PB / 2))
        done
        theirs=$(grep -E '^pytorch .*: tokens/s ' "$LOG/bench_pytorch.log" | tail -1)
        echo "  $theirs"
        theirs_tok=$(echo "$theirs" | grep -oE 'tokens/s [0-9.]+' | grep -oE '[0-9.]+')
        row "PyTorch GPT-2 124M B=$PB T=1024" "${theirs:-FAILED (see $LOG/bench_pytorch.log: $(tail -1 "$LOG/bench_pytorch.log"))}"
        if [ -n "${ours_tok:-}" ] && [ -n "${theirs_tok:-}" ]; then
            row "ours / PyTorch tokens/s" "$(python3 -c "print(f'{$ours_tok / $theirs_tok:.3f}')") (B=$B vs B=$PB)"
        fi
    else
        row "PyTorch GPT-2 124M" "skipped: torch with CUDA is not importable here"
    fi
    phase "GPT-2 124M PyTorch"
fi

echo "== kernel benchmarks (dev/cuda)"
for f in dev/cuda/*.cu; do
    n=$(basename "$f" .cu)
    b="build/cuda/$n"
    [ -x "$b" ] || continue
    [ -z "${GPU_CHECK_KERNELS:-}" ] || [[ " $GPU_CHECK_KERNELS matmul " == *" $n "* ]] || continue
    [ "$n" = matmul ] || { time_for 20 "dev/cuda/$n" || continue; limited 60 "$b" > "$LOG/bench_$n.log" 2>&1; }
    grep -E "^(version|kernel|best|median|peak|fused)" "$LOG/bench_$n.log" | head -12 | while read -r line; do echo "  $n: $line"; done
    row "dev/cuda/$n" "$(grep -cE 'FAIL' "$LOG/bench_$n.log") failed checks, see $LOG/bench_$n.log"
done
# the FP8 GEMM's table: each recipe's path, TFLOP/s and speed-up over BF16 at GPT-2 124M's shapes
[ -f "$LOG/bench_matmul_fp8.log" ] && grep -E "^(layer|qkv|attproj|fc|fcproj) " "$LOG/bench_matmul_fp8.log"
# fused vs unfused attention: GPT-2 124M's shape (hs 64) from the run above, and hs 128
if [ -x build/cuda/attention ] && time_for 20 "attention hs 128"; then
    limited 60 ./build/cuda/attention 8 1024 1536 12 > "$LOG/bench_attention_hs128.log" 2>&1
    for f in bench_attention bench_attention_hs128; do
        line=$(grep '^fused vs unfused' "$LOG/$f.log")
        echo "  $line"
        row "attention ${line%%:*}" "${line#*: }"
    done
fi
phase "kernel benchmarks"

if time_for 30 "recompute"; then
    echo "== activation recompute (--recompute none, selective, full): GPT-2 124M B=16 T=1024, step time ratios"
    limited 120 ./build/bench_gpu d12 16 1024 10 "$PEAK" none,selective,full > "$LOG/bench_recompute.log" 2>&1
    grep "step time /" "$LOG/bench_recompute.log"
    while read -r line; do row "recompute $(echo "$line" | awk '{print $2}')" "$(echo "$line" | cut -d' ' -f3-)"; done \
        < <(grep "step time /" "$LOG/bench_recompute.log")
    phase "recompute"
fi
# the kernel harness again under compute-sanitizer's racecheck: the shared-memory hazards of the real
# hardware's ordering, beside the emulator's racecheck (dev/emu/emu_racecheck.h)
if command -v compute-sanitizer > /dev/null && time_for 60 "racecheck (compute-sanitizer)"; then
    echo "== test_kernels under compute-sanitizer --tool racecheck"
    limited 120 compute-sanitizer --tool racecheck --racecheck-report hazard ./build/test_kernels_gpu > "$LOG/racecheck.log" 2>&1
    rc=$?
    row "test_kernels under racecheck" "exit $rc | $(grep -E '^test_kernels:' "$LOG/racecheck.log" | tail -1) | $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$LOG/racecheck.log" | tail -1)"
    phase "racecheck"
fi

# the same runs in the FP32 build (rebuilt last: it replaces train_gpt), beside the BF16 rows above
if time_for 60 "trainer FP32 end to end"; then
    echo "== the trainer end to end in FP32"
    if make -j"$JOBS" NVCC_GENCODE="$GENCODE" PRECISION=FP32 train_gpt > "$LOG/build_fp32.log" 2>&1; then
        for seed in 1337 1 2; do train_e2e FP32 $seed; done
    else
        row "trainer FP32" "build FAILED (see $LOG/build_fp32.log)"
    fi
    phase "trainer FP32 end to end"
fi
row "total" "$((SECONDS - T0)) s"

echo
echo "== summary ($(head -1 "$LOG/gpu.txt"))"
printf '%s\n' "${rows[@]}" | tee "$LOG/summary.txt"
