#!/usr/bin/env bash
# test_emu.sh: the CUDA emulator's tests. Runs dev/emu/test_emu.cu built four ways (plain,
# AddressSanitizer+UBSan, ThreadSanitizer, racecheck): correct kernels must give the same results in
# every thread order, and every planted bug must end with a non-zero exit and its report; the planted
# shared-memory races must give the right results in every order and under ASan (nothing else sees
# them) and be reported by racecheck. Prints one line per case, then "emu: N passed, M failed";
# exits 1 if any case failed.
# Usage: dev/emu/test_emu.sh [dir with test_emu, test_emu_asan, test_emu_tsan, test_emu_racecheck]
#        (make test-emu)
set -u
# T, A, S, R (the four builds), tmp, pass, fail, start, ok, bad, same_results, caught
# shellcheck source=dev/emu/emu_test_lib.sh
source "$(dirname "$0")/emu_test_lib.sh"
emu_test_open "${1:-build/emu}" test_emu test-emu 5

# run OUT ENV BIN ARG: run BIN ARG with the environment words ENV, output in OUT; sets rc
run() {
    local out=$1 envs=$2 bin=$3 arg=$4
    # shellcheck disable=SC2086
    env $envs timeout 120 "$bin" "$arg" > "$out" 2>&1
    rc=$?
}

# check_same NAME ENV BIN ARG REF: exit 0, no sanitizer report, and "results" equal to REF (if given)
check_same() {
    local name=$1 envs=$2 bin=$3 arg=$4 ref=${5:-}
    local out="$tmp/case$((pass + fail)).out"
    run "$out" "$envs" "$bin" "$arg"
    if [ "$rc" -ne 0 ]; then bad "$name" "exit status $rc" "$out"; return; fi
    if grep -qE "ERROR: AddressSanitizer|runtime error:|WARNING: ThreadSanitizer" "$out"; then
        bad "$name" "a sanitizer reported an error in a correct kernel" "$out"; return
    fi
    same_results "$name" "$out" "$ref" && ok "$name"
}

# check_fail NAME ENV BIN ARG PATTERN...: non-zero exit and every PATTERN (grep -E) in the output
check_fail() {
    local name=$1 envs=$2 bin=$3 arg=$4
    local out="$tmp/case$((pass + fail)).out"
    shift 4
    run "$out" "$envs" "$bin" "$arg"
    caught "$name" "$rc" "$out" "$@"
}

# correct kernels: identical results in every order, on 1 and 2 OS threads, under the sanitizers
run "$tmp/ref.out" "EMU_ORDER=forward" "$T" correct
ref=$(grep '^results ' "$tmp/ref.out" | head -n 1)
check_same "correct kernels, EMU_ORDER=forward" "EMU_ORDER=forward" "$T" correct "$ref"
check_same "correct kernels, EMU_ORDER=reverse" "EMU_ORDER=reverse" "$T" correct "$ref"
check_same "correct kernels, EMU_ORDER=random EMU_SEED=1" "EMU_ORDER=random EMU_SEED=1" "$T" correct "$ref"
check_same "correct kernels, EMU_ORDER=random EMU_SEED=7" "EMU_ORDER=random EMU_SEED=7" "$T" correct "$ref"
check_same "correct kernels, EMU_THREADS=2 (atomics across OS threads)" "EMU_THREADS=2 EMU_ORDER=random EMU_SEED=3" "$T" correct "$ref"
check_same "correct kernels under ASan+UBSan, EMU_ORDER=reverse EMU_THREADS=2" "EMU_ORDER=reverse EMU_THREADS=2" "$A" correct "$ref"
run "$tmp/ref_small.out" "EMU_ORDER=forward" "$T" small
ref_small=$(grep '^results ' "$tmp/ref_small.out" | head -n 1)
check_same "correct kernels under TSan, no race reported (small shapes)" "EMU_ORDER=random EMU_SEED=5 EMU_THREADS=2" "$S" small "$ref_small"
check_same "correct kernels under racecheck, EMU_ORDER=forward" "EMU_ORDER=forward" "$R" correct "$ref"
check_same "correct kernels under racecheck, EMU_ORDER=reverse" "EMU_ORDER=reverse" "$R" correct "$ref"
check_same "correct kernels under racecheck, EMU_ORDER=random EMU_THREADS=2" "EMU_ORDER=random EMU_SEED=9 EMU_THREADS=2" "$R" correct "$ref"

