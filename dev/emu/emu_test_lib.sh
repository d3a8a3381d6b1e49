# emu_test_lib.sh: what the emulator's test scripts share (sourced by dev/emu/test_emu.sh and
# dev/emu/test_wmma.sh, not run on its own): the opening (the four builds of one test program found in
# the build folder, a scratch folder removed at exit, the counts, the start time, the sanitizers'
# options), the lines of a case (ok, bad) and the two verdicts both scripts give: a correct program's
# results against the forward order's, and a planted bug's exit status and report.
# shellcheck shell=bash

# emu_test_open DIR PROG TARGET WIDTH: T, A, S, R = DIR/PROG and its _asan, _tsan and _racecheck builds;
# ends the script if one is missing, saying to build it with `make TARGET` (the missing program itself
# when TARGET is empty). WIDTH: the width of the ok / FAIL column of the case lines.
emu_test_open() {
    local dir=$1 prog=$2 target=$3
    case_width=$4
    T=$dir/$prog
    A=$dir/${prog}_asan
    S=$dir/${prog}_tsan
    R=$dir/${prog}_racecheck
    local bin
    for bin in "$T" "$A" "$S" "$R"; do
        if [ ! -x "$bin" ]; then
            echo "error: $bin not found: build it with 'make ${target:-$bin}' (${BASH_SOURCE[1]}:${BASH_LINENO[0]})" >&2
            exit 1
        fi
    done
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    pass=0
    fail=0
    # shellcheck disable=SC2034  # start: the sourcing script's, for its time line
    start=$(date +%s)
    # the sanitizers' own options: report to stderr, keep their usual exit codes
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
    export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=0}
}

# ok NAME / bad NAME WHY [OUT]: count a case and print its line (bad: with the head of OUT, if given)
ok() { pass=$((pass + 1)); printf '%-*s %s\n' "$case_width" ok "$1"; }
bad() {
    fail=$((fail + 1))
    printf '%-*s %s: %s\n' "$case_width" FAIL "$1" "$2"
    if [ -n "${3:-}" ] && [ -f "$3" ]; then head -n 25 "$3" | sed 's/^/      | /'; fi
}

# same_results NAME OUT REF: OUT has a "results" line, equal to REF when REF is given; otherwise bad
# NAME and return 1
same_results() {
    local name=$1 out=$2 ref=$3 got
    got=$(grep '^results ' "$out" | head -n 1)
    if [ -z "$got" ]; then bad "$name" "no results line" "$out"; return 1; fi
    if [ -n "$ref" ] && [ "$got" != "$ref" ]; then bad "$name" "'$got' differs from the forward order's '$ref'" "$out"; return 1; fi
}

# caught NAME RC OUT PATTERN...: a planted bug's program ended with status RC, output in OUT: ok NAME if
# RC is non-zero (not timeout's 124) and every PATTERN (grep -E) is in OUT, otherwise bad NAME
caught() {
    local name=$1 rc=$2 out=$3 p
    shift 3
    if [ "$rc" -eq 0 ]; then bad "$name" "exit status 0: the bug was not caught" "$out"; return; fi
    if [ "$rc" -eq 124 ]; then bad "$name" "timed out" "$out"; return; fi
    for p in "$@"; do
        if ! grep -qE -- "$p" "$out"; then bad "$name" "exit status $rc but no '$p' in the output" "$out"; return; fi
    done
    ok "$name"
}
