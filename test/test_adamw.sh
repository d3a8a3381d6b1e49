#!/usr/bin/env bash
# test_adamw.sh: AdamW's --beta1, --beta2, --eps (llm/train/args.h), their place in the resumable state
# (llm/ckpt/checkpoint.h, version 3, header[38..40]) and what a run does with them across process lifetimes.
# References are AdamW's equations (Loshchilov & Hutter 2019, Algorithm 2, with Adam's bias correction), evaluated
# here in float64 on the moments and parameters the state files hold:
#   - after step 1 (m0 = v0 = 0): m = (1 - b1) g and v = (1 - b2) g^2, so m^2 / v = (1 - b1)^2 / (1 - b2) for every
#     parameter with a gradient: the betas given reached the moments;
#   - step 2 (weight decay 0): p2 - p1 = -lr_2 * mhat / (sqrt(vhat) + eps), mhat = m2 / (1 - b1^2),
#     vhat = v2 / (1 - b2^2), lr_2 from the log: eps given reached the update;
#   - no flags = --beta1 0.9 --beta2 0.95 --eps 1e-8 (the defaults unchanged), and the state says so;
#   - lifetimes: a run resumed without the flags goes on with its checkpoint's values (the state of its next step
#     is byte for byte the uninterrupted run's; sharded: step 4's loss and norm are), gathered and sharded; a flag given on resuming wins, with a line
#     saying so, and the next resume (no flags) keeps the new value; a state of version 2 (before the fields)
#     resumes with 0.9, 0.95, 1e-8, the values every run used then;
#   - bad values (--beta1 1, --beta2 -0.1, --eps 0, --eps 2, --beta1 nan) and a state whose header[39] holds 1.5:
#     one error line naming the flag or the header slots, a non-zero exit, nothing written.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-./train_gpt_cpu}
source test/mpi_lib.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}

python3 dev/data/addition.py --train 2000 --val 100 --test 10 --out "$tmp/data" > /dev/null
common=(--model d2,C=32,NH=4,maxT=64,V=257 --train-data "$tmp/data/addition_train.bin" --val-data "$tmp/data/addition_val.bin"
        --tokenizer "$tmp/data/addition_tokenizer.bin" -b 4 -t 32 --steps 3 --lr 1e-3 --warmup 1 --weight-decay 0
        --val-every 0 --sample-every 0 --checkpoint-every 1)
given=(--beta1 0.8 --beta2 0.99 --eps 1e-3)   # none of them the default, eps near the gradients' size (1e-4..1e-2)

# a state file's AdamW fields, its version, and its arrays (FP32 build: parameters, m, v)
cat > "$tmp/st.py" <<'PY'
import struct, sys
import numpy as np
def read(path):
    b = open(path, "rb").read()
    h = np.frombuffer(b[:1024], dtype="<i4")
    n = int(h[10]) | (int(h[11]) << 32)
    f = np.frombuffer(b[1024:1024 + 12 * n], dtype="<f4").astype(np.float64)
    betas = struct.unpack("<3f", b[38 * 4:41 * 4])
    return int(h[1]), betas, f[:n], f[n:2 * n], f[2 * n:3 * n]
PY
SV=4  # the state version this build writes (llm/ckpt/checkpoint.h STATE_VERSION)
hdr() { python3 -c 'import sys; sys.path.insert(0, sys.argv[2]); import st; v, b, *_ = st.read(sys.argv[1]); print(v, "%.9g %.9g %.9g" % b)' "$1" "$tmp"; }
f32() { python3 -c 'import struct, sys; print(" ".join("%.9g" % struct.unpack("<f", struct.pack("<f", float(x)))[0] for x in sys.argv[1:]))' "$@"; }

