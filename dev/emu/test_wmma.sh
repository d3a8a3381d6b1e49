#!/usr/bin/env bash
# test_wmma.sh: the tests of the emulated WMMA subset (dev/emu/mma.h), from dev/emu/test_wmma.cu built
# plain, with ASan+UBSan, with TSan (-DEMU_TSAN) and with racecheck. The correct cases (tile product and tiled GEMMs in bf16 and half against a
# double reference, every row/col-major combination, fill + accumulate, element-wise x[i] scaling and
# relu, a kernel assuming NVIDIA's lane mapping that must get wrong results) run in the forward, reverse
# and random thread orders, under ASan+UBSan, TSan (2 OS threads) and racecheck: each of their lines counts, and the results must not
# change with the order. The planted bugs (misaligned pointer, bad ldm for bf16 and float, a lane that
# skips mma_sync, a lane that returns before it, a partial warp, lanes with different pointers) must
# each exit non-zero with their "emu: error:" line; racecheck reports a tile stored to shared memory and
# read by other lanes without a __syncwarp, and not the same with it. Ends with "wmma: N passed, M failed".
# Usage: dev/emu/test_wmma.sh [dir with test_wmma, test_wmma_asan, test_wmma_tsan, test_wmma_racecheck]   (test/run_tests.sh: wmma)
set -u
B=${1:-build/emu}
T=$B/test_wmma
A=$B/test_wmma_asan
S=$B/test_wmma_tsan
R=$B/test_wmma_racecheck
for bin in "$T" "$A" "$S" "$R"; do
    if [ ! -x "$bin" ]; then
        echo "error: $bin not found: build it with 'make $bin' ($0:${LINENO})" >&2
        exit 1
    fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
start=$(date +%s)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=0}

ok() { pass=$((pass + 1)); printf 'ok   %s\n' "$1"; }
bad() {
    fail=$((fail + 1))
    printf 'FAIL %s: %s\n' "$1" "$2"
    if [ -n "${3:-}" ] && [ -f "$3" ]; then head -n 25 "$3" | sed 's/^/      | /'; fi
}

# correct ENV BIN LABEL [REF]: every ok/FAIL line of the program counts (prefixed with LABEL); exit 0, no
# sanitizer report, and the results line equal to REF when given
correct() {
    local envs=$1 bin=$2 label=$3 ref=${4:-}
    local out="$tmp/c$((pass + fail)).out"
    # shellcheck disable=SC2086
    env $envs timeout 120 "$bin" correct > "$out" 2>&1
    local rc=$?
    local line
    while IFS= read -r line; do
        case "$line" in
            "ok   "*) ok "$label: ${line#ok   }" ;;
            "FAIL "*) bad "$label: ${line#FAIL }" "wrong result" ;;
        esac
    done < "$out"
    if [ "$rc" -ne 0 ]; then bad "$label" "exit status $rc" "$out"; return; fi
    if grep -qE "ERROR: AddressSanitizer|runtime error:|WARNING: ThreadSanitizer" "$out"; then bad "$label" "a sanitizer reported an error" "$out"; return; fi
    local got
    got=$(grep '^results ' "$out" | head -n 1)
    if [ -z "$got" ]; then bad "$label" "no results line" "$out"; return; fi
    if [ -n "$ref" ] && [ "$got" != "$ref" ]; then bad "$label" "'$got' differs from the forward order's '$ref'" "$out"; return; fi
    ok "$label: results identical to the forward order's"
}

# check_fail NAME ARG PATTERN...: non-zero exit and every PATTERN (grep -E) in the output (BIN: the
# program, $T unless set)
check_fail() {
    local name=$1 arg=$2
    local out="$tmp/f$((pass + fail)).out"
    shift 2
    timeout 120 "${BIN:-$T}" "$arg" > "$out" 2>&1
    local rc=$?
    if [ "$rc" -eq 0 ]; then bad "$name" "exit status 0: the bug was not caught" "$out"; return; fi
    if [ "$rc" -eq 124 ]; then bad "$name" "timed out" "$out"; return; fi
    local p
    for p in "$@"; do
        if ! grep -qE -- "$p" "$out"; then bad "$name" "exit status $rc but no '$p' in the output" "$out"; return; fi
    done
    ok "$name"
}

EMU_ORDER=forward timeout 120 "$T" correct > "$tmp/ref.out" 2>&1
ref=$(grep '^results ' "$tmp/ref.out" | head -n 1)
correct "EMU_ORDER=forward" "$T" "forward"
correct "EMU_ORDER=reverse" "$T" "reverse" "$ref"
correct "EMU_ORDER=random EMU_SEED=3" "$T" "random" "$ref"
correct "EMU_ORDER=random EMU_SEED=5" "$A" "ASan+UBSan random" "$ref"
correct "EMU_ORDER=random EMU_SEED=7" "$R" "racecheck random" "$ref"
correct "EMU_ORDER=random EMU_SEED=9 EMU_THREADS=2" "$S" "TSan random EMU_THREADS=2" "$ref"

check_fail "misaligned pointer to load_matrix_sync" misaligned \
    "emu: error: wmma::load_matrix_sync at .*test_wmma.cu:[0-9]+: pointer 0x[0-9a-f]+ is not 256-bit \(32-byte\) aligned" \
    "in kernel wmma_bug_kernel"
check_fail "ldm 20 for bf16 (not a multiple of 8)" bad_ldm \
    "emu: error: wmma::load_matrix_sync at .*test_wmma.cu:[0-9]+: ldm 20 is not a multiple of 8 elements"
check_fail "ldm 18 for a float store (not a multiple of 4)" bad_ldm_float \
    "emu: error: wmma::store_matrix_sync at .*test_wmma.cu:[0-9]+: ldm 18 is not a multiple of 4 elements"
check_fail "lane 5 skips mma_sync" skip_mma \
    "emu: error: lanes of warp 0 meet with mask 0xffffffff in different warp collectives: lane 0 in wmma::mma_sync at .*test_wmma.cu:[0-9]+, lane 5 in wmma::store_matrix_sync"
check_fail "lane 7 returns before mma_sync" lane_returns \
    "emu: error: lane 7 of warp 0 returned while lanes 0-6 of its warp wait for it in wmma::mma_sync"
check_fail "WMMA in a warp of 16 threads" partial_warp \
    "emu: error: wmma::fill_fragment at .*test_wmma.cu:[0-9]+: WMMA needs a full warp of 32 threads"
check_fail "lanes pass different pointers to load_matrix_sync" nonuniform \
    "emu: error: wmma::load_matrix_sync at .*test_wmma.cu:[0-9]+: lanes of one warp pass different arguments: lane 0 .*, lane 3"
BIN=$R check_fail "racecheck: store_matrix_sync to shared memory read by other lanes without __syncwarp" smem_nosync \
    "racecheck: shared-memory race \(read after write\) in kernel wmma_bug_kernel" "the earlier write: .*mma.h:[0-9]+"
out="$tmp/smem_sync.out"
EMU_ORDER=reverse timeout 120 "$R" smem_sync > "$out" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && grep -q "smem_sync: 0 of 256 elements differ" "$out" && grep -q "no race found" "$out"; then
    ok "racecheck: the same with the __syncwarp: right results, no race reported"
else
    bad "racecheck: the same with the __syncwarp" "exit status $rc" "$out"
fi

echo "time $(($(date +%s) - start)) s"
echo "wmma: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
