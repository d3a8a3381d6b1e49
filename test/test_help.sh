#!/usr/bin/env bash
# test_help.sh: every program the Makefile builds answers --help, and refuses a flag it does not know.
#
# The programs come from make itself, not from a list kept here: every file target of the Makefile's
# database (`make -pq`) under build/ or named train_gpt*, without an extension (so not the .o, .so and
# .flags files), and for each, the source it is compiled from (the first prerequisite, from `make -pqk
# <programs>`, which resolves the pattern rules: build/%_cpu, build/cuda/%, ...). For each one built:
#   1. `<prog> --help`: exit 0 within LIMIT seconds (it must not do the program's work: a test or a
#      benchmark takes longer), nothing on stderr, stdout's first line "usage: <prog> ..." (the
#      trainers' args.h: "usage: train_gpt"), then at least one more line (what the program does, its
#      arguments and their defaults)
#   2. `<prog> -h`: the same text
#   3. `<prog> --no-such-flag`: a non-zero exit (not a time-out, not a signal) within LIMIT seconds and
#      exactly one line of output (stdout and stderr together) that names the flag and calls it unknown
#      (not "--no-such-flag needs a value", as build/pipeline_sim said of --help)
# and over all of them:
#   4. each text is its program's own: programs built from different sources print different texts
#      (the first line's program name left out), so a text copied from another program fails here
# A program not built: one compiled by nvcc is skipped ("no GPU here": a machine without nvcc, or the
# mutation tool's scratch copy, which never builds them); any other is a failure when `make test-build`
# builds it (its prerequisites, through the phony targets such as dev-cuda), and otherwise (the
# benchmarks, build/cuda_emu/*: not part of test-build) gets a "note:" line.
# The programs that need mpirun answer --help and the unknown flag without it (before MPI starts).
# About 10-20 s: three short runs of each of ~85 programs. PROGS=REGEX checks only the programs it matches.
set -u
cd "$(dirname "$0")/.."
pass=0; fail=0; skipped=0
ok()   { echo "ok   $*"; pass=$((pass+1)); }
bad()  { echo "FAIL $*"; fail=$((fail+1)); }
skip() { echo "skip $*"; skipped=$((skipped+1)); }
LIMIT=${HELP_LIMIT_S:-5}   # seconds: --help is a printf; the quickest test program runs for longer than this
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
FLAG=--no-such-flag-h23

# the programs, their sources and whether test-build builds them: "PROG SOURCE in|out", from make's database
make -pq --no-print-directory __help_list_nothing__ > "$tmp/db" 2>/dev/null
python3 - "$tmp/db" > "$tmp/progs" <<'EOF' || { echo "FAIL could not list the programs from make -pq"; echo "help: 0 passed, 1 failed"; exit 1; }
import os, re, subprocess, sys
db = open(sys.argv[1]).read().split("\n")
rules, phony = {}, set()
for line in db:
    m = re.match(r"^([A-Za-z0-9_./%-]+):(?!=)\s*(.*)$", line)
    if not m:
        continue
    target, prereqs = m.group(1), m.group(2).split()
    if target == ".PHONY":
        phony.update(prereqs)
    else:
        rules.setdefault(target, []).extend(prereqs)
def is_program(t):
    return (t.startswith("build/") or t.startswith("train_gpt")) and "%" not in t and "." not in os.path.basename(t) \
        and not t.startswith("build/flags/")
progs = sorted(t for t in rules if is_program(t))
# what `make test-build` builds: its prerequisites, through phony targets (dev-cuda: build/cuda/*)
built, todo = set(), list(rules.get("test-build", []))
while todo:
    t = todo.pop()
    if t in built:
        continue
    built.add(t)
    if t in phony:
        todo.extend(rules.get(t, []))
if not progs or not built:
    sys.exit(1)
# each program's source: the first prerequisite once make has resolved the pattern rules
out = subprocess.run(["make", "-pqk", "--no-print-directory"] + progs, capture_output=True, text=True).stdout
src = {}
for line in out.split("\n"):
    m = re.match(r"^([A-Za-z0-9_./-]+):(?!=)\s*(\S+)", line)
    # (a target-specific variable, "prog: .SHELLSTATUS := 0" where a $(shell) ran for the target, is no prerequisite)
    if m and re.match(r"^[A-Za-z0-9_./-]+:\s*\S+\s*[:+?]?=", line):
        continue
    if m and m.group(1) in progs and m.group(1) not in src:
        src[m.group(1)] = m.group(2)
for p in progs:
    print(p, src.get(p, "?"), "in" if p in built else "out")
EOF
NVCC=$(make -s --no-print-directory --eval='help-print-nvcc: ; @echo $(NVCC)' help-print-nvcc 2>/dev/null)
have_nvcc=0; command -v "${NVCC:-nvcc}" > /dev/null 2>&1 && have_nvcc=1
# PROGS=REGEX checks only the programs whose path matches (while working on a few)
if [ -n "${PROGS:-}" ]; then grep -E "^[^ ]*(${PROGS})[^ ]* " "$tmp/progs" > "$tmp/progs.sel"; mv "$tmp/progs.sel" "$tmp/progs"; fi
echo "$(wc -l < "$tmp/progs") programs from make -pq ($(grep -c ' in$' "$tmp/progs") of them built by make test-build)"

