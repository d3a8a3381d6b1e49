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
# run with a time limit, so one hung program cannot spend the loan: limit_s command...
limited() { local s=$1; shift; timeout --signal=KILL "$s" "$@"; local rc=$?; [ $rc -eq 137 ] && echo "(killed after ${s} s)"; return $rc; }

echo "== build (sm_${ARCH} only, -j${JOBS})"
GENCODE="-gencode arch=compute_${ARCH},code=sm_${ARCH}"
make -j"$JOBS" NVCC_GENCODE="$GENCODE" train_gpt build/test_kernels_gpu build/test_fp8_gemm_gpu build/test_fp8_linear_gpu \
    build/bench_gpu > "$LOG/build.log" 2>&1 || { tail -30 "$LOG/build.log"; exit 1; }
while read -r note; do echo "$note"; row "build" "$note"; done < <(grep '^note:' "$LOG/build.log")
# the kernel benchmarks (dev/cuda/cuda.mk), rebuilt every time; -k: one that fails leaves the others
for f in dev/cuda/*.cu; do rm -f "build/cuda/$(basename "$f" .cu)"; done
make -k -j"$JOBS" dev-cuda CUDA_ARCH="sm_${ARCH}" > "$LOG/build_cuda.log" 2>&1
for f in dev/cuda/*.cu; do
    n=$(basename "$f" .cu)
    [ -x "build/cuda/$n" ] || row "build dev/cuda/$n" "FAILED (see $LOG/build_cuda.log)"
done
phase build

echo "== kernel harness (test/test_kernels.cu on the GPU)"
limited 120 ./build/test_kernels_gpu > "$LOG/test_kernels.log" 2>&1
grep -E "^FAIL" "$LOG/test_kernels.log" | head -20
row "test_kernels (GPU)" "$(tail -1 "$LOG/test_kernels.log")"
echo "== FP8 GEMM and linear layer (test/test_fp8_gemm.cu, test/test_fp8_linear.cu on the GPU)"
limited 60 ./build/test_fp8_gemm_gpu > "$LOG/test_fp8_gemm.log" 2>&1
grep -E "describe|^FAIL" "$LOG/test_fp8_gemm.log" | head -20
row "test_fp8_gemm (GPU)" "$(tail -1 "$LOG/test_fp8_gemm.log")"
limited 60 ./build/test_fp8_linear_gpu > "$LOG/test_fp8_linear.log" 2>&1
grep -E "^FAIL" "$LOG/test_fp8_linear.log" | head -20
row "test_fp8_linear (GPU)" "$(tail -1 "$LOG/test_fp8_linear.log")"
phase "GPU tests"

echo "== kernel benchmarks (dev/cuda)"
for f in dev/cuda/*.cu; do
    n=$(basename "$f" .cu)
    b="build/cuda/$n"
    [ -x "$b" ] || continue
    limited 90 "$b" > "$LOG/bench_$n.log" 2>&1
    grep -E "^(version|kernel|best|median|peak|fused)" "$LOG/bench_$n.log" | head -12 | while read -r line; do echo "  $n: $line"; done
    row "dev/cuda/$n" "$(grep -cE 'FAIL' "$LOG/bench_$n.log") failed checks, see $LOG/bench_$n.log"
done
# the FP8 GEMM's table: each recipe's path, TFLOP/s and speed-up over BF16 at GPT-2 124M's shapes
[ -f "$LOG/bench_matmul_fp8.log" ] && grep -E "^(layer|qkv|attproj|fc|fcproj) " "$LOG/bench_matmul_fp8.log"
# fused vs unfused attention: GPT-2 124M's shape (hs 64) from the run above, and hs 128
if [ -x build/cuda/attention ]; then
    limited 90 ./build/cuda/attention 8 1024 1536 12 > "$LOG/bench_attention_hs128.log" 2>&1
    for f in bench_attention bench_attention_hs128; do
        line=$(grep '^fused vs unfused' "$LOG/$f.log")
        echo "  $line"
        row "attention ${line%%:*}" "${line#*: }"
    done
fi
PEAK=${PEAK_TFLOPS:-$(grep -oE 'peak [0-9.]+ TFLOP/s' "$LOG/bench_matmul.log" 2>/dev/null | grep -oE '[0-9.]+' | head -1)}
PEAK=${PEAK:-0}
row "bf16 GEMM peak used for MFU" "${PEAK} TFLOP/s"
phase "kernel benchmarks"

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
row "ours GPT-2 124M B=$B T=1024" "${ours:-FAILED (see $LOG/bench_gpt2.log)}"
phase "GPT-2 124M ours"

echo "== GPT-2 124M training, PyTorch (dev/bench_pytorch.py) at the same B, T"
if python3 -c "import torch; assert torch.cuda.is_available()" 2> /dev/null; then
    PB=$B  # PyTorch's activations may not fit where ours do: exit status 3 is its "out of memory"
    while [ $PB -ge 8 ]; do
        limited 240 python3 dev/bench_pytorch.py --model d12 -B $PB -T 1024 --steps 20 --peak-tflops "$PEAK" \
            > "$LOG/bench_pytorch.log" 2>&1
        [ $? -eq 3 ] || break
        PB=$((PB / 2))
    done
    theirs=$(grep -E '^pytorch .*: tokens/s ' "$LOG/bench_pytorch.log" | tail -1)
    echo "  $theirs"
    theirs_tok=$(echo "$theirs" | grep -oE 'tokens/s [0-9.]+' | grep -oE '[0-9.]+')
    row "PyTorch GPT-2 124M B=$PB T=1024" "${theirs:-FAILED (see $LOG/bench_pytorch.log)}"
    if [ -n "${ours_tok:-}" ] && [ -n "${theirs_tok:-}" ]; then
        row "ours / PyTorch tokens/s" "$(python3 -c "print(f'{$ours_tok / $theirs_tok:.3f}')") (B=$B vs B=$PB)"
    fi
else
    row "PyTorch GPT-2 124M" "skipped: torch with CUDA is not importable here"
fi
phase "GPT-2 124M PyTorch"

echo "== activation recompute (--recompute none, selective, full): GPT-2 124M B=16 T=1024, step time ratios"
limited 120 ./build/bench_gpu d12 16 1024 10 "$PEAK" none,selective,full > "$LOG/bench_recompute.log" 2>&1
grep "step time /" "$LOG/bench_recompute.log"
while read -r line; do row "recompute $(echo "$line" | awk '{print $2}')" "$(echo "$line" | cut -d' ' -f3-)"; done \
    < <(grep "step time /" "$LOG/bench_recompute.log")
phase "recompute"
row "total" "$((SECONDS - T0)) s"

echo
echo "== summary ($(head -1 "$LOG/gpu.txt"))"
printf '%s\n' "${rows[@]}" | tee "$LOG/summary.txt"
