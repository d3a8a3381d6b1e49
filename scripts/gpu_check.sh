#!/usr/bin/env bash
# gpu_check.sh: on a machine with an NVIDIA GPU, build the CUDA programs, run the kernel-vs-reference
# harness, the kernel benchmarks of dev/cuda/, a GPT-2 124M training benchmark (tokens/s, MFU) and the
# activation-recompute benchmark (step time of --recompute none/selective/full as ratios),
# then print one table. Logs go to build/gpu_check/. Needs the CUDA toolkit and driver only: without
# MPI or NCCL the programs are built single-process (the build's "note:" lines say so; see Makefile).
#   bash scripts/gpu_check.sh            (PRECISION=BF16; PEAK_TFLOPS=... to set the MFU denominator,
#                                         otherwise the measured dense bf16 GEMM peak of dev/cuda/matmul)
set -u
cd "$(dirname "$0")/.."
LOG=build/gpu_check
mkdir -p "$LOG" build/cuda
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee "$LOG/gpu.txt"
ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
rows=()
row() { rows+=("$(printf '%-34s %s' "$1" "$2")"); }

echo "== build (sm_${ARCH})"
make -j"$(nproc)" train_gpt build/test_kernels_gpu build/test_fp8_gemm_gpu build/test_fp8_linear_gpu build/bench_gpu > "$LOG/build.log" 2>&1 || { tail -30 "$LOG/build.log"; exit 1; }
while read -r note; do echo "$note"; row "build" "$note"; done < <(grep '^note:' "$LOG/build.log")
# the kernel benchmarks (dev/cuda/cuda.mk), rebuilt every time; -k: one that fails leaves the others
for f in dev/cuda/*.cu; do rm -f "build/cuda/$(basename "$f" .cu)"; done
make -k -j"$(nproc)" dev-cuda CUDA_ARCH="sm_${ARCH}" > "$LOG/build_cuda.log" 2>&1
for f in dev/cuda/*.cu; do
    n=$(basename "$f" .cu)
    [ -x "build/cuda/$n" ] || row "build dev/cuda/$n" "FAILED (see $LOG/build_cuda.log)"
done

echo "== kernel harness (test/test_kernels.cu on the GPU)"
./build/test_kernels_gpu > "$LOG/test_kernels.log" 2>&1
row "test_kernels (GPU)" "$(tail -1 "$LOG/test_kernels.log")"

echo "== FP8 GEMM (test/test_fp8_gemm.cu on the GPU: every recipe vs FP64, cuBLASLt vs fallback; the paths this GPU takes)"
./build/test_fp8_gemm_gpu > "$LOG/test_fp8_gemm.log" 2>&1
grep -E "describe|^FAIL" "$LOG/test_fp8_gemm.log" | head -20
row "test_fp8_gemm (GPU)" "$(tail -1 "$LOG/test_fp8_gemm.log")"

echo "== FP8 linear layer (test/test_fp8_linear.cu on the GPU: each operand's format, scale and amax entry vs a reference)"
./build/test_fp8_linear_gpu > "$LOG/test_fp8_linear.log" 2>&1
grep -E "^FAIL" "$LOG/test_fp8_linear.log" | head -20
row "test_fp8_linear (GPU)" "$(tail -1 "$LOG/test_fp8_linear.log")"

echo "== kernel benchmarks (dev/cuda)"
for f in dev/cuda/*.cu; do
    n=$(basename "$f" .cu)
    b="build/cuda/$n"
    [ -x "$b" ] || continue
    "$b" > "$LOG/bench_$n.log" 2>&1
    grep -E "^(version|kernel|best|median|peak)" "$LOG/bench_$n.log" | head -12 | while read -r line; do echo "  $n: $line"; done
    row "dev/cuda/$n" "$(grep -cE 'FAIL' "$LOG/bench_$n.log") failed checks, see $LOG/bench_$n.log"
done
# the FP8 GEMM's table: each recipe's path, TFLOP/s and speed-up over BF16 at GPT-2 124M's shapes
[ -f "$LOG/bench_matmul_fp8.log" ] && grep -E "^(layer|qkv|attproj|fc|fcproj) " "$LOG/bench_matmul_fp8.log"
PEAK=${PEAK_TFLOPS:-$(grep -oE 'peak [0-9.]+ TFLOP/s' "$LOG/bench_matmul.log" 2>/dev/null | grep -oE '[0-9.]+' | head -1)}
PEAK=${PEAK:-0}

echo "== GPT-2 124M training benchmark: B=64 T=1024, $(grep -o 'PRECISION ?= [A-Z0-9]*' Makefile)"
./build/bench_gpu d12 64 1024 20 "$PEAK" | tee "$LOG/bench_gpt2.log" | grep "^recompute none *median"
row "GPT-2 124M B=64 T=1024" "$(grep '^recompute none *median' "$LOG/bench_gpt2.log")"

echo "== activation recompute (--recompute none, selective, full): GPT-2 124M B=16 T=1024, step time ratios"
./build/bench_gpu d12 16 1024 10 "$PEAK" none,selective,full | tee "$LOG/bench_recompute.log" | grep "step time /"
while read -r line; do row "recompute $(echo "$line" | awk '{print $2}')" "$(echo "$line" | cut -d' ' -f3-)"; done \
    < <(grep "step time /" "$LOG/bench_recompute.log")
row "bf16 GEMM peak used for MFU" "${PEAK} TFLOP/s"

echo
echo "== summary"
printf '%s\n' "${rows[@]}"