# run_limited OUT ERR CMD...: runs CMD with a time limit; sets rc and ms
run_limited() {
    local o=$1 e=$2; shift 2
    local t0=$(date +%s%N)
    timeout -s KILL $((LIMIT * 2)) "$@" > "$o" 2> "$e" < /dev/null; rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
}

# names_prog LINE: LINE is "usage: NAME ..." and NAME is $prog, by its path or a prefix of its file name (the
# trainers' args.h prints "usage: train_gpt" in every build: train_gpt_cpu, build/train_gpt_emu_bf16, ...)
names_prog() {
    local w
    [[ "$1" == "usage: "* ]] || return 1
    w=$(echo "$1" | awk '{print $2}')
    w=${w##*/}
    [ -n "$w" ] && [[ "$(basename "$prog")" == "$w"* ]]
}

: > "$tmp/texts"
while read -r prog source where; do
    run=$prog; [[ "$prog" == */* ]] || run=./$prog   # train_gpt_cpu: in the top directory, not on PATH
    if [ ! -x "$prog" ]; then
        # compiled by nvcc? (the recipe make would run for it)
        if make -n --no-print-directory "$prog" 2>/dev/null | grep -qE "^${NVCC:-nvcc} "; then
            skip "$prog --help: not built: a CUDA program, compiled by ${NVCC:-nvcc} ($( [ $have_nvcc -eq 1 ] && echo "installed here, but no nvcc build was made" || echo "not installed here"); no GPU here)"
            continue
        fi
        if [ "$where" = in ]; then bad "$prog: not built, but make test-build builds it (run make test-build first)"
        else echo "note: $prog not built (not part of make test-build; make $prog builds it): not checked"; fi
        continue
    fi
    # 1. --help
    run_limited "$tmp/out" "$tmp/err" "$run" --help
    first=$(head -1 "$tmp/out"); lines=$(grep -c . "$tmp/out"); errs=$(grep -c . "$tmp/err")
    if [ $rc -eq 0 ] && [ $ms -lt $((LIMIT * 1000)) ] && [ "$errs" -eq 0 ] && names_prog "$first" && [ "$lines" -ge 2 ]; then
        ok "$prog --help: exit 0 in $ms ms, $lines lines: $first"
    else
        bad "$prog --help: exit $rc in $ms ms (limit ${LIMIT} s), $lines lines, $errs on stderr: $(head -c 300 "$tmp/out" | head -2 | tr '\n' ' ') $(head -c 300 "$tmp/err" | head -2 | tr '\n' ' ')"
    fi
    [ "$lines" -ge 2 ] && tail -n +2 "$tmp/out" | md5sum | cut -c1-12 | sed "s|\$| $source $prog|" >> "$tmp/texts"
    # 2. -h: the same text
    cp "$tmp/out" "$tmp/help_out"
    run_limited "$tmp/out" "$tmp/err" "$run" -h
    if [ $rc -eq 0 ] && names_prog "$(head -1 "$tmp/out")" && cmp -s "$tmp/out" "$tmp/help_out"; then ok "$prog -h: the --help text"
    else bad "$prog -h: exit $rc, $(cmp -s "$tmp/out" "$tmp/help_out" && echo same || echo other) text: $(head -1 "$tmp/out") $(head -1 "$tmp/err")"; fi
    # 3. an unknown flag: one line naming it, a non-zero exit (not a time-out or a crash)
    run_limited "$tmp/out" "$tmp/err" "$run" "$FLAG"
    msg=$(cat "$tmp/out" "$tmp/err"); lines=$(printf '%s\n' "$msg" | grep -c .)
    if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ $ms -lt $((LIMIT * 1000)) ] && [ "$lines" -eq 1 ] && [[ "$msg" == *"$FLAG"* ]] \
       && [[ "${msg,,}" == *unknown* ]]; then
        ok "$prog $FLAG: exit $rc, one line: $msg"
    else
        bad "$prog $FLAG: exit $rc in $ms ms, $lines lines: $(printf '%s' "$msg" | head -3 | tr '\n' ' ' | head -c 300)"
    fi
done < "$tmp/progs"

# 4. each program's text is its own: one text per source, no two sources with the same text
n_src=$(awk '{print $2}' "$tmp/texts" | sort -u | wc -l)
dups=$(awk '{print $1, $2}' "$tmp/texts" | sort -u | awk '{print $1}' | sort | uniq -d)
if [ "$n_src" -gt 0 ] && [ -z "$dups" ]; then
    ok "the --help texts of the $n_src sources are all different"
else
    for d in $dups; do bad "the same --help text from different sources: $(grep "^$d " "$tmp/texts" | awk '{print $3}' | tr '\n' ' ')"; done
    [ "$n_src" -gt 0 ] || bad "no --help text was read"
fi

echo "help: $pass passed, $fail failed, $skipped skipped"
[ $fail -eq 0 ]
