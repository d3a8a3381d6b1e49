#!/usr/bin/env bash
# test_kernel_report.sh: the CUDA trainer's machine code, read without a GPU (scripts/kernel_report.py on the
# train_gpt that `make test` builds: SASS for sm_80, sm_90, sm_100 and sm_120, BF16):
#   - every kernel's launch configurations (every template instance; the block sizes and dynamic shared memory its
#     launcher chooses for GPT-2 d12..d48 and the recipes' B and T) fit each target's registers, shared memory
#     and threads per block, and each has an occupancy of at least one block per SM;
#   - every kernel has a launch rule and every rule a kernel; local memory only where the report says why;
#   - the 16-bit fused attention kernels and ring attention's block-pair kernels (context parallelism, on the same tile
#     code) contain tensor-core MMA instructions on sm_80 and sm_90, in BF16 (train_gpt) and in FP16
#     (build/attention_fp16.fatbin, test/attention_sass.cu); as a check that the count is real, the
#     fused classifier (FP32 arithmetic) contains none;
#   - docs/kernels.md is what the report writes now (same CUDA release), so the committed table is not stale.
# Needs cuobjdump (PyPI's nvidia-cuda-cuobjdump, installed into .venv by scripts/deps.sh test). Runtime: about 6 s
# of CPU (cuobjdump's resource usage of 4 targets and SASS of 2, twice; ~15-20 s wall on a busy 2-core machine);
# the two nvcc builds are make test-build's (the FP16 attention: ~9 s of CPU), so the make here does nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
pass=0; fail=0
ok()  { echo "ok   $*"; pass=$((pass+1)); }
bad() { echo "FAIL $*"; fail=$((fail+1)); }
py=python3; [ -x .venv/bin/python3 ] && py=.venv/bin/python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# the default CUDA build (make test-build has built it: this make does nothing then; test/mutations.py plants a bug
# in a source and lets this make rebuild it, about 3 minutes on 2 cores)
if ! command -v "${NVCC:-nvcc}" > /dev/null 2>&1 && [ ! -x train_gpt ]; then
    echo "skip kernel_report: no nvcc and no train_gpt here (no GPU here, and no CUDA toolkit)"
    echo "kernel_report: $pass passed, $fail failed, 1 skipped"; exit 0
fi
if command -v "${NVCC:-nvcc}" > /dev/null 2>&1 && ! make -s train_gpt build/attention_fp16.fatbin > "$tmp/build.log" 2>&1; then
    bad "make train_gpt build/attention_fp16.fatbin failed: $(grep -m1 -i error "$tmp/build.log")"
    echo "kernel_report: $pass passed, $fail failed"; exit 1
fi
# the binary must carry the default targets: the report is about the default build, not a GPU_ARCH=native one
if ! grep -q -- "code=sm_80 .*code=sm_90" build/flags/train_gpt 2> /dev/null; then
    bad "train_gpt was not built with the default targets (build/flags/train_gpt: $(cat build/flags/train_gpt 2> /dev/null | grep -o -- '-gencode[^ ]* [^ ]*\|-arch=[^ ]*' | tr '\n' ' '))"
    echo "kernel_report: $pass passed, $fail failed"; exit 1
fi

$py scripts/kernel_report.py --binary train_gpt --check docs/kernels.md > "$tmp/report.md" 2> "$tmp/err"
rc=$?
sed 's/^/    /' "$tmp/err"
sed 's/^/    /' "$tmp/report.md"   # the whole report (each kernel's resources and occupancy per target) into the log
if [ $rc -eq 0 ]; then ok "every launch fits every target embedded (sm_80, sm_90, sm_100, sm_120 with this nvcc); local memory only where said why; docs/kernels.md current"
else bad "scripts/kernel_report.py: exit $rc (the errors above)"; fi

# what the report found, read back from its table: it must have seen the kernels (a report of nothing passes nothing)
nk=$(grep -c '^| `' "$tmp/report.md")
n=$(sed -n 's/^\([0-9]*\) kernels x [0-9] targets.*/\1/p' "$tmp/report.md")
t=$(sed -n 's/^[0-9]* kernels x \([0-9]\) targets.*/\1/p' "$tmp/report.md")
if [ -n "$n" ] && [ "$n" -ge 100 ]; then ok "$n kernels on $t targets"; else bad "the report lists ${n:-no} kernels (expected 100 or more)"; fi
# the instruction-mix table: columns sm_80 MMA FFMA LDG LDS LD async LDL/STL, then sm_90's
mix() { sed -n '/^## Instruction mix/,/^## The FP16/p' "$tmp/report.md" | grep "^| \`$1\` |" | awk -F'|' -v c="$2" '{gsub(/ /, "", $(c + 2)); print $(c + 2)}'; }
# the fused kernels, and ring attention's block-pair kernels (--cp) on the same tile code
for k in "attention_forward_mma_kernel<64>" "attention_backward_dkdv_mma_kernel<64>" "attention_backward_dq_mma_kernel<64>" \
         "attention_pair_forward_mma_kernel<64>" "attention_pair_backward_dkdv_mma_kernel<64>" "attention_pair_backward_dq_mma_kernel<64>"; do
    a=$(mix "$k" 1); b=$(mix "$k" 8)
    if [ "${a:-0}" -gt 0 ] 2> /dev/null && [ "${b:-0}" -gt 0 ] 2> /dev/null; then ok "$k: $a MMA instructions on sm_80, $b on sm_90"
    else bad "$k: MMA on sm_80 '${a:-}', sm_90 '${b:-}' (expected tensor-core instructions)"; fi
done
for k in "attention_forward_mma_kernel<64>" "attention_pair_forward_mma_kernel<64>" "attention_pair_backward_dkdv_mma_kernel<64>" \
         "attention_pair_backward_dq_mma_kernel<64>"; do
    h=$(grep -A40 "^## The FP16 build's fused attention" "$tmp/report.md" | grep "^| \`$k\` |" | awk -F'|' '{gsub(/ /, "", $3); gsub(/ /, "", $5); print $3, $5}')
    set -- $h
    if [ "${1:-0}" -gt 0 ] 2> /dev/null && [ "${2:-0}" -gt 0 ] 2> /dev/null; then ok "$k in FP16: $1 MMA instructions on sm_80, $2 on sm_90"
    else bad "$k in FP16: MMA '${1:-}' '${2:-}' (expected tensor-core instructions)"; fi
done
a=$(mix fused_classifier_kernel 1); f=$(mix fused_classifier_kernel 2)
if [ "$a" = 0 ] && [ "${f:-0}" -gt 0 ] 2> /dev/null; then ok "fused_classifier_kernel: no MMA, $f FFMA on sm_80 (the counts tell kernels apart)"
else bad "fused_classifier_kernel: MMA '$a' FFMA '$f' on sm_80 (expected 0 and some)"; fi
echo "occupancy, lowest: $(grep '^[0-9]* kernels x [0-9] targets' "$tmp/report.md" | sed 's/.*Lowest occupancy (blocks per SM): //')"

echo "kernel_report: $pass passed, $fail failed"
[ $fail -eq 0 ]