# a missing __syncthreads: the results depend on the thread order
name="missing __syncthreads: forward and reverse orders differ"
run "$tmp/ms_f.out" "EMU_ORDER=forward" "$T" missing_sync
rc_f=$rc
run "$tmp/ms_r.out" "EMU_ORDER=reverse" "$T" missing_sync
if [ "$rc_f" -ne 0 ] || [ "$rc" -ne 0 ]; then
    bad "$name" "exit status $rc_f / $rc" "$tmp/ms_r.out"
elif [ "$(grep '^missing_sync result' "$tmp/ms_f.out")" = "$(grep '^missing_sync result' "$tmp/ms_r.out")" ]; then
    bad "$name" "the same result in both orders: $(cat "$tmp/ms_f.out")"
else
    ok "$name"
fi

# planted bugs
check_fail "out-of-bounds write to a device buffer (ASan)" "" "$A" oob_global \
    "AddressSanitizer: heap-buffer-overflow" "oob_global_kernel" "emu: the report above is from CUDA thread"
check_fail "out-of-bounds write to dynamic shared memory (ASan)" "" "$A" oob_smem \
    "AddressSanitizer: heap-buffer-overflow" "oob_smem_kernel"
check_fail "read-modify-write race on shared memory (TSan)" "" "$S" race \
    "ThreadSanitizer: data race" "race_kernel"
check_fail "read-modify-write race on shared memory (racecheck, one warp)" "" "$R" race \
    "racecheck: shared-memory race \(read after write\) in kernel race_kernel" "race_kernel\(float const\*, float\*\)::s \+ 0 \(of 4 bytes\)" \
    "no __syncwarp or warp collective of both lanes"
check_fail "missing __syncthreads in a reduction (racecheck)" "EMU_ORDER=reverse" "$R" missing_sync \
    "racecheck: shared-memory race \((read after write|write after read)\) in kernel block_sum_nosync_kernel"
check_fail "__syncthreads reached by part of the block" "" "$T" partial_sync \
    "reached by only part of the block" "partial_sync_kernel" "launched at .*test_emu.cu:[0-9]+"
check_fail "lane returns during a shuffle (forward order)" "EMU_ORDER=forward" "$T" lane_exit \
    "lane 16 of warp 0 returned while lanes 0-15 of its warp wait for it in __shfl_down_sync" "lane_exit_kernel"
check_fail "lane returns during a shuffle (reverse order)" "EMU_ORDER=reverse" "$T" lane_exit \
    "__shfl_down_sync at .*test_emu.cu:[0-9]+ with mask 0xffffffff waits for lane [0-9]+, which has already returned"
check_fail "collective with a mask without the calling lane" "" "$T" mask_self \
    "the mask 0x00000001 does not include the calling lane" "mask_self_kernel"
check_fail "deadlock between __syncwarp and __syncthreads" "EMU_ORDER=random EMU_SEED=11" "$T" deadlock \
    "deadlock" "lanes 0-15 wait in __syncwarp" "EMU_SEED=11"
check_fail "host pointer passed to a kernel" "" "$T" host_ptr \
    "pointer argument 0 .* is not inside any live cudaMalloc allocation" "oob_global_kernel" "test_emu.cu:[0-9]+"
check_fail "2048 threads per block" "" "$T" too_many_threads "has 2048 threads; a block has at most 1024"
check_fail "64 KiB dynamic shared memory without the opt-in" "" "$T" smem_optin \
    "more than the default 49152" "cudaFuncSetAttribute"