# 1. the defaults unchanged: no flags and the three flags at the old values train alike, and the state says 0.9 0.95 1e-8
"$BIN" "${common[@]}" --output-dir "$tmp/d1" > "$tmp/d1.out" 2>&1
"$BIN" "${common[@]}" --beta1 0.9 --beta2 0.95 --eps 1e-8 --output-dir "$tmp/d2" > "$tmp/d2.out" 2>&1
if cmp -s "$tmp/d1/state_00000003.bin" "$tmp/d2/state_00000003.bin" && [ "$(hdr "$tmp/d1/state_00000003.bin")" = "$SV $(f32 0.9 0.95 1e-8)" ]; then
    ok "defaults: no flags = --beta1 0.9 --beta2 0.95 --eps 1e-8 (identical states), header: $(hdr "$tmp/d1/state_00000003.bin")"
else
    bad "defaults: states $(cmp -s "$tmp/d1/state_00000003.bin" "$tmp/d2/state_00000003.bin" && echo equal || echo differ), header '$(hdr "$tmp/d1/state_00000003.bin")', expected '$SV $(f32 0.9 0.95 1e-8)'"
fi

# 2. the flags reach the moments and the update (AdamW's equations, float64, on the states of steps 1 and 2)
"$BIN" "${common[@]}" "${given[@]}" --output-dir "$tmp/a" > "$tmp/a.out" 2>&1 || bad "run a: exit $? ($(tail -1 "$tmp/a.out"))"
out=$(python3 - "$tmp" <<'PY'
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1]); import st
d = sys.argv[1] + "/a/"
b1, b2, eps = 0.8, 0.99, 1e-3
_, betas, p1, m1, v1 = st.read(d + "state_00000001.bin")
_, _, p2, m2, v2 = st.read(d + "state_00000002.bin")
has = v1 > 1e-30
ratio = m1[has] ** 2 / v1[has]
want = (1 - b1) ** 2 / (1 - b2)
# float32 m and v each carry a relative rounding of 2^-24 (m squared: twice): 1e-5 is ~100x that, and the default
# betas would give 0.8 (a factor 5 away)
r_ok = np.all(np.abs(ratio / want - 1) < 1e-5)
lr = {o["step"]: o["lr"] for o in map(json.loads, open(d + "log.jsonl")) if "lr" in o}[2]
pred = -lr * (m2 / (1 - b1 ** 2)) / (np.sqrt(v2 / (1 - b2 ** 2)) + eps)
obs = p2 - p1
# the trainer's float32 update: its own rounding (~1e-6 relative) and p2's rounding to float32 (half an ulp of p)
tol = 1e-5 * np.abs(pred) + np.spacing(np.abs(p2).astype(np.float32)).astype(np.float64)
err = np.abs(obs - pred)
u_ok = np.all(err <= tol)
# the same with the default eps, as a witness that eps moves the update more than the tolerance
alt = -lr * (m2 / (1 - b1 ** 2)) / (np.sqrt(v2 / (1 - b2 ** 2)) + 1e-8)
moved = np.mean(np.abs(alt - pred) > tol)
print(int(r_ok and u_ok and moved > 0.5), "m^2/v at step 1: %d values, max rel dev %.2g from (1-b1)^2/(1-b2) = %.4g; step 2 update: "
      "%d values, max |obs - AdamW| / tol %.3f (eps 1e-8 instead would move %.0f%% of them past tol)"
      % (has.sum(), np.max(np.abs(ratio / want - 1)), want, len(p1), np.max(err / tol), 100 * moved))
PY
)
[ "${out%% *}" = 1 ] && ok "flags reach AdamW: ${out#* }" || bad "flags reach AdamW: ${out#* }"

# 3. lifetimes. b: resumed from a's step 2 without the flags: the checkpoint's values, the same step 3 as a's
"$BIN" "${common[@]}" --output-dir "$tmp/b" --resume "$tmp/a/state_00000002.bin" > "$tmp/b.out" 2>&1
if cmp -s "$tmp/a/state_00000003.bin" "$tmp/b/state_00000003.bin" && grep -q "^AdamW: .*beta1 0.8, beta2 0.99, eps 0.001," "$tmp/b.out"; then
    ok "resumed without flags: the checkpoint's beta1 0.8, beta2 0.99, eps 1e-3; step 3's state identical to the uninterrupted run's"
