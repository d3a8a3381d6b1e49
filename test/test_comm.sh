#!/usr/bin/env bash
# test_comm.sh: llm/comm/comm.h under every layout, and the failure paths of the launcher.
#
#   bash test/test_comm.sh        (builds build/test_comm_cpu and build/test_comm_emu if needed)
#
# Runs test/test_comm.cu one process alone (Open MPI singleton init), under mpirun with 1, 2 and 4
# processes in the layouts (dp x tp x pp) 2x1x1 1x2x1 1x1x2 4x1x1 2x2x1 1x2x2 2x1x2 (and dp inferred), and
# with context parallelism (dp x tp x pp x cp) 1x1x1x2, 2x1x1x2 (the gradient group dp x cp) and 1x2x2x2 (8 processes),
# with expert parallelism folded into dp (--ep 2 over dp 4, and over dp 2 x cp 2: the ep and edp groups),
# the emulated CUDA build with 1, 2 and 4 (and tp 2 x cp 2, and dp 2 with ep 2: all_to_all_v over NCCL) (comm.h's NCCL code against dev/emu/nccl_emu.h, float and
# bf16; each run checks that every collective ran as an emulated NCCL operation), the emulated NCCL
# itself (build/emu/test_nccl_emu, 2 and 3 processes), then checks that an invalid layout exits
# non-zero with one line (an --ep that does not divide dp too), that a host pointer is refused by the emulated build, that an all_to_all
# with overlapping buffers is refused (CPU and emulated builds; it has no in-place form), that the
# watchdog's lines name an all_to_all that a hung rank never joins, that a rank leaving
# without MPI_Finalize (exit(1), SIGKILL) while the others wait in an all-reduce ends the whole job
# non-zero within 30 s, and that the CUDA/NCCL build compiles (when nvcc is here). Logs:
# build/comm/*.log. Each run prints its seed; rerun one with --seed S.
#
# The emulated runs need one emulated device per process (as NCCL needs one GPU per rank):
# EMU_DEVICES=4 is exported for them.
# Ends with "test_comm: N passed, M failed"; exit status 1 on any failure.
#
# mpirun flags used here and why:
#   --oversubscribe      more processes than cores (this CI machine has 2)
#   --allow-run-as-root  only when run as root (Open MPI refuses root otherwise)
#   -q                   no mpirun banners: an error is the program's one line
#   --mca orte_abort_on_non_zero_status 1 --mca orte_allowed_exit_without_sync 0
#                        a process that exits non-zero, or without MPI_Finalize, kills the job
#                        (Open MPI 4.1 defaults, pinned so a site config cannot turn them off)
set -u
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1
export EMU_DEVICES=4
LOG=build/comm
mkdir -p "$LOG"

make -s build/test_comm_cpu build/test_comm_emu build/emu/test_nccl_emu >"$LOG/build.log" 2>&1 \
    || { cat "$LOG/build.log"; echo "test_comm: 0 passed, 1 failed"; exit 1; }

MPIRUN=(mpirun -q --oversubscribe --mca orte_abort_on_non_zero_status 1 --mca orte_allowed_exit_without_sync 0)
[ "$(id -u)" = "0" ] && MPIRUN+=(--allow-run-as-root)
echo "mpirun flags: ${MPIRUN[*]:1}"

pass=0; fail=0
ok()   { echo "ok   $*"; pass=$((pass+1)); }
bad()  { echo "FAIL $*"; fail=$((fail+1)); }

