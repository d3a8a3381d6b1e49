# mpi_lib.sh: what the mpirun tests share (sourced by test/test_ddp_zero.sh and test/test_tp.sh): the
# mpirun flags, the check counters, and the bad-layout check. The sourcing script sets CPU, CHECK,
# tmp and the array common (the flags every run takes) before it calls them.

# the mpirun flags of test/test_comm.sh (why each: see there), one OpenMP thread per rank
MPIRUN=(mpirun -q --oversubscribe --mca orte_abort_on_non_zero_status 1 --mca orte_allowed_exit_without_sync 0 -x OMP_NUM_THREADS)
[ "$(id -u)" = "0" ] && MPIRUN+=(--allow-run-as-root)

pass=0; fail=0; skipped=0
ok()  { echo "ok   $*"; pass=$((pass+1)); }
bad() { echo "FAIL $*"; fail=$((fail+1)); }
check() { if $CHECK "$@"; then pass=$((pass+1)); else fail=$((fail+1)); fi; }

# a bad layout: one line starting "error: " and naming SUBSTRING, a non-zero exit (not a time-out),
# no output directory
badlayout() {  # NAME NP SUBSTRING ARGS...
    local name=$1 np=$2 sub=$3; shift 3
    local out rc lines
    out=$(timeout 60 "${MPIRUN[@]}" -np "$np" "$CPU" "${common[@]}" --output-dir "$tmp/bad_$name" "$@" 2>&1); rc=$?
    lines=$(printf '%s\n' "$out" | grep -c .)
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$lines" -eq 1 ] && [[ "$out" == "error: "*"$sub"* ]] && [ ! -e "$tmp/bad_$name" ]; then
        ok "bad layout $name: exit $rc, one line, nothing written: $out"
    else
        bad "bad layout $name: exit $rc, $lines lines, output dir $( [ -e "$tmp/bad_$name" ] && echo created || echo absent): $out"
    fi
}