else
    bad "resumed without flags: $(grep '^AdamW' "$tmp/b.out"); states $(cmp -s "$tmp/a/state_00000003.bin" "$tmp/b/state_00000003.bin" && echo equal || echo differ)"
fi
# c: resumed with --beta2 0.95: the flag wins, one line says so; e: the next resume (no flags) keeps 0.95
"$BIN" "${common[@]}" --steps 4 --output-dir "$tmp/c" --resume "$tmp/a/state_00000002.bin" --beta2 0.95 > "$tmp/c.out" 2>&1
"$BIN" "${common[@]}" --steps 5 --output-dir "$tmp/c" --resume latest > "$tmp/e.out" 2>&1
line=$(grep -c "^--beta2 0.95 given: $tmp/a/state_00000002.bin was trained with 0.99 until now" "$tmp/c.out")
if [ "$line" = 1 ] && [ "$(hdr "$tmp/c/state_00000003.bin")" = "$SV $(f32 0.8 0.95 1e-3)" ] && ! cmp -s "$tmp/a/state_00000003.bin" "$tmp/c/state_00000003.bin" \
   && grep -q "resumed from $tmp/c/state_00000004.bin" "$tmp/e.out" && [ "$(hdr "$tmp/c/state_00000005.bin")" = "$SV $(f32 0.8 0.95 1e-3)" ]; then
    ok "resumed with --beta2 0.95: the flag wins (one line says so), the state says 0.95, and --resume latest without flags keeps it"
else
    bad "resumed with --beta2 0.95: note lines $line, headers '$(hdr "$tmp/c/state_00000003.bin")' / '$(hdr "$tmp/c/state_00000005.bin" 2>&1)'; $(tail -1 "$tmp/e.out")"
fi
# sharded checkpoints carry them too: resumed from ckpt_00000002/ without flags, step 3's loss and norm equal a's
# (step 4's loss is the first that the update of step 3, made with the resumed betas, shows in)
"$BIN" "${common[@]}" "${given[@]}" --steps 4 --output-dir "$tmp/a4" > "$tmp/a4.out" 2>&1
"$BIN" "${common[@]}" "${given[@]}" --steps 4 --checkpoint-format sharded --output-dir "$tmp/s" > "$tmp/s.out" 2>&1
"$BIN" "${common[@]}" --steps 4 --output-dir "$tmp/s2" --resume "$tmp/s/ckpt_00000002" > "$tmp/s2.out" 2>&1
s3() { python3 -c 'import json, sys; print([(o["train_loss"], o["grad_norm"]) for o in map(json.loads, open(sys.argv[1])) if o.get("step") == 4 and "train_loss" in o])' "$1"; }
if [ "$(s3 "$tmp/a4/log.jsonl")" = "$(s3 "$tmp/s2/log.jsonl")" ] && [ "$(s3 "$tmp/a4/log.jsonl")" != "[]" ] && grep -q "^AdamW: .*beta1 0.8, beta2 0.99, eps 0.001," "$tmp/s2.out"; then
    ok "sharded: resumed from ckpt_00000002/ without flags: beta1 0.8, beta2 0.99, eps 1e-3, step 4 as the uninterrupted run's $(s3 "$tmp/s2/log.jsonl")"
else
    bad "sharded: $(grep '^AdamW' "$tmp/s2.out"); step 4 $(s3 "$tmp/s2/log.jsonl") vs $(s3 "$tmp/a4/log.jsonl"); $(tail -1 "$tmp/s2.out")"