# run NAME CMD...: a test_comm run; adds its "N passed, M failed"
run() {
    local name=$1; shift
    local log=$LOG/$name.log t0=$SECONDS
    timeout 60 "$@" >"$log" 2>&1
    local rc=$?
    local line p f
    line=$(grep -E '^test_comm: [0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
    p=$(echo "$line" | sed -nE 's/^test_comm: ([0-9]+) passed, ([0-9]+) failed.*/\1/p'); p=${p:-0}
    f=$(echo "$line" | sed -nE 's/^test_comm: ([0-9]+) passed, ([0-9]+) failed.*/\2/p'); f=${f:-0}
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    if [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    grep -E '^(FAIL|  rank|error)' "$log" | head -10
    pass=$((pass+p)); fail=$((fail+f))
    local cmd="$*"; cmd=${cmd#"${MPIRUN[*]} "}  # the common mpirun flags are listed at the top
    echo "$( [ "$f" -eq 0 ] && echo "ok  " || echo "FAIL") $name: $p passed, $f failed, exit $rc ($((SECONDS-t0)) s): $cmd"
}

run cpu_singleton   ./build/test_comm_cpu
run cpu_np1         "${MPIRUN[@]}" -np 1 ./build/test_comm_cpu
run cpu_2x1x1       "${MPIRUN[@]}" -np 2 ./build/test_comm_cpu --dp 2 --tp 1 --pp 1
run cpu_1x2x1       "${MPIRUN[@]}" -np 2 ./build/test_comm_cpu --dp 1 --tp 2 --pp 1
run cpu_1x1x2       "${MPIRUN[@]}" -np 2 ./build/test_comm_cpu --dp 1 --tp 1 --pp 2
run cpu_4x1x1       "${MPIRUN[@]}" -np 4 ./build/test_comm_cpu --dp 4 --tp 1 --pp 1
run cpu_2x2x1       "${MPIRUN[@]}" -np 4 ./build/test_comm_cpu --dp 2 --tp 2 --pp 1
run cpu_1x2x2       "${MPIRUN[@]}" -np 4 ./build/test_comm_cpu --dp 1 --tp 2 --pp 2
run cpu_2x1x2       "${MPIRUN[@]}" -np 4 ./build/test_comm_cpu --dp 2 --tp 1 --pp 2
run cpu_dp_auto     "${MPIRUN[@]}" -np 4 ./build/test_comm_cpu --pp 4
run cpu_1x1x1x2     "${MPIRUN[@]}" -np 2 ./build/test_comm_cpu --cp 2
run cpu_2x1x1x2     "${MPIRUN[@]}" -np 4 ./build/test_comm_cpu --dp 2 --cp 2
run cpu_1x2x2x2     "${MPIRUN[@]}" -np 8 ./build/test_comm_cpu --tp 2 --pp 2 --cp 2
run cpu_4x1x1_ep2   "${MPIRUN[@]}" -np 4 ./build/test_comm_cpu --dp 4 --ep 2
run cpu_2x1x1x2_ep2 "${MPIRUN[@]}" -np 4 ./build/test_comm_cpu --dp 2 --cp 2 --ep 2
run emu_singleton   ./build/test_comm_emu
run emu_1x2x1       "${MPIRUN[@]}" -np 2 ./build/test_comm_emu --tp 2
run emu_2x2x1       "${MPIRUN[@]}" -np 4 ./build/test_comm_emu --dp 2 --tp 2 --pp 1
run emu_1x2x1x2     "${MPIRUN[@]}" -np 4 ./build/test_comm_emu --tp 2 --cp 2
run emu_2x1x1_ep2   "${MPIRUN[@]}" -np 2 ./build/test_comm_emu --dp 2 --ep 2

# the emulated NCCL on its own: semantics, arithmetic, non-blocking communicators, refused arguments
# (its summary line is "test_nccl_emu: N passed, M failed")
run_nccl_emu() {  # NAME NP
    local name=$1 np=$2 t0=$SECONDS log=$LOG/$1.log
    timeout 60 "${MPIRUN[@]}" -np "$np" ./build/emu/test_nccl_emu >"$log" 2>&1
    local rc=$? line p f
    line=$(grep -E '^test_nccl_emu: [0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
    p=$(echo "$line" | sed -nE 's/^test_nccl_emu: ([0-9]+) passed.*/\1/p'); p=${p:-0}
    f=$(echo "$line" | sed -nE 's/^test_nccl_emu: [0-9]+ passed, ([0-9]+) failed.*/\1/p'); f=${f:-0}
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    if [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    grep -E '^(FAIL|  rank|error)' "$log" | head -10
    pass=$((pass+p)); fail=$((fail+f))
    echo "$( [ "$f" -eq 0 ] && echo "ok  " || echo "FAIL") $name: $p passed, $f failed, exit $rc ($((SECONDS-t0)) s)"
}
run_nccl_emu nccl_emu_np2 2
run_nccl_emu nccl_emu_np3 3

# the NCCL path, seen from outside: with NCCL_DEBUG=INFO the emulated NCCL logs every operation
NCCL_DEBUG=INFO timeout 60 "${MPIRUN[@]}" -x NCCL_DEBUG -np 2 ./build/test_comm_emu --tp 2 >"$LOG/emu_nccl_debug.log" 2>&1
rc=$?
n_ar=$(grep -c 'NCCL INFO (emulated) ncclAllReduce' "$LOG/emu_nccl_debug.log")
if [ $rc -eq 0 ] && [ "$n_ar" -gt 0 ]; then
    ok "emu_nccl_debug: NCCL_DEBUG=INFO logs $n_ar emulated ncclAllReduce operations of test_comm_emu"
else
    bad "emu_nccl_debug: exit $rc, $n_ar 'NCCL INFO (emulated) ncclAllReduce' lines (see $LOG/emu_nccl_debug.log)"
fi

# an invalid layout: non-zero exit, exactly one line of output, naming the flags
invalid() {  # NAME CMD...
    local name=$1; shift
    local out rc
    out=$(timeout 30 "$@" 2>&1); rc=$?
    echo "$out" > "$LOG/$name.log"
    local lines; lines=$(printf '%s\n' "$out" | grep -c .)
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$lines" -eq 1 ] && printf '%s' "$out" | grep -qE '^error: invalid layout.*--(dp|tp|pp)'; then
        ok "$name: exit $rc, one line: $out"
    else
        bad "$name: exit $rc, $lines lines (expected non-zero and one 'error: invalid layout' line): $out"
    fi
}
invalid invalid_np4_dp3     "${MPIRUN[@]}" -np 4 ./build/test_comm_cpu --dp 3
invalid invalid_np4_tp3     "${MPIRUN[@]}" -np 4 ./build/test_comm_cpu --tp 3
invalid invalid_singleton   ./build/test_comm_cpu --dp 2 --tp 1 --pp 1
# expert parallelism folds into dp: an ep that does not divide dp is refused with one line naming --ep
out=$(timeout 30 "${MPIRUN[@]}" -np 2 ./build/test_comm_cpu --dp 2 --ep 3 2>&1); rc=$?
echo "$out" > "$LOG/invalid_ep3.log"
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(printf '%s\n' "$out" | grep -c .)" -eq 1 ] && [[ "$out" == "error: invalid layout: --ep 3"* ]]; then
    ok "invalid_ep3: exit $rc, one line: $out"
else
    bad "invalid_ep3: exit $rc (expected non-zero and one 'error: invalid layout: --ep 3' line): $out"
fi

# the emulated build refuses host memory (a host pointer would crash NCCL on a GPU)
out=$(timeout 30 "${MPIRUN[@]}" -np 2 ./build/test_comm_emu --host-ptr 2>&1); rc=$?
echo "$out" > "$LOG/emu_host_ptr.log"
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && printf '%s' "$out" | grep -q 'collectives take device memory'; then
    ok "emu_host_ptr: a host pointer to a collective exits $rc with 'collectives take device memory'"
else
    bad "emu_host_ptr: exit $rc: $out"
fi

# all_to_all has no in-place form: recv == send is refused with one line (both builds, 2 processes)
for b in cpu emu; do
    out=$(timeout 30 "${MPIRUN[@]}" -np 2 ./build/test_comm_$b --a2a-overlap 2>&1); rc=$?
    echo "$out" > "$LOG/${b}_a2a_overlap.log"
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && printf '%s' "$out" | grep -q 'all_to_all: send and recv buffers overlap'; then
        ok "${b}_a2a_overlap: an all_to_all with recv == send exits $rc with 'all_to_all: send and recv buffers overlap'"
    else
        bad "${b}_a2a_overlap: exit $rc: $out"
    fi
done

# the watchdog names an all_to_all: with --comm-timeout 2 s the last of 3 ranks hangs before the second
# all_to_all of the world; ranks 0 and 1 each print one line naming it (all_to_all #2 of the world group,
# rank 2 missing), checked against the mesh by test/watchdog_lines.py; the job ends non-zero
for b in cpu emu; do
    log=$LOG/${b}_a2a_hang.log t0=$SECONDS problems=""
    timeout 30 "${MPIRUN[@]}" -np 3 ./build/test_comm_$b --a2a-hang >"$log" 2>&1; rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] || problems+=" exit $rc;"
    for r in 0 1; do
        want="in all_to_all #2 of the world group (world ranks 0,1,2) called at test/test_comm.cu:[0-9]*"
        want+=".*: missing rank 2 (no report: dead or hung); no report from rank 2"
        n=$(grep -c "watchdog: rank $r: .* $want" "$log")
        [ "$n" -eq 1 ] || problems+=" rank $r: $n lines naming all_to_all #2 and the missing rank 2;"
    done
    mesh=$(python3 test/watchdog_lines.py "$log" --np 3 --tp 1 --pp 1 --faulty 2)
    [ -z "$mesh" ] || problems+=" $mesh;"
    if [ -z "$problems" ]; then
        ok "${b}_a2a_hang: exit $rc after $((SECONDS-t0)) s; $(grep -m1 'watchdog: rank 0:' "$log" | cut -c1-160)..."
    else
        bad "${b}_a2a_hang:$problems (see $log)"
    fi
done

# a rank leaves while the others wait inside an all-reduce: mpirun must end the job, non-zero
die() {  # NAME ARGS...
    local name=$1; shift
    local t0; t0=$(date +%s.%N)
    timeout 30 "${MPIRUN[@]}" -np 4 ./build/test_comm_cpu "$@" >"$LOG/$name.log" 2>&1
    local rc=$?
    local dt; dt=$(printf '%.1f' "$(echo "$(date +%s.%N) - $t0" | bc)")
    if [ $rc -ne 0 ] && [ $rc -ne 124 ]; then
        ok "$name: mpirun exited $rc after ${dt} s (the others were waiting in an all-reduce)"
    else
        bad "$name: mpirun exited $rc after ${dt} s (124 = hung until the 30 s timeout)"
    fi
}
die die_rank1_exit1      --die-rank 1
die die_rank0_exit1      --die-rank 0
die die_rank3_sigkill    --die-rank 3 --die-signal

# the CUDA build (NCCL) must compile even where no GPU can run it (make test-build builds it with the others, two at a
# time; this make rebuilds it only when a source is newer)
if command -v "${NVCC:-nvcc}" >/dev/null 2>&1; then
    if make -s -f Makefile -f test/comm.mk build/test_comm_cuda >"$LOG/build_cuda.log" 2>&1; then
        ok "cuda_build: nvcc compiles and links the NCCL path (build/test_comm_cuda)"
    else
        bad "cuda_build: nvcc failed, see $LOG/build_cuda.log"; tail -5 "$LOG/build_cuda.log"
    fi
else
    echo "skip cuda_build: no nvcc"
fi

echo "test_comm: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
