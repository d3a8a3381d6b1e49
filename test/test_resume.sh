#!/usr/bin/env bash
# test_resume.sh: a run stopped at step 4 and resumed from its state file continues bit-identically:
# the losses and gradient norms of steps 5..8 and the final model and state files are the same bytes
# as those of an uninterrupted run. Also: --resume latest finds the newest state in --output-dir.
set -euo pipefail
BIN=${BIN:-./train_gpt_cpu}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source test/mpi_lib.sh  # pass, fail, ok, bad (no mpirun here)

python3 dev/data/addition.py --train 3000 --val 200 --test 20 --out "$tmp/data" > /dev/null
common=(--model d2,C=32,NH=4,maxT=64,V=257 --train-data "$tmp/data/addition_train.bin"
        --val-data "$tmp/data/addition_val.bin" --tokenizer "$tmp/data/addition_tokenizer.bin"
        -b 4 -t 32 --total-batch 256 --steps 8 --lr 1e-3 --warmup 2 --lr-final 0.1 --weight-decay 0.1
        --grad-clip 1.0 --val-every 4 --val-steps 2 --sample-every 3 --sample-len 8 --checkpoint-every 4)

"$BIN" "${common[@]}" --output-dir "$tmp/a" > "$tmp/a.out"
"$BIN" "${common[@]}" --output-dir "$tmp/b" --resume "$tmp/a/state_00000004.bin" > "$tmp/b.out"

# the fields that must match: step, train_loss, val_loss, lr, grad_norm (ms and tok/s are timings)
fields() { python3 -c '
import json, sys
for line in open(sys.argv[1]):
    o = json.loads(line)
    if "train_loss" in o and o["step"] > 4:
        print(o["step"], o["train_loss"], o.get("val_loss"), o["lr"], o["grad_norm"])' "$1"; }
fields "$tmp/a/log.jsonl" > "$tmp/a.fields"
fields "$tmp/b/log.jsonl" > "$tmp/b.fields"
if [ "$(wc -l < "$tmp/a.fields")" -eq 4 ] && cmp -s "$tmp/a.fields" "$tmp/b.fields"; then
    ok "steps 5..8 after resume: identical losses, val losses, lr and grad norms"
else
    bad "steps 5..8 after resume differ:"; diff "$tmp/a.fields" "$tmp/b.fields" || true
fi
# the learning rate of each step against the schedule written out independently (GPT-3 appendix B:
# linear warm-up over 2 steps to 1e-3, then a cosine from 1e-3 towards 0.1 x 1e-3 over the remaining
# steps, llm.c's convention: step s of n at ratio (s - warmup) / (n - warmup)), within float rounding
if python3 - "$tmp/a/log.jsonl" <<'PY'
import json, math, sys
lr, warm, total, final = 1e-3, 2, 8, 0.1e-3
got = {o["step"]: o["lr"] for o in map(json.loads, open(sys.argv[1])) if "lr" in o}
def want(step):  # step is 1-based in the log: the update of step s uses s - 1 completed steps
    s = step - 1
    if s < warm: return lr * (s + 1) / warm
    return final + 0.5 * (1 + math.cos(math.pi * (s - warm) / (total - warm))) * (lr - final)
bad = [(s, got[s], want(s)) for s in sorted(got) if abs(got[s] - want(s)) > 1e-6 * lr]
print("lr per step:", " ".join("%d:%.6g" % (s, got[s]) for s in sorted(got)))
sys.exit(1 if bad or len(got) != total else 0)
PY
then ok "learning rate of steps 1..8 = warm-up then cosine, written out independently (within 1e-6 lr)"
else bad "learning rate schedule differs from the warm-up + cosine formula"; fi
cmp -s "$tmp/a/model_00000008.bin" "$tmp/b/model_00000008.bin" && ok "final model: identical bytes" || bad "final model differs"
cmp -s "$tmp/a/state_00000008.bin" "$tmp/b/state_00000008.bin" && ok "final state (moments, data position, RNG): identical bytes" || bad "final state differs"
grep -a '^sample' "$tmp/a.out" | tail -1 > "$tmp/a.sample"; grep -a '^sample' "$tmp/b.out" | tail -1 > "$tmp/b.sample"
cmp -s "$tmp/a.sample" "$tmp/b.sample" && ok "the last sample is the same text (sampler RNG resumed)" || bad "samples differ"

# --resume latest picks state_00000008 in the output dir and has nothing left to do
"$BIN" "${common[@]}" --output-dir "$tmp/a" --resume latest > "$tmp/c.out"
grep -q "resumed from $tmp/a/state_00000008.bin at step 8" "$tmp/c.out" && ok "--resume latest finds the newest state" || bad "--resume latest"
ls "$tmp/a" "$tmp/b" | grep -q '\.tmp\.' && bad "temporary files left behind" || ok "no temporary files left behind"

echo "test_resume: $pass passed, $fail failed, 0 skipped"
[ "$fail" -eq 0 ]