fi
# a state of version 2 (no fields: header[38..40] zero): resumed with the values every run used then
mkdir -p "$tmp/v2"; cp "$tmp/a/state_00000002.bin" "$tmp/v2/state_00000002.bin"; cp "$tmp/a/model_00000002.bin" "$tmp/v2/"
python3 - "$tmp/v2/state_00000002.bin" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
struct.pack_into("<i", b, 4, 2)
struct.pack_into("<3i", b, 38 * 4, 0, 0, 0)
open(sys.argv[1], "wb").write(b)
PY
python3 test/ckpt_verify.py --seal "$tmp/v2/state_00000002.bin" > /dev/null
"$BIN" "${common[@]}" --output-dir "$tmp/v2o" --resume "$tmp/v2/state_00000002.bin" > "$tmp/v2.out" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q "^AdamW: .*beta1 0.9, beta2 0.95, eps 1e-08," "$tmp/v2.out" && [ "$(hdr "$tmp/v2o/state_00000003.bin")" = "$SV $(f32 0.9 0.95 1e-8)" ]; then
    ok "a version-2 state resumes with beta1 0.9, beta2 0.95, eps 1e-8 and is saved on as version $SV"
else
    bad "version-2 state: exit $rc, $(grep '^AdamW' "$tmp/v2.out"), header '$(hdr "$tmp/v2o/state_00000003.bin" 2>&1)'; $(tail -1 "$tmp/v2.out")"
fi

# 4. bad values: one line naming the flag, the range and the value; non-zero exit; nothing written
for case in "--beta1 1|--beta1: expected a number in [0, 1), found '1'" "--beta2 -0.1|--beta2: expected a number in [0, 1), found '-0.1'" \
            "--eps 0|--eps: expected a number in (0, 1], found '0'" "--eps 2|--eps: expected a number in (0, 1], found '2'" \
            "--beta1 nan|--beta1: expected a number in [0, 1), found 'nan'"; do
    args=${case%%|*}; want=${case#*|}
    "$BIN" "${common[@]}" $args --output-dir "$tmp/bad" > "$tmp/bad.out" 2>&1; rc=$?
    if [ $rc -ne 0 ] && [ "$(grep -c . "$tmp/bad.out")" = 1 ] && [ "$(cat "$tmp/bad.out")" = "error: $want" ] && [ ! -e "$tmp/bad" ]; then
        ok "$args: one line, exit $rc, nothing written: $(cat "$tmp/bad.out")"
    else
        bad "$args: exit $rc, $(grep -c . "$tmp/bad.out") lines: $(head -2 "$tmp/bad.out" | tr '\n' ' ')"
    fi
done
# a state whose beta2 (header[39]) is 1.5, checksum resealed: the range check refuses it, nothing written
mkdir -p "$tmp/hb"; cp "$tmp/a/state_00000002.bin" "$tmp/hb/"
python3 -c 'import struct, sys; b = bytearray(open(sys.argv[1], "rb").read()); struct.pack_into("<f", b, 39 * 4, 1.5); open(sys.argv[1], "wb").write(b)' "$tmp/hb/state_00000002.bin"
python3 test/ckpt_verify.py --seal "$tmp/hb/state_00000002.bin" > /dev/null
"$BIN" "${common[@]}" --output-dir "$tmp/hbo" --resume "$tmp/hb/state_00000002.bin" > "$tmp/hb.out" 2>&1; rc=$?
if [ $rc -ne 0 ] && [ "$(grep -c '^error' "$tmp/hb.out")" = 1 ] && grep -q "header\[38..40\] (AdamW's beta1, beta2, eps): expected betas in \[0, 1) and eps in (0, 1\], found .*betas 0.8 1.5, eps 0.001" "$tmp/hb.out" \
   && [ -z "$(ls "$tmp/hbo" 2>/dev/null | grep -v log.jsonl)" ]; then
    ok "state with beta2 1.5 in header[39]: refused, $(grep '^error' "$tmp/hb.out" | cut -c1-150)..."
else
    bad "state with beta2 1.5: exit $rc: $(grep -v '^$' "$tmp/hb.out" | tail -2 | tr '\n' ' ')"
fi

echo "adamw: $pass passed, $fail failed, 0 skipped"
[ "$fail" -eq 0 ]
