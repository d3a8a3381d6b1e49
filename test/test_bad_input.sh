#!/usr/bin/env bash
# test_bad_input.sh: every bad input ends with exactly one line on stderr that names the file or flag
# and says what was expected and what was found, a non-zero exit, and no file created or changed in
# the output directory (which already holds a checkpoint from a good run).
set -uo pipefail
BIN=${BIN:-./train_gpt_cpu}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0; fail=0

python3 dev/data/addition.py --train 2000 --val 100 --test 10 --out "$tmp/data" > /dev/null
D="$tmp/data"
model=(--model d2,C=32,NH=4,maxT=64,V=257)
good=(--train-data "$D/addition_train.bin" --val-data "$D/addition_val.bin" --tokenizer "$D/addition_tokenizer.bin"
      -b 4 -t 32 --steps 2 --val-every 0 --sample-every 0 --output-dir "$tmp/out")
# a good run first: its files must survive every bad run untouched
"$BIN" "${model[@]}" "${good[@]}" --checkpoint-every 2 > /dev/null || { echo "FAIL the good run failed"; exit 1; }
snapshot() { (cd "$tmp/out" && ls -l --time-style=+%s . | awk '{print $5, $6, $7}' && md5sum ./*) 2>/dev/null; }
snapshot > "$tmp/before"

# expect NAME "substring1|substring2|..." cmd...: non-zero exit, one stderr line containing each substring
expect() {
    local name=$1 subs=$2; shift 2
    "$@" > "$tmp/stdout" 2> "$tmp/stderr"
    local rc=$? lines msg why=""
    lines=$(grep -c . "$tmp/stderr")
    msg=$(head -1 "$tmp/stderr")
    [ $rc -ne 0 ] || why="exit code 0"
    [ "$lines" -eq 1 ] || why="$why; $lines lines on stderr"
    IFS='|' read -ra parts <<< "$subs"
    for s in "${parts[@]}"; do [[ "$msg" == *"$s"* ]] || why="$why; message lacks '$s'"; done
    snapshot > "$tmp/after"
    cmp -s "$tmp/before" "$tmp/after" || why="$why; the output directory changed: $(diff "$tmp/before" "$tmp/after" | tr "\n" " ")"
    if [ -z "$why" ]; then echo "ok   $name: $msg"; pass=$((pass+1));
    else echo "FAIL $name: $why: $(cat "$tmp/stderr")"; fail=$((fail+1)); fi
}

# checkpoints
cp test/fixtures/tiny_model.bin "$tmp/magic.bin"; printf '\x01\x02\x03\x04' | dd of="$tmp/magic.bin" conv=notrunc 2>/dev/null
expect "checkpoint with a wrong magic" "$tmp/magic.bin|expected magic 20240326|found 67305985" \
    "$BIN" --model "$tmp/magic.bin" "${good[@]}"
cp test/fixtures/tiny_model.bin "$tmp/version.bin"; printf '\x04\x00\x00\x00' | dd of="$tmp/version.bin" bs=1 seek=4 conv=notrunc 2>/dev/null
expect "checkpoint with a wrong version" "$tmp/version.bin|expected version 3|found 4" \
    "$BIN" --model "$tmp/version.bin" "${good[@]}"
head -c 50000 test/fixtures/tiny_model.bin > "$tmp/trunc.bin"
expect "truncated checkpoint" "$tmp/trunc.bin|expected 121344 bytes|found 50000" \
    "$BIN" --model "$tmp/trunc.bin" "${good[@]}"
expect "missing checkpoint" "--model|$tmp/none.bin" "$BIN" --model "$tmp/none.bin" "${good[@]}"

# data shards
cp "$D/addition_train.bin" "$tmp/long.bin"; printf '\x00\x00' >> "$tmp/long.bin"
expect "shard whose size disagrees with its header" "--train-data|$tmp/long.bin|expected|found" \
    "$BIN" "${model[@]}" "${good[@]}" --train-data "$tmp/long.bin"
expect "token id >= vocab size" "--train-data|addition_train.bin|vocab size 200|found 256" \
    "$BIN" --model d2,C=32,NH=4,maxT=64,V=200 "${good[@]}"
expect "missing data file" "--train-data|$tmp/nothing.bin" \
    "$BIN" "${model[@]}" "${good[@]}" --train-data "$tmp/nothing.bin"
expect "glob that matches nothing" "--val-data|$tmp/none_*.bin" \
    "$BIN" "${model[@]}" "${good[@]}" --val-data "$tmp/none_*.bin"
printf 'garbage' > "$tmp/tok.bin"
expect "truncated tokenizer" "$tmp/tok.bin|expected|found" \
    "$BIN" "${model[@]}" "${good[@]}" --tokenizer "$tmp/tok.bin"

# flags
expect "total batch not a multiple of B*T" "--total-batch|expected a positive multiple of B*T = 4*32 = 128|found 200" \
    "$BIN" "${model[@]}" "${good[@]}" --total-batch 200
expect "T larger than the model's context" "--seq-len|maxT = 64|found 128" \
    "$BIN" "${model[@]}" "${good[@]}" -t 128
expect "non-numeric flag value" "--batch|expected an integer|found 'four'" \
    "$BIN" "${model[@]}" "${good[@]}" -b four
expect "unknown flag" "unknown flag '--bogus'" "$BIN" "${model[@]}" "${good[@]}" --bogus 1
# numbers: the whole value, in the flag's range (llm/train/args.h): values that once went through (a negative or huge
# learning rate, a negative clip, a padded integer) and, for every numeric flag --help lists with its range,
# the values just outside it and malformed ones: one line naming the flag, the range and the value
expect "--lr -2147483648" "--lr: expected a number in [0, 1], found '-2147483648'" "$BIN" "${model[@]}" "${good[@]}" --lr -2147483648
expect "--lr 1e9" "--lr: expected a number in [0, 1], found '1e9'" "$BIN" "${model[@]}" "${good[@]}" --lr 1e9
expect "--grad-clip -5" "--grad-clip: expected a number in [0, 1000000], found '-5'" "$BIN" "${model[@]}" "${good[@]}" --grad-clip -5
# the MFU's peak (llm/train/mfu.h): a negative, a non-number, NaN, a peak no device has, a unit
for v in -1 abc nan 1e7 100TFLOPS; do
    expect "--peak-tflops $v" "--peak-tflops: expected a number in [0, 1000000], found '$v'" "$BIN" "${model[@]}" "${good[@]}" --peak-tflops "$v"
done
expect "-v ' 3'" "--val-every: expected an integer in [0, 1000000000], found ' 3'" "$BIN" "${model[@]}" "${good[@]}" -v ' 3'
expect "-l '3 '" "--lr: expected a number in [0, 1], found '3 '" "$BIN" "${model[@]}" "${good[@]}" -l '3 '
ranges=$("$BIN" --help | sed -nE 's/^  (--[a-z0-9-]+) .*; an integer in \[([^,]+), ([^]]+)\]$/\1 int \2 \3/p; s/^  (--[a-z0-9-]+) .*; a number in [[(]([^,]+), ([^])]+)[])]$/\1 float \2 \3/p; s/^  (--[a-z0-9-]+) .*; 0 or 1$/\1 bit 0 1/p')
nflags=0; nbad=0; badlist=""
while read -r flag kind lo hi _; do
    [ -z "$flag" ] && continue
    nflags=$((nflags + 1))
    case $kind in
        int) vals=("$(python3 -c "print(int(float('$lo')) - 1)")" "$(python3 -c "print(int(float('$hi')) + 1)")" "1.5" "7x") ;;
        float) vals=("$(python3 -c "print(repr(float('$lo') - 1 - abs(float('$lo'))))")" "$(python3 -c "print(repr(float('$hi') * 2 + 1))")" "nan" "0.5.1") ;;
        bit) vals=(2 -1 " 1" "1 ") ;;
    esac
    for v in "${vals[@]}"; do
        [ -n "$v" ] || { nbad=$((nbad + 1)); badlist="$badlist [$flag: no value made from its range '$lo' '$hi']"; continue; }
        "$BIN" "${model[@]}" "${good[@]}" "$flag" "$v" > "$tmp/stdout" 2> "$tmp/stderr"; rc=$?
        msg=$(cat "$tmp/stderr")
        if [ $rc -eq 0 ] || [ "$(grep -c . "$tmp/stderr")" -ne 1 ] || [[ "$msg" != "error: $flag: expected "*"found '$v'" ]]; then
            nbad=$((nbad + 1)); badlist="$badlist [$flag '$v': exit $rc: $msg]"
        fi
    done
done <<< "$ranges"
if [ "$nflags" -ge 30 ] && [ "$nbad" -eq 0 ]; then echo "ok   every numeric flag --help lists ($nflags): 4 values outside its range or malformed each, one line naming the flag, the range and the value"; pass=$((pass+1))
else echo "FAIL numeric flag ranges: $nflags flags parsed from --help, $nbad bad:$badlist"; fail=$((fail+1)); fi
expect "bad model descriptor" "--model|C divisible by NH" "$BIN" --model d2,C=30,NH=4 "${good[@]}"

# resumable state
head -c 3000 "$tmp/out/state_00000002.bin" > "$tmp/state_trunc.bin"
expect "truncated state file" "--resume|$tmp/state_trunc.bin|expected|found 3000" \
    "$BIN" "${model[@]}" "${good[@]}" --resume "$tmp/state_trunc.bin"
for ver in 0 5; do  # (0 and the version after STATE_VERSION 4)
    cp "$tmp/out/state_00000002.bin" "$tmp/state_v$ver.bin"; printf "\\x0$ver\\x00\\x00\\x00" | dd of="$tmp/state_v$ver.bin" bs=1 seek=4 conv=notrunc 2>/dev/null
    expect "state file of version $ver" "--resume|$tmp/state_v$ver.bin|expected version 1 to 4|found $ver" \
        "$BIN" "${model[@]}" "${good[@]}" --resume "$tmp/state_v$ver.bin"
done
expect "state of another model" "--resume|model config|expected" \
    "$BIN" --model d2,C=64,NH=4,maxT=64,V=257 "${good[@]}" --resume "$tmp/out/state_00000002.bin"

# output directories: nested directories that do not exist yet are made, with their parents, for
# --output-dir, --log and --report-json; a file where a directory must be is one clear line naming
# the flag, and nothing is created (not even the directories of the other flags)
"$BIN" "${model[@]}" "${good[@]}" --checkpoint-every 2 --output-dir "$tmp/n1/a/b" --log "$tmp/n2/c/log.jsonl" \
    --report-json "$tmp/n3/d/e/report.json" > "$tmp/nested.out" 2>&1
if [ -f "$tmp/n1/a/b/model_00000002.bin" ] && [ -f "$tmp/n2/c/log.jsonl" ] && [ -f "$tmp/n3/d/e/report.json" ]; then
    echo "ok   nested output directories that do not exist are created (--output-dir, --log, --report-json)"; pass=$((pass+1))
else
    echo "FAIL nested output directories: $(find "$tmp"/n1 "$tmp"/n2 "$tmp"/n3 2>&1 | tr '\n' ' ') $(tail -2 "$tmp/nested.out")"; fail=$((fail+1))
fi
touch "$tmp/afile"
nothing_made() {  # NAME PATH...: none of the paths exists
    local name=$1; shift
    for p in "$@"; do
        if [ -e "$p" ]; then echo "FAIL $name: $p was created"; fail=$((fail+1)); return; fi
    done
    echo "ok   $name: nothing created"; pass=$((pass+1))
}
expect "--output-dir under a file" "--output-dir|$tmp/afile/x|'$tmp/afile' exists and is not a directory" \
    "$BIN" "${model[@]}" "${good[@]}" --output-dir "$tmp/afile/x" --log "$tmp/n4/log.jsonl"
nothing_made "--output-dir under a file" "$tmp/n4"
expect "--log under a file" "--log|$tmp/afile|not a directory" \
    "$BIN" "${model[@]}" "${good[@]}" --output-dir "$tmp/n5/out" --log "$tmp/afile/log.jsonl"
nothing_made "--log under a file" "$tmp/n5"
expect "--report-json under a file" "--report-json|$tmp/afile/r|not a directory" \
    "$BIN" "${model[@]}" "${good[@]}" --output-dir "$tmp/n6/out" --report-json "$tmp/afile/r/report.json"
nothing_made "--report-json under a file" "$tmp/n6"

echo "test_bad_input: $pass passed, $fail failed, 0 skipped"
[ "$fail" -eq 0 ]
