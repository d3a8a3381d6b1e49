#!/usr/bin/env bash
# test_warnings.sh: no build prints a warning. `make test` writes what its build printed to build/test_build.log
# (the CPU builds in FP32, BF16 and FP16, the emulated CUDA builds, the nvcc builds of the trainer and the test
# programs, the dev/cuda benchmarks); .ci/run writes `make train`'s build of train_gpt_cpu to build/ci_train.log.
# Each log present is read for the lines g++ and nvcc print for a warning ("FILE:LINE: warning: ...", nvcc's
# "warning #N-D" and "nvcc warning : ..."); every one found is printed and fails the test. The compiler commands each log holds are counted, so
# the line says what was looked at (an incremental `make test` that rebuilt nothing has nothing to look at and
# says so). Ends with "test_warnings: N passed, M failed".
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0
ok()  { echo "ok   $*"; pass=$((pass+1)); }
bad() { echo "FAIL $*"; fail=$((fail+1)); }
seen=0
for log in build/test_build.log build/ci_train.log; do
    [ -f "$log" ] || continue
    seen=1
    # compiler commands: lines that start with the compilers the Makefile runs
    n=$(grep -cE '^(g\+\+|c\+\+|cc|gcc|nvcc|/usr/local/cuda[^ ]*/bin/nvcc) ' "$log")
    # a compiler's warning: "file:line[:col]: warning: ..." (g++, and nvcc's host compiler), nvcc's own "warning #N-D"
    # and "nvcc warning : ..."; make's own notes ("make[1]: warning: ...") are not the code's
    w=$(grep -E '(: warning:|warning #[0-9]|^nvcc warning)' "$log" | grep -vE '^make(\[[0-9]+\])?: ')
    if [ -z "$w" ]; then ok "$log: $n compiler commands, no warning"
    else
        bad "$log: $n compiler commands, $(printf '%s\n' "$w" | grep -c .) warning lines:"
        printf '%s\n' "$w" | head -20 | sed 's/^/     /'
    fi
done
[ $seen = 1 ] || ok "no build log here (make test writes build/test_build.log): nothing was built by this run"
echo "test_warnings: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
