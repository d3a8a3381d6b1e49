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
# T, A, S, R (the four builds), tmp, pass, fail, start, ok, bad, same_results, caught
# shellcheck source=dev/emu/emu_test_lib.sh
source "$(dirname "$0")/emu_test_lib.sh"
emu_test_open "${1:-build/emu}" test_wmma "" 4

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
    same_results "$label" "$out" "$ref" && ok "$label: results identical to the forward order's"
}

# check_fail NAME ARG PATTERN...: non-zero exit and every PATTERN (grep -E) in the output (BIN: the
# program, $T unless set)
check_fail() {
    local name=$1 arg=$2
    local out="$tmp/f$((pass + fail)).out"
    shift 2
    timeout 120 "${BIN:-$T}" "$arg" > "$out" 2>&1
    caught "$name" $? "$out" "$@"
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
