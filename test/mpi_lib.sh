# mpi_lib.sh: what the tests that run the trainer share (sourced by the test/test_*.sh scripts that run it;
# test_resume.sh takes only the counters): the mpirun flags, the check counters, the bad-layout and
# bad-flag checks, a training run and the comparison of its samples, a self-checking test program under
# tp. The sourcing script sets CPU, CHECK, LOG, tmp and the array common (the flags every run takes)
# before it calls them (test_ddp_zero.sh defines its own train; test_health.sh, test_loss_scale.sh and
# test_faults_precision.sh their own run).

# the mpirun flags of test/test_comm.sh (why each: see there), one OpenMP thread per rank
MPIRUN=(mpirun -q --oversubscribe --mca orte_abort_on_non_zero_status 1 --mca orte_allowed_exit_without_sync 0 -x OMP_NUM_THREADS)
[ "$(id -u)" = "0" ] && MPIRUN+=(--allow-run-as-root)

pass=0; fail=0; skipped=0
ok()  { echo "ok   $*"; pass=$((pass+1)); }
bad() { echo "FAIL $*"; fail=$((fail+1)); }
check() { if $CHECK "$@"; then pass=$((pass+1)); else fail=$((fail+1)); fi; }

# case_bg FN NAME ARGS...: `FN NAME ARGS...` in the background, its lines to $LOG/NAME.result, at most CASE_JOBS (default
# 3) at once: for cases that spend their time waiting, idle (a watchdog's time-out), which overlap on 2 cores.
# cases_wait: wait for them all, then print their lines in the order they started and count them.
CASE_JOBS=${CASE_JOBS:-3}
cases_queued=()
case_bg() {
    while [ "$(jobs -rp | wc -l)" -ge "$CASE_JOBS" ]; do wait -n; done
    ( "$@" ) > "$LOG/$2.result" 2>&1 &
    cases_queued+=("$2")
}
cases_wait() {
    wait
    local n l
    for n in "${cases_queued[@]}"; do
        while IFS= read -r l; do
            case $l in "ok   "*) pass=$((pass+1)) ;; "FAIL "*) fail=$((fail+1)) ;; esac
            echo "$l"
        done < "$LOG/$n.result"
        grep -qE '^(ok  |FAIL) ' "$LOG/$n.result" || bad "$n: the case printed no result (see $LOG/$n.result)"
    done
    cases_queued=()
}

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

# a bad flag value, one process: one line starting "error: " and naming SUBSTRING, a non-zero exit (not a
# time-out), no output directory
badflag() {  # SUBSTRING ARGS...
    local sub=$1; shift
    local out rc lines
    out=$(timeout 60 "$CPU" "${common[@]}" --output-dir "$tmp/badflag" "$@" 2>&1); rc=$?
    lines=$(printf '%s\n' "$out" | grep -c .)
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$lines" -eq 1 ] && [[ "$out" == "error: "*"$sub"* ]] && [ ! -e "$tmp/badflag" ]; then
        ok "bad flag $*: one line: $out"
    else bad "bad flag $*: exit $rc, $lines lines: $out"; fi
}

# train NAME NP BIN ARGS...: a training run into $tmp/NAME with the flags of common (NP 0: one process
# without mpirun; the emulated builds see EMU_DEVICES devices, 8 unless set); log in $LOG/NAME.log
train() {
    local name=$1 np=$2 bin=$3; shift 3
    local cmd=("$bin")
    [ "$np" -gt 0 ] && cmd=("${MPIRUN[@]}" -x EMU_DEVICES -np "$np" "$bin")
    EMU_DEVICES=${EMU_DEVICES:-8} timeout 300 "${cmd[@]}" "${common[@]}" --output-dir "$tmp/$name" --report-json "$tmp/$name.json" "$@" \
        > "$LOG/$name.log" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || bad "$name: exit $rc (see $LOG/$name.log): $(tail -2 "$LOG/$name.log" | tr '\n' ' ')"
    return $rc
}
# the sampled text and the greedy answers of the exact-match evaluation (its first 8 examples)
samples() { grep -a -E '^sample|^  .* -> ' "$1" | md5sum | cut -c1-12; }
same_samples() {  # NAME RUN REF
    local a b
    a=$(samples "$LOG/$2.log"); b=$(samples "$LOG/$3.log")
    if [ "$a" = "$b" ] && [ "$(grep -ac '^sample' "$LOG/$2.log")" -gt 0 ] && [ "$(grep -ac ' -> ' "$LOG/$2.log")" -gt 0 ]; then
        ok "$1: samples and exact-match answers the same text ($(grep -ac -E '^sample|^  .* -> ' "$LOG/$2.log") lines)"
    else bad "$1: samples differ ($LOG/$2.log vs $LOG/$3.log)"; fi
}

# tp_program NAME NP BIN SUMMARY TIMEOUT: a test program that checks itself on every rank of --tp NP
# under mpirun (test/world_check.h): its "ok"/"FAIL" lines relayed with NAME in front and counted, and
# a failure too unless it printed "SUMMARY: N passed, 0 failed" with N > 0 (it finished and checked
# something). Log in $LOG/NAME.log.
tp_program() {
    local out
    out=$(EMU_DEVICES=${EMU_DEVICES:-8} timeout "$5" "${MPIRUN[@]}" -x EMU_DEVICES -np "$2" "$3" --tp "$2" 2>&1)
    echo "$out" > "$LOG/$1.log"
    printf '%s\n' "$out" | grep -E '^(ok|FAIL)' | sed "s/^\(ok  \|FAIL\) /&$1: /"
    pass=$((pass + $(printf '%s\n' "$out" | grep -c '^ok'))); fail=$((fail + $(printf '%s\n' "$out" | grep -c '^FAIL')))
    printf '%s\n' "$out" | grep -q "$4: [1-9][0-9]* passed, 0 failed" || bad "$1: did not finish (see $LOG/$1.log)"
}