check_fail "240 KiB dynamic shared memory (over 227 KiB)" "" "$T" smem_max "at most 232448"
check_fail "stack overflow of an emulated thread" "" "$T" stack_overflow "stack overflow of an emulated CUDA thread"

# racecheck: planted shared-memory races that no thread order shows in the results and ASan does not
# see; each has a fixed twin with the same results. check_hidden: the racy version gives the fix's
# results in the forward, reverse and two random orders and under ASan+UBSan, without any report.
check_hidden() {
    local name=$1 arg=$2 ref=$3 envs out got
    for envs in "EMU_ORDER=forward" "EMU_ORDER=reverse" "EMU_ORDER=random EMU_SEED=1" "EMU_ORDER=random EMU_SEED=7" "ASAN"; do
        local bin=$T
        if [ "$envs" = ASAN ]; then bin=$A; envs="EMU_ORDER=random EMU_SEED=3"; fi
        out="$tmp/case$((pass + fail)).out"
        run "$out" "$envs" "$bin" "$arg"
        got=$(grep '^results ' "$out" | head -n 1)
        if [ "$rc" -ne 0 ] || grep -qE "ERROR: AddressSanitizer|runtime error:" "$out" || [ -z "$ref" ] || [ "$got" != "$ref" ]; then
            bad "$name" "$bin with $envs: exit status $rc, '$got' (the fix gives '$ref')" "$out"; return
        fi
    done
    ok "$name"
}
# rc_case CASE PATTERN...: the fix's results, check_hidden, racecheck's report, the fix under racecheck
rc_case() {
    local c=$1
    shift
    run "$tmp/${c}_ok.out" "EMU_ORDER=forward" "$T" "${c}_ok"
    local rref
    rref=$(grep '^results ' "$tmp/${c}_ok.out" | head -n 1)
    check_hidden "$c (planted race): right results in forward, reverse, random orders and under ASan+UBSan" "$c" "$rref"
    check_fail "$c (planted race): caught by racecheck" "EMU_ORDER=random EMU_SEED=2" "$R" "$c" "$@" \
        "thread \([0-9]+,0,0\) \(warp [0-9]+, lane [0-9]+\) of block \([0-9]+,0,0\)" \
        "emu:   this (read|write|atomic update): .*test_emu.cu:[0-9]+ \(in " "emu:   the earlier (read|write|atomic update): .*test_emu.cu:[0-9]+ \(in "
    check_same "${c}_ok (the fix): racecheck reports nothing, same results" "EMU_ORDER=random EMU_SEED=2 EMU_THREADS=2" "$R" "${c}_ok" "$rref"
}
rc_case rc_tiled "racecheck: shared-memory race \(write after read\) in kernel void rc_tiled_kernel<true>" \
    "dynamic shared memory \(EXTERN_SHARED\) \+ [0-9]+ \(of 256 bytes\)" "with no __syncthreads between"
rc_case rc_reduce_twice "racecheck: shared-memory race \(write after read\) in kernel void rc_reduce_twice_kernel<true>" \
    "__shared__ rc_block_sum<true>\(float\)::partial \+ [0-9]+ \(of 128 bytes\)" "with no __syncthreads between"
rc_case rc_halves "racecheck: shared-memory race \(write after read\) in kernel void rc_halves_kernel<true>" \
    "::half_sum \+ [0-9]+ \(of 256 bytes\)" "no __syncwarp or warp collective of both lanes"
rc_case rc_raw "racecheck: shared-memory race \(read after write\) in kernel void rc_raw_kernel<true>" \
    "::vals \+ [0-9]+ \(of 1024 bytes\)" "with no __syncthreads between"
rc_case rc_atomic "racecheck: shared-memory race \(read after atomic\) in kernel void rc_atomic_kernel<true>" \
    "::count \+ 0 \(of 4 bytes\)" "atomically updated in the same barrier interval"

echo "emu: tests took $(($(date +%s) - start)) s"
echo "emu: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
